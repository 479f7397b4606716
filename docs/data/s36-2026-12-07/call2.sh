#!/usr/bin/env bash
# Session 36, GPU call 2 (call1.sh cut down for what the failed starts leave of the device
# budget): the CUDA parity of decode selection in logical-page units and of the antidiagonal
# estimate, the tiny-Gemma CUDA/Vulkan tests (cuda_block_sparse_prefill_matches_cpu never ran on
# a GPU), then the 128K q4_k sparse decode step with physical / logical units and selection
# every 4th / every step.
BINS=.gpu/s36a/bins.tgz LIMIT=${LIMIT:-260} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 150 cuda::sparse_decode_attention cuda::page_select cuda::antidiagonal_score
E gem 60 $B/gemma3 cuda_ wgpu_ --test-threads 1
D="--contexts 128k --sparse on --dtype q4_k"
C dec_phys $D
C dec_log $D --select-unit logical
C dec_log_si1 $D --select-unit logical --selector-interval 1
C dec_phys_si1 $D --selector-interval 1
C dec_log2 $D --select-unit logical
C dec_phys2 $D
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
