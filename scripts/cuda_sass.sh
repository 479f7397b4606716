#!/usr/bin/env bash
# The SASS (machine code) of one kernel entry as ptxas builds it for an sm_90a / sm_80 device, on a
# machine without a GPU: NVRTC's PTX of the module (examples/cuda_ptx.rs), ptxas from
# scripts/cuda_tools.sh, and cuobjdump with the nvdisasm it runs, from PyPI's nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm wheels (unpacked into the same tools folder on first use). Usage:
#   scripts/cuda_sass.sh prefill_attention prefill_attention_wgmma_bf16_d128_ws [sm_90a] > ws.sass
# Session 27 used it to find where the Hopper prefill's wait instructions sit and to check that a
# refactor left a kernel's SASS identical (docs/backends.md).
set -euo pipefail
cd "$(dirname "$0")/.."
stem=$1 entry=$2 sm=${3:-sm_90a}
. scripts/cuda_tools.sh
dir=${LSERVE_CUDA_TOOLS:-$HOME/.cache/lserve/cuda-tools}
if [ ! -x "$dir/bin/cuobjdump" ] || [ ! -x "$dir/bin/nvdisasm" ]; then
  mkdir -p "$dir/wheels"
  python3 -m pip download -q --no-deps -d "$dir/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  python3 scripts/wheel_extract.py "$dir" cuobjdump:bin nvdisasm:bin
  rm -rf "$dir/wheels"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run -q --release --example cuda_ptx -- "$stem" "compute_${sm#sm_}" > "$tmp/k.ptx"
"$LSERVE_PTXAS" -arch="$sm" "$tmp/k.ptx" -o "$tmp/k.cubin"
NVDISASM_PATH="$dir/bin" "$dir/bin/cuobjdump" -sass -fun "$entry" "$tmp/k.cubin" | grep -v '^\s*$' | sed 's@ */\* 0x[0-9a-f]* \*/@@'
