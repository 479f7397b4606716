#!/usr/bin/env bash
# Session 37, GPU call 1: page_select/page_top_k parity after session 36's review cleanup; the
# tiny-Gemma GPU tests, which now prefill block-sparse with the mean bound too and in one 150-row
# step (session 36's fix of the mean bound for several query blocks a step, never run on a GPU);
# the 32K dense and block-sparse (mean bound) prefill rows and the 128K block-sparse row, with
# PyTorch's dense prefill of 32K and 128K (one chunk) in the same call; then the wgpu tests that
# died with NVIDIA Vulkan in session 34, one process each, and wgpu's logical-unit parity.
BINS=.gpu/s37a/bins.tgz LIMIT=${LIMIT:-540} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 170 cuda::page_select cuda::page_top_k
E gem 90 $B/gemma3 cuda_ wgpu_ --test-threads 1
PF="--contexts 4k --repeats 1"
C pf32_dense $PF --prefill 32768
C pf32_mb $PF --prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096 --prefill-estimate mean_bound
C pf128_mb $PF --prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768 --prefill-estimate mean_bound
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -14 | tee -a "$L"
E w_topk 60 $B/backend_parity wgpu::page_top_k --test-threads 1
E wp_topk 60 $B/backend_parity wgpu_plain::page_top_k --test-threads 1
E w_ad8 60 $B/backend_parity wgpu::antidiagonal_score::kv_int8_hd64 --test-threads 1
E w_log 90 $B/backend_parity wgpu::sparse_decode_attention wgpu::page_select
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
