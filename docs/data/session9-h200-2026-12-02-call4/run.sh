#!/usr/bin/env bash
set -uo pipefail
B=/root/g14; mkdir -p $B; tar -xzf .gpu/g14/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
t0=$(date +%s); timeout 400 $B/backend_parity cuda::page_select cuda::prefill cuda::sparse_decode cuda::mean_rows cuda::matmul > $OUT/parity_cuda.txt 2>&1; echo "cuda parity rc $? $(( $(date +%s)-t0 ))s"
grep -E "test result|FAILED|panicked" $OUT/parity_cuda.txt | head -12; grep -A6 "panicked" $OUT/parity_cuda.txt | head -30
t0=$(date +%s); LSERVE_REQUIRE_WGPU=1 timeout 150 $B/backend_parity wgpu::page_select wgpu::prefill wgpu::matmul > $OUT/parity_wgpu.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s"
grep -E "test result|FAILED|panicked" $OUT/parity_wgpu.txt | head -12; grep -A6 "panicked" $OUT/parity_wgpu.txt | head -30
