#!/usr/bin/env bash
# Run an imported model on the PC (NumPy reference) and print the top-5 of each output.
# usage: inference.sh MODEL_DIR/NAME.json [INPUT_FILE...]
#   The input meta (preprocessing; dataset when no input file is given) is $INPUT_META if set,
#   else NAME_inputmeta.yml next to the .json if it exists.
#   Dumps (.tensor per input/output, outputs.npz) go to MODEL_DIR/inference/.
#   DTYPE=quantized simulates the integer code with NAME.quantize (pass NAME.quantize.json for a hybrid model).
set -euo pipefail
json=${1:?usage: inference.sh NAME.json [INPUT_FILE...]}
shift
dir=$(dirname "$json"); name=$(basename "${json%.json}"); name=${name%.quantize}
meta_file=${INPUT_META:-$dir/${name}_inputmeta.yml}
meta=()
[ -f "$meta_file" ] && meta=(--with-input-meta "$meta_file")
inputs=()
[ $# -gt 0 ] && inputs=(--input "$@")
mkdir -p "$dir/inference"
quantized=()
[ "${DTYPE:-float32}" = quantized ] && quantized=(--model-quantize "$dir/$name.quantize")
pegasus inference --model "$json" --model-data "$dir/$name.data" --dtype "${DTYPE:-float32}" "${quantized[@]}" \
  "${meta[@]}" "${inputs[@]}" \
  --postprocess classification_classic --output-dir "$dir/inference"
