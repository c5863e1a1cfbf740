# Builds the example host program of the bundle "@NAME@": `make`, then
#   ./@NAME@_run [-w @NAME@.weights.bin] [-n RUNS] [-o OUTPUT.bin] INPUT.npy
# The bundle must have been exported for this machine (the default --target). One exported with
# --relocation-model static (not the default here) links only into a non-PIE program: make LDFLAGS=-no-pie
NAME    = @NAME@
CC      = cc
CFLAGS  = -O2 -Wall
LDFLAGS =
LDLIBS  =

$(NAME)_run: main.c $(NAME).h $(NAME).o
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ main.c $(NAME).o $(LDLIBS)

clean:
	rm -f $(NAME)_run

.PHONY: clean
