#!/usr/bin/env bash
# Session 38, GPU call 1: antidiagonal_score by cuBLAS (cuda/antidiagonal_score_gemm.cu: the
# keys packed in position order, the blocks' q rows packed per chunk, one batched GEMM over the
# retrieval heads into z, then the softmax shares summed by page) against the fused kernel
# (LSERVE_CUDA_AD_GEMM=0) in the same call. Parity (antidiagonal_score incl. groups and the new
# two-chunk case, both paths each against the CPU), the tiny-Gemma GPU tests (block-sparse prefill
# end to end), the 32K/128K default-estimate rows, PyTorch's dense prefill, the 32K op profile,
# then wgpu's one-instance-per-process check (session 37's call 5).
BINS=.gpu/s38a/bins.tgz LIMIT=${LIMIT:-520} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 220 cuda::antidiagonal_score cuda::page_top_k
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad32 $PF $S32
LSERVE_CUDA_AD_GEMM=0 C ad32_fused $PF $S32
C ad128 $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
C ad32_prof $PF $S32 --profile
C mb32 $PF $S32 --prefill-estimate mean_bound
export LSERVE_REQUIRE_WGPU=1
E w_all 80 $B/backend_parity wgpu --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
