#!/usr/bin/env bash
# Step 2 of 3 (Acuity guide §3.4, step 2): calibrate an imported model and write its editable quantization
# table NAME.quantize. A pre-quantized .tflite already has its own NAME.quantize (written by the import): it
# is kept, unless FORCE=1 re-calibrates from the float graph.
# usage: 1_quantize_model.sh [NAME.json] [extra `pegasus quantize` flags, e.g. --compute-entropy]
# Hybrid precision: edit customized_quantize_layers in NAME.quantize, then run again with --hybrid (this
# writes NAME.quantize.json, which 2_export_case_code.sh and inference.sh then take as the model).
# Edit the variables below, or set any of them in the environment.
set -euo pipefail

NAME=${NAME:-}                        # the model's name (default: the stem of the .json argument)
OUT_DIR=${OUT_DIR:-.}                 # the folder of NAME.json/.data (ignored when a .json is given)
INPUT_META=${INPUT_META:-}            # default: OUT_DIR/NAME_inputmeta.yml (made from SOURCE_FILE if missing)
SOURCE_FILE=${SOURCE_FILE:-}          # dataset.txt, to write the input meta when there is none
CHANNEL_MEAN_VALUE=${CHANNEL_MEAN_VALUE:-}  # 'm1 m2 m3 scale', with SOURCE_FILE
QUANTIZER=${QUANTIZER:-asymmetric_affine}   # asymmetric_affine perchannel_symmetric_affine dynamic_fixed_point qbfloat16
QTYPE=${QTYPE:-uint8}                 # uint8 (asymmetric_affine), int8, int16, bfloat16
ALGORITHM=${ALGORITHM:-normal}        # normal kl_divergence moving_average
BATCH_SIZE=${BATCH_SIZE:-10}          # BATCH_SIZE x ITERATIONS samples of the dataset calibrate
ITERATIONS=${ITERATIONS:-10}
FORCE=${FORCE:-0}                     # 1: re-calibrate even a pre-quantized model's own table
PEGASUS=${PEGASUS:-pegasus}

if [ $# -gt 0 ] && [ "${1%.json}" != "$1" ]; then
  json=$1; shift; OUT_DIR=$(dirname "$json"); NAME=$(basename "${json%.json}")
fi
[ -n "$NAME" ] || { echo "1_quantize_model.sh: set NAME (or give NAME.json as the first argument)" >&2; exit 2; }
table=$OUT_DIR/$NAME.quantize
hybrid=0
for flag in "$@"; do [ "$flag" = "--hybrid" ] && hybrid=1; done
if [ "$hybrid" = 0 ] && [ "$FORCE" != 1 ] && [ -f "$table" ] && grep -q '^rounding: tflite' "$table"; then
  echo "$NAME is a pre-quantized TFLite model: keeping its own table $table (FORCE=1 re-calibrates it)"
  exit 0
fi
meta=${INPUT_META:-$OUT_DIR/${NAME}_inputmeta.yml}
if [ ! -f "$meta" ] && [ -n "$SOURCE_FILE" ]; then
  gen=(--model "$OUT_DIR/$NAME.json" --source-file "$SOURCE_FILE" --input-meta-output "$meta")
  [ -n "$CHANNEL_MEAN_VALUE" ] && gen+=(--channel-mean-value "$CHANNEL_MEAN_VALUE")
  "$PEGASUS" generate inputmeta "${gen[@]}"
fi
mode=(--rebuild)
[ "$hybrid" = 1 ] && mode=()
"$PEGASUS" quantize --model "$OUT_DIR/$NAME.json" --model-data "$OUT_DIR/$NAME.data" --with-input-meta "$meta" \
  --quantizer "$QUANTIZER" --qtype "$QTYPE" --algorithm "$ALGORITHM" \
  --batch-size "$BATCH_SIZE" --iterations "$ITERATIONS" --model-quantize "$table" "${mode[@]}" "$@"
