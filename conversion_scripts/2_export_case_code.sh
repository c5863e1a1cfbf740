#!/usr/bin/env bash
# Step 3 of 3: compile an imported model into a Glow-format bundle (NAME.o, NAME.h, weights, main.c, Makefile).
# usage: 2_export_case_code.sh NAME.json OUT_DIR [extra `pegasus export glow` flags, e.g. --target arm --mcpu cortex-m7]
#   The bundle for the host is built and run with:  make -C OUT_DIR && OUT_DIR/NAME_run INPUT.npy
set -euo pipefail
json=${1:?usage: 2_export_case_code.sh NAME.json OUT_DIR [flags...]}
out=${2:?usage: 2_export_case_code.sh NAME.json OUT_DIR [flags...]}
shift 2
mkdir -p "$out"
pegasus export glow --model "$json" --model-data "${json%.json}.data" --output-path "$out" "$@"
