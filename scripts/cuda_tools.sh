# Sourced (CI, a developer's machine without a GPU): NVRTC and ptxas from PyPI's CUDA 12.9
# wheels, so the kernels compile (tests/cuda.rs `every_kernel_compiles_for_sm80_and_sm90`) and
# ptxas reports registers, spills and wgmma serialization (`hopper_prefill_kernels_neither_spill_
# nor_serialize_wgmma`) without a GPU. Unpacks into $LSERVE_CUDA_TOOLS (default
# ~/.cache/lserve/cuda-tools, kept between runs) and exports LD_LIBRARY_PATH (libnvrtc.so, which
# cudarc loads by that name) and LSERVE_PTXAS. Best effort: without the registry it says so and
# those tests skip, as they do on any machine without NVRTC.
_lserve_scripts=$(dirname "${BASH_SOURCE[0]}")
_lserve_cuda_tools() {
  local dir=${LSERVE_CUDA_TOOLS:-$HOME/.cache/lserve/cuda-tools} ver=12.9.86
  if [ ! -x "$dir/bin/ptxas" ] || [ ! -e "$dir/lib/libnvrtc.so" ]; then
    mkdir -p "$dir/wheels" "$dir/lib" "$dir/bin" || return 1
    python3 -m pip download -q --no-deps -d "$dir/wheels" \
      "nvidia-cuda-nvrtc-cu12==$ver" "nvidia-cuda-nvcc-cu12==$ver" || return 1
    python3 "$_lserve_scripts/wheel_extract.py" "$dir" \
      libnvrtc.so.12:lib libnvrtc-builtins.so.12.9:lib ptxas:bin || return 1
    ln -sf libnvrtc.so.12 "$dir/lib/libnvrtc.so"
    rm -rf "$dir/wheels"
  fi
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LSERVE_PTXAS="$dir/bin/ptxas"
}
_lserve_cuda_tools || echo "cuda_tools.sh: NVRTC / ptxas not installed (no registry?): the NVRTC and ptxas tests will skip" >&2
unset -f _lserve_cuda_tools
unset _lserve_scripts
