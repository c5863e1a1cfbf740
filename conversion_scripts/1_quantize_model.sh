#!/usr/bin/env bash
# Step 2 of 3: calibrate an imported model and write its editable quantization table NAME.quantize.
# usage: 1_quantize_model.sh NAME.json [extra `pegasus quantize` flags, e.g. --algorithm kl_divergence]
#   QUANTIZER (default asymmetric_affine) and QTYPE (default uint8) choose the scheme;
#   the input meta is $INPUT_META if set, else NAME_inputmeta.yml next to the .json (make one with
#   `pegasus generate inputmeta`); BATCH_SIZE x ITERATIONS samples (default 10 x 10) calibrate.
#   For hybrid precision: edit customized_quantize_layers in NAME.quantize, then run again with --hybrid
#   (this writes NAME.quantize.json, which step 3 then exports).
set -euo pipefail
json=${1:?usage: 1_quantize_model.sh NAME.json [flags...]}
shift
dir=$(dirname "$json"); name=$(basename "${json%.json}")
meta=${INPUT_META:-$dir/${name}_inputmeta.yml}
mode=(--rebuild)
for flag in "$@"; do [ "$flag" = "--hybrid" ] && mode=(); done
pegasus quantize --model "$json" --model-data "$dir/$name.data" --with-input-meta "$meta" \
  --quantizer "${QUANTIZER:-asymmetric_affine}" --qtype "${QTYPE:-uint8}" \
  --batch-size "${BATCH_SIZE:-10}" --iterations "${ITERATIONS:-10}" \
  --model-quantize "$dir/$name.quantize" "${mode[@]}" "$@"
