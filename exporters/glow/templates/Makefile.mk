# Builds the example host program of the bundle "@NAME@": `make`, then
#   ./@NAME@_run [-w @NAME@.weights.bin] [-n RUNS] [-o OUTPUT.bin] INPUT.npy
# The bundle must have been exported for this machine (the default --target).
# -no-pie: a bundle built with --relocation-model static cannot go into a position-independent program.
NAME    = @NAME@
CC      = cc
CFLAGS  = -O2 -Wall
LDFLAGS = -no-pie
LDLIBS  =

$(NAME)_run: main.c $(NAME).h $(NAME).o
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ main.c $(NAME).o $(LDLIBS)

clean:
	rm -f $(NAME)_run

.PHONY: clean
