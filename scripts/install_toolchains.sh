#!/usr/bin/env bash
# Installs the compilers and emulators the exporter tests run bundles on (Debian/Ubuntu apt): gcc (host bundles
# are linked into shared libraries), arm-none-eabi-gcc + newlib (Cortex-M, bare metal), qemu-system-arm (mps2
# boards), gcc-aarch64-linux-gnu and qemu-aarch64 (Cortex-A, Linux user mode), bubblewrap (bwrap: the sandbox
# TorchScript is read in and emulated programs run in, pegasus/sandbox.py). Idempotent: does nothing when
# everything is present, so `make test` can call it on every run.
set -euo pipefail

PACKAGES=(gcc gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-user gcc-aarch64-linux-gnu
          libc6-dev-arm64-cross bubblewrap)
TOOLS=(gcc arm-none-eabi-gcc qemu-system-arm qemu-aarch64 aarch64-linux-gnu-gcc bwrap)
NEWLIB_DIR=/usr/lib/arm-none-eabi/newlib

missing=()
for tool in "${TOOLS[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ -d "$NEWLIB_DIR" ] || missing+=("newlib ($NEWLIB_DIR)")

if [ "${#missing[@]}" -eq 0 ]; then
    echo "toolchains: all present"
    exit 0
fi

echo "toolchains: missing ${missing[*]}; installing ${PACKAGES[*]}"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "toolchains: not root and no sudo; install as root: apt-get install ${PACKAGES[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"

for tool in "${TOOLS[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "toolchains: $tool still missing after install" >&2; exit 1; }
done
[ -d "$NEWLIB_DIR" ] || { echo "toolchains: $NEWLIB_DIR still missing after install" >&2; exit 1; }
echo "toolchains: installed"
