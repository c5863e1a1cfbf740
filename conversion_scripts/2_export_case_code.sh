#!/usr/bin/env bash
# Step 3 of 3: compile an imported model into a Glow-format bundle (NAME.o, NAME.h, weights, main.c, Makefile).
# usage: 2_export_case_code.sh NAME.json OUT_DIR [extra `pegasus export glow` flags, e.g. --target arm --mcpu cortex-m7]
#   The bundle for the host is built and run with:  make -C OUT_DIR && OUT_DIR/NAME_run INPUT.npy
#   DTYPE=quantized exports integer kernels from NAME.quantize (next to the .json); pass NAME.quantize.json
#   for a hybrid model.
set -euo pipefail
json=${1:?usage: 2_export_case_code.sh NAME.json OUT_DIR [flags...]}
out=${2:?usage: 2_export_case_code.sh NAME.json OUT_DIR [flags...]}
shift 2
mkdir -p "$out"
base=${json%.json}; base=${base%.quantize}
quantized=()
[ "${DTYPE:-float32}" = quantized ] && quantized=(--dtype quantized --model-quantize "$base.quantize")
pegasus export glow --model "$json" --model-data "$base.data" --output-path "$out" "${quantized[@]}" "$@"
