#!/usr/bin/env bash
# NOT RUN: session 39 had too little device time left to start a machine.
# Session 39, GPU call 4: wgpu on NVIDIA Vulkan, the tests this session touched: rope_append_kv
# (kv_fp8's 0x00 / 0x80 zero codes now equal), matmul (accumulate refused) and prefill_attention
# (a 16-bit out refused), one process.
BINS=.gpu/s39d/bins.tgz LIMIT=${LIMIT:-150} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$L"
E wgpu 140 $B/backend_parity wgpu::rope_append_kv wgpu::matmul wgpu::prefill_attention --test-threads 1
grep -B2 -A14 "stdout ----" "$OUT/wgpu.txt" | head -40 | tee -a "$L"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
