#!/usr/bin/env bash
# Session 37, GPU call 2: block-sparse prefill's two estimates made cheaper —
# page_select_score_rows (the mean bound: a tile of 32 virtual rows scored against one staged
# copy of 16 pages' boxes, no shuffles) and session 34's every-thread antidiagonal finalize with
# session 37's fix (its column sums read only rows that were written, over however many warps
# the launch has). Parity first (page_select incl. rows, antidiagonal_score incl. groups 1-6),
# the tiny-Gemma GPU tests, then 32K/128K prefill rows with either estimate, the new build against
# call 1's (s37a, LSERVE_BIN) in the same call, PyTorch's dense prefill, and op profiles.
BINS=.gpu/s37b/bins.tgz LIMIT=${LIMIT:-540} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
OLD=/root/s37a; mkdir -p $OLD; tar -xzf .gpu/s37a/bins.tgz -C $OLD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::page_select cuda::antidiagonal_score cuda::page_top_k
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C mb32 $PF $S32 --prefill-estimate mean_bound
LSERVE_BIN=$OLD/lserve C mb32_old $PF $S32 --prefill-estimate mean_bound
C ad32 $PF $S32
LSERVE_BIN=$OLD/lserve C ad32_old $PF $S32
C mb128 $PF $S128 --prefill-estimate mean_bound
C ad128 $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
C mb32_prof $PF $S32 --prefill-estimate mean_bound --profile
C ad32_prof $PF $S32 --profile
C dense32 $PF --prefill 32768
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
