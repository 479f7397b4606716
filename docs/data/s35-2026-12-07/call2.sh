#!/usr/bin/env bash
# Session 35, GPU call 2 (what is left of the device budget after the failed starts): the CUDA
# parity of decode selection in logical-page units only (sparse_decode_attention and page_select
# run each selection unit), then the antidiagonal estimate's.
BINS=.gpu/s35a/bins.tgz LIMIT=${LIMIT:-150}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P sel 170 cuda::sparse_decode_attention cuda::page_select
P ad 120 cuda::antidiagonal_score
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
