#!/usr/bin/env bash
# Session 27, GPU call 5: the wgmma prefill's softmax with row maxima and sums in four partials,
# and one key column in PW_POLY (8 keys of 64 a thread... every PW_POLY-th column of 8 keys) with
# exponentials on the FMA units (FlashAttention-4's cubic) — lserve: PW_POLY 4, lserve_p2:
# PW_POLY 2, lserve_p0: partials only; lserve_tma1: call 3's binary (before the softmax change).
# Parity of the new softmax (plain and `_tma`), then 32K rows alternated, the PyTorch anchor,
# and 4K / sparse rows.
BINS=.gpu/s27d/bins.tgz LIMIT=${LIMIT:-540}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par_plain 240 cuda::prefill_attention
LSERVE_CUDA_PREFILL_WGMMA=3 P par_tma 60 cuda::prefill_attention
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
W0="--device cuda --shape llama3-8b --head argmax --contexts 4k --repeats 1 --prefill 1024 --sparse off"
E warm_tma1 200 $B/lserve_tma1 bench $W0
E warm_p2 200 $B/lserve_p2 bench $W0
LSERVE_CUDA_PREFILL_WGMMA=3 C p4_tma_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 LSERVE_BIN=$B/lserve_tma1 C tma1_tma_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 LSERVE_BIN=$B/lserve_p2 C p2_tma_32k $S32 --profile
C p4_plain_32k $S32 --profile
LSERVE_BIN=$B/lserve_tma1 C tma1_plain_32k $S32 --profile
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -6 $OUT/torch.txt | tee -a $L; pack; }
LSERVE_CUDA_PREFILL_WGMMA=3 C p4_tma_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 LSERVE_BIN=$B/lserve_tma1 C tma1_tma_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C p4_tma_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
LSERVE_CUDA_PREFILL_WGMMA=3 C p4_tma_32k_sp --contexts 4k --repeats 1 --prefill 32768 --sparse on
E warm_p0 200 $B/lserve_p0 bench $W0
LSERVE_CUDA_PREFILL_WGMMA=3 LSERVE_BIN=$B/lserve_p0 C p0_tma_32k $S32 --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
