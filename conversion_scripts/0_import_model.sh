#!/usr/bin/env bash
# Step 1 of 3 (Acuity guide §3.4, step 1): import a trained model into NAME.json (graph) + NAME.data
# (weights) and, when a dataset is given, write NAME_inputmeta.yml (step B: preprocessing + dataset).
# usage: 0_import_model.sh [MODEL [OUT_DIR]] [extra `pegasus import FRAMEWORK` flags...]
# Edit the variables below, or set any of them in the environment: MODEL=m.tflite NAME=m ./0_import_model.sh
set -euo pipefail

# ---- the model ---------------------------------------------------------------------------------------------
NAME=${NAME:-}                        # NAME.json/.data/_inputmeta.yml (default: the model file's stem)
FRAMEWORK=${FRAMEWORK:-}              # onnx tflite tensorflow keras pytorch caffe darknet (default: from MODEL)
MODEL=${MODEL:-}                      # .onnx .tflite .pb SavedModel/ .h5 .hdf5 .keras .pt .pt2 .prototxt .cfg
WEIGHTS=${WEIGHTS:-}                  # caffe: .caffemodel; darknet: .weights (default: MODEL's stem + suffix)
INPUTS=${INPUTS:-}                    # input tensor names separated by spaces (tensorflow .pb: required)
OUTPUTS=${OUTPUTS:-}                  # output tensor names separated by spaces
INPUT_SIZE_LIST=${INPUT_SIZE_LIST:-}  # per input without batch, e.g. '224,224,3'; inputs separated by '#'
OUT_DIR=${OUT_DIR:-}                  # where the files go (default: the model's folder)
# ---- the input meta (step B; skipped while SOURCE_FILE is empty) -----------------------------------------
SOURCE_FILE=${SOURCE_FILE:-}          # dataset.txt: one sample (image, .npy, ...) per line
CHANNEL_MEAN_VALUE=${CHANNEL_MEAN_VALUE:-}  # 'm1 m2 m3 scale': out = (x - m) * scale, e.g. '128 128 128 0.0078125'
PEGASUS=${PEGASUS:-pegasus}           # the pegasus command

# positional arguments override MODEL and OUT_DIR; what follows goes to `pegasus import` unchanged
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then MODEL=$1; shift; fi
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUT_DIR=$1; shift; fi
[ -n "$MODEL" ] || { echo "0_import_model.sh: set MODEL (or give it as the first argument)" >&2; exit 2; }
model=${MODEL%/}
stem=$(basename "$model"); stem=${stem%.*}
if [ -z "$FRAMEWORK" ]; then
  case "$model" in
    *.onnx) FRAMEWORK=onnx ;;
    *.tflite) FRAMEWORK=tflite ;;
    *.pb|*.pbtxt|*.meta) FRAMEWORK=tensorflow ;;
    *.h5|*.hdf5|*.keras) FRAMEWORK=keras ;;
    *.pt|*.pth|*.pt2) FRAMEWORK=pytorch ;;
    *.prototxt) FRAMEWORK=caffe; WEIGHTS=${WEIGHTS:-${model%.*}.caffemodel} ;;
    *.cfg) FRAMEWORK=darknet; WEIGHTS=${WEIGHTS:-${model%.*}.weights} ;;
    *) if [ -f "$model/saved_model.pb" ]; then FRAMEWORK=tensorflow
       else echo "0_import_model.sh: don't know the framework of '$MODEL': set FRAMEWORK (suffixes known:" \
                 ".onnx .tflite .pb SavedModel/ .h5 .hdf5 .keras .pt .pt2 .prototxt .cfg)" >&2; exit 2; fi ;;
  esac
fi
NAME=${NAME:-$stem}
OUT_DIR=${OUT_DIR:-$(dirname "$model")}
mkdir -p "$OUT_DIR"

flags=(--model "$model" --output-model "$OUT_DIR/$NAME.json" --output-data "$OUT_DIR/$NAME.data")
[ -n "$WEIGHTS" ] && flags+=(--weights "$WEIGHTS")
[ -n "$INPUTS" ] && flags+=(--inputs "$INPUTS")
[ -n "$OUTPUTS" ] && flags+=(--outputs "$OUTPUTS")
[ -n "$INPUT_SIZE_LIST" ] && flags+=(--input-size-list "$INPUT_SIZE_LIST")
# a pre-quantized .tflite brings its own table: NAME.quantize, which 1_quantize_model.sh then keeps
[ "$FRAMEWORK" = tflite ] && flags+=(--output-quantize "$OUT_DIR/$NAME.quantize")
"$PEGASUS" import "$FRAMEWORK" "${flags[@]}" "$@"

if [ -n "$SOURCE_FILE" ]; then
  meta=(--model "$OUT_DIR/$NAME.json" --source-file "$SOURCE_FILE" --input-meta-output "$OUT_DIR/${NAME}_inputmeta.yml")
  [ -n "$CHANNEL_MEAN_VALUE" ] && meta+=(--channel-mean-value "$CHANNEL_MEAN_VALUE")
  "$PEGASUS" generate inputmeta "${meta[@]}"
fi
