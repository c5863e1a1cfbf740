#!/usr/bin/env bash
# Run an imported model on the PC (NumPy reference; Acuity guide §3.4, step 4) and print the top-5 of each
# output; the .tensor dumps of inputs and outputs and outputs.npz go to OUT_DIR/inference/.
# usage: inference.sh [NAME.json] [INPUT_FILE...]   (no input file: samples of the input meta's dataset)
# Edit the variables below, or set any of them in the environment.
set -euo pipefail

NAME=${NAME:-}                        # the model's name (default: the stem of the .json argument)
OUT_DIR=${OUT_DIR:-.}                 # the folder of NAME.json/.data/.quantize (ignored when a .json is given)
INPUT_META=${INPUT_META:-}            # preprocessing + dataset (default: OUT_DIR/NAME_inputmeta.yml if it exists)
DTYPE=${DTYPE:-float32}               # float32, or quantized: the integer arithmetic of the exported code
HYBRID=${HYBRID:-0}                   # 1: run NAME.quantize.json (after 1_quantize_model.sh --hybrid)
BATCH_SIZE=${BATCH_SIZE:-}            # without INPUT files: samples per batch and batches (default: all once)
ITERATIONS=${ITERATIONS:-}
PEGASUS=${PEGASUS:-pegasus}

if [ $# -gt 0 ] && [ "${1%.json}" != "$1" ]; then
  json=$1; shift; OUT_DIR=$(dirname "$json"); NAME=$(basename "${json%.json}"); NAME=${NAME%.quantize}
  case "$json" in *.quantize.json) HYBRID=1 ;; esac
fi
[ -n "$NAME" ] || { echo "inference.sh: set NAME (or give NAME.json as the first argument)" >&2; exit 2; }
json=$OUT_DIR/$NAME.json
[ "$HYBRID" = 1 ] && json=$OUT_DIR/$NAME.quantize.json
meta_file=${INPUT_META:-$OUT_DIR/${NAME}_inputmeta.yml}
flags=(--model "$json" --model-data "$OUT_DIR/$NAME.data" --dtype "$DTYPE" --postprocess classification_classic
       --output-dir "$OUT_DIR/inference")
[ -f "$meta_file" ] && flags+=(--with-input-meta "$meta_file")
[ "$DTYPE" = quantized ] && flags+=(--model-quantize "$OUT_DIR/$NAME.quantize")
[ -n "$BATCH_SIZE" ] && flags+=(--batch-size "$BATCH_SIZE")
[ -n "$ITERATIONS" ] && flags+=(--iterations "$ITERATIONS")
[ $# -gt 0 ] && flags+=(--input "$@")
"$PEGASUS" inference "${flags[@]}"
