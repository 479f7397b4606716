#!/usr/bin/env bash
# Runs every GPU test and benchmark of lserve in one call on a GPU machine (the H200 used for
# docs/benchmarks.md), writing results under $OUT and printing a short table last.
# Expects (built on the development machine, see docs/backends.md), in .gpu/:
#   lserve                the release binary
#   backend_parity        test binary of tests/backend_parity.rs (cargo test --release --no-run)
#   cuda, cuda_e2e        test binaries of tests/cuda.rs and tests/cuda_e2e.rs     (CUDA part)
#   shaders               test binary of tests/shaders.rs                          (wgpu part)
#   .gl/*.deb             the Vulkan/GL loader packages (../shared/gpu/fetch-vulkan-debs.sh)
# Parts: CUDA=1 (default) runs the CUDA tests, compute-sanitizer memcheck over the CUDA parity
# tests and the CUDA decode benchmark; WGPU=1 (default) the wgpu ones.
set -uo pipefail
OUT=${OUT:-/tmp/lserve-gpu-out}
mkdir -p "$OUT"
B=${B:-.gpu}
SHAPE=${SHAPE:-llama3-8b}
CONTEXTS=${CONTEXTS:-4k,32k,128k}
CUDA=${CUDA:-1}
WGPU=${WGPU:-1}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
if [ "$WGPU" = 1 ] && ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}

if [ "$CUDA" = 1 ]; then
  . scripts/cuda_env.sh
  export LSERVE_REQUIRE_CUDA=1
  export LSERVE_CACHE=${LSERVE_CACHE:-/tmp/lserve-cache}
  if [ "${CUDA_COMPILE:-1}" = 1 ]; then "$B/cuda" > "$OUT/cuda_compile.txt" 2>&1; c_compile=$?; else c_compile=skipped; fi
  "$B/backend_parity" ${PARITY_FILTER:-cuda::} > "$OUT/parity_cuda.txt" 2>&1; c_parity=$?
  "$B/cuda_e2e" --nocapture > "$OUT/e2e_cuda.txt" 2>&1; c_e2e=$?
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" ${MEMCHECK_FILTER:-cuda::} --test-threads 1 \
    > "$OUT/memcheck.txt" 2>&1; c_mem=$?
  timeout 300 "$B/lserve" bench --device cuda --shape "$SHAPE" --contexts "${CUDA_CONTEXTS:-4k,32k,128k,256k}" \
    --sparse both --repeats "${REPEATS:-10}" --prefill "${PREFILL:-4096}" --token-budget "${BUDGET:-4096}" \
    --out-dir "$OUT/bench_cuda" > "$OUT/bench_cuda.txt" 2>&1; c_bench=$?
  # Per-kernel GPU times (CUDA events around every launch; the events add a little host time).
  [ "${PROFILE:-1}" = 1 ] && timeout 200 "$B/lserve" bench --device cuda --shape "$SHAPE" --contexts 4k,128k --sparse both --repeats 3 \
    --profile --prefill 4096 --token-budget "${BUDGET:-4096}" > "$OUT/profile_cuda.txt" 2>&1
  # PyTorch dense reference (SDPA attention, CUDA-graph step) for the same shape, when torch exists.
  [ "${TORCH:-1}" = 1 ] && python3 -c "import torch" 2>/dev/null && timeout 200 python3 "${TORCH_SCRIPT:-scripts/torch_decode_bench.py}" \
    --shape "$SHAPE" --contexts "${TORCH_CONTEXTS:-4096,32768,131072}" --csv "$OUT/torch.csv" > "$OUT/torch.txt" 2>&1
fi

if [ "$WGPU" = 1 ]; then
  export LSERVE_REQUIRE_WGPU=1
  # Both wgpu instantiations: with the adapter's optional features and with them turned off.
  "$B/backend_parity" wgpu > "$OUT/parity.txt" 2>&1; parity=$?
  "$B/shaders" > "$OUT/shaders.txt" 2>&1; shaders=$?
  "$B/lserve" bench --device wgpu --shape "$SHAPE" --contexts "$CONTEXTS" --sparse both --repeats "${REPEATS:-10}" \
    --prefill "${PREFILL:-4096}" --token-budget "${BUDGET:-4096}" --out-dir "$OUT/bench" > "$OUT/bench.txt" 2>&1; bench=$?
  # The same decode without SUBGROUP/SHADER_F16 (the fallback shaders), for comparison.
  LSERVE_WGPU_FEATURES=none "$B/lserve" bench --device wgpu --shape "$SHAPE" --contexts 32k --sparse both \
    --repeats "${REPEATS:-10}" --token-budget "${BUDGET:-4096}" > "$OUT/bench_plain.txt" 2>&1
  # Per-kernel GPU timestamps at one context (profiling adds a sync per submission, so its wall
  # times are not the ones reported above).
  "$B/lserve" bench --device wgpu --shape "$SHAPE" --contexts 32k --sparse both --repeats 3 --profile \
    --token-budget "${BUDGET:-4096}" > "$OUT/profile.txt" 2>&1
fi

"$B/lserve" devices > "$OUT/devices.txt" 2>&1
echo "== $(cat "$OUT/gpu.txt")"
if [ "$CUDA" = 1 ]; then
  grep -E "cuda:" "$OUT/devices.txt" | head -3
  echo "== cuda kernel compile (rc $c_compile): $(grep -E '^test result' "$OUT/cuda_compile.txt")"
  echo "== cuda parity (rc $c_parity): $(grep -E '^test result' "$OUT/parity_cuda.txt")"
  grep -E "FAILED|panicked" "$OUT/parity_cuda.txt" | head -10
  echo "== cuda e2e greedy vs CPU (rc $c_e2e): $(grep -E '^test result' "$OUT/e2e_cuda.txt")"
  grep -E "FAILED|panicked|diverge" "$OUT/e2e_cuda.txt" | head -10
  echo "== compute-sanitizer memcheck (rc $c_mem): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
  echo "== cuda kernels at 4K and 128K (GPU event times):"
  grep -E "calls|context|dense|sparse" "$OUT/profile_cuda.txt" | head -40
  grep -E "graph" "$OUT/e2e_cuda.txt" | head -3
  [ -f "$OUT/torch.txt" ] && echo "== PyTorch dense reference:" && cat "$OUT/torch.txt"
  echo "== cuda bench (rc $c_bench), $SHAPE:"
  cat "$OUT/bench_cuda.txt"
fi
if [ "$WGPU" = 1 ]; then
  grep -E "wgpu:" "$OUT/devices.txt" | head -3
  echo "== wgpu parity (rc $parity): $(grep -E '^test result' "$OUT/parity.txt")"
  grep -E "FAILED|panicked" "$OUT/parity.txt" | head -10
  echo "== shaders (rc $shaders): $(grep -E '^test result' "$OUT/shaders.txt")"
  echo "== wgpu kernels at 32K (GPU timestamps):"
  grep -E "calls" "$OUT/profile.txt" | head -16
  echo "== wgpu bench (rc $bench), $SHAPE:"
  cat "$OUT/bench.txt"
fi
