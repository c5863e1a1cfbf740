#!/usr/bin/env bash
# Step 3 of 3 (Acuity guide §3.4, step 3): compile an imported model into a Glow-format bundle (NAME.o,
# NAME.h, NAME.weights.bin/.txt, an example main.c + Makefile and the Flash/RAM report).
# usage: 2_export_case_code.sh [NAME.json [BUNDLE_DIR]] [extra `pegasus export glow` flags]
#   The bundle for the host is built and run with:  make -C BUNDLE_DIR && BUNDLE_DIR/NAME_run INPUT.npy
# Edit the variables below, or set any of them in the environment.
set -euo pipefail

NAME=${NAME:-}                        # the model's name (default: the stem of the .json argument)
OUT_DIR=${OUT_DIR:-.}                 # the folder of NAME.json/.data/.quantize (ignored when a .json is given)
BUNDLE_DIR=${BUNDLE_DIR:-}            # default: OUT_DIR/bundle
DTYPE=${DTYPE:-float32}               # float32, or quantized: integer kernels from NAME.quantize
HYBRID=${HYBRID:-0}                   # 1: export NAME.quantize.json (after 1_quantize_model.sh --hybrid)
QUANTIZED_IO=${QUANTIZED_IO:-0}       # 1: integer input/output placeholders (with DTYPE=quantized)
TARGET=${TARGET:-}                    # x86_64 i386 arm aarch64 (default: this machine)
MCPU=${MCPU:-}                        # cortex-m0 cortex-m4 cortex-m7 cortex-m33 cortex-m55 cortex-a53 cortex-a72
FLOAT_ABI=${FLOAT_ABI:-}              # hard or soft (default: hard where the CPU has an FPU)
PEGASUS=${PEGASUS:-pegasus}

if [ $# -gt 0 ] && [ "${1%.json}" != "$1" ]; then
  json=$1; shift; OUT_DIR=$(dirname "$json"); NAME=$(basename "${json%.json}"); NAME=${NAME%.quantize}
  case "$json" in *.quantize.json) HYBRID=1 ;; esac
fi
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then BUNDLE_DIR=$1; shift; fi
[ -n "$NAME" ] || { echo "2_export_case_code.sh: set NAME (or give NAME.json as the first argument)" >&2; exit 2; }
BUNDLE_DIR=${BUNDLE_DIR:-$OUT_DIR/bundle}
json=$OUT_DIR/$NAME.json
[ "$HYBRID" = 1 ] && json=$OUT_DIR/$NAME.quantize.json
flags=(--model "$json" --model-data "$OUT_DIR/$NAME.data" --output-path "$BUNDLE_DIR" --network-name "$NAME")
[ "$DTYPE" = quantized ] && flags+=(--dtype quantized --model-quantize "$OUT_DIR/$NAME.quantize")
[ "$QUANTIZED_IO" = 1 ] && flags+=(--quantized-io)
[ -n "$TARGET" ] && flags+=(--target "$TARGET")
[ -n "$MCPU" ] && flags+=(--mcpu "$MCPU")
[ -n "$FLOAT_ABI" ] && flags+=(--float-abi "$FLOAT_ABI")
"$PEGASUS" export glow "${flags[@]}" "$@"
