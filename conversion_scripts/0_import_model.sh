#!/usr/bin/env bash
# Step 1 of 3: import a trained model into pegasus' model files NAME.json + NAME.data.
# usage: 0_import_model.sh MODEL_FILE [OUT_DIR] [extra `pegasus import` flags...]
#   MODEL_FILE  NAME.onnx (the framework is taken from the suffix)
#   OUT_DIR     where NAME.json / NAME.data go (default: next to the model)
set -euo pipefail
model=${1:?usage: 0_import_model.sh MODEL_FILE [OUT_DIR] [flags...]}
out=${2:-$(dirname "$model")}
shift $(( $# >= 2 ? 2 : 1 ))
name=$(basename "${model%.*}")
case "$model" in
  *.onnx) framework=onnx ;;
  *) echo "0_import_model.sh: don't know the framework of '$model' (supported: .onnx)" >&2; exit 2 ;;
esac
mkdir -p "$out"
pegasus import "$framework" --model "$model" --output-model "$out/$name.json" --output-data "$out/$name.data" "$@"
