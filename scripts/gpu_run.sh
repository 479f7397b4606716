#!/usr/bin/env bash
# Runs every GPU test and benchmark of lserve in one call on a GPU machine (the H200 used for
# docs/benchmarks.md), writing results under $OUT and printing a short table last.
# Expects (built on the development machine, see docs/backends.md):
#   .gpu/lserve            the release binary
#   .gpu/backend_parity    cargo test --release --no-run test binary (tests/backend_parity.rs)
#   .gpu/shaders           test binary of tests/shaders.rs
#   .gl/*.deb              the Vulkan/GL loader packages (../shared/gpu/fetch-vulkan-debs.sh)
set -uo pipefail
OUT=${OUT:-/tmp/lserve-gpu-out}
mkdir -p "$OUT"
if ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export LSERVE_REQUIRE_WGPU=1
B=.gpu
SHAPE=${SHAPE:-llama3-8b}
CONTEXTS=${CONTEXTS:-4k,32k,128k}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
"$B/lserve" devices > "$OUT/devices.txt" 2>&1
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
echo "== $(cat "$OUT/gpu.txt")"
grep -E "wgpu:" "$OUT/devices.txt" | head -3
echo "== parity (rc $parity): $(grep -E '^test result' "$OUT/parity.txt")"
grep -E "FAILED|panicked" "$OUT/parity.txt" | head -10
echo "== shaders (rc $shaders): $(grep -E '^test result' "$OUT/shaders.txt")"
echo "== kernels at 32K (GPU timestamps):"
grep -E "calls" "$OUT/profile.txt" | head -16
echo "== without optional features (LSERVE_WGPU_FEATURES=none):"
grep -E "dense|sparse" "$OUT/bench_plain.txt"
echo "== bench (rc $bench), $SHAPE:"
cat "$OUT/bench.txt"
