#!/usr/bin/env bash
# Session 37, GPU call 4: page_select_score_rows rewritten (call 3's small tiles measured slower,
# 19.9 ms against call 2's 16.8): back to 32 x 64 tiles of 256 threads, 16-byte staging loads
# with lanes along rows / columns (the scalar staging stored with 16-way bank conflicts and a
# runtime division per element), 16-byte shared loads of the boxes. Parity, then the 32K/128K
# mean-bound rows against the session's first build (s37a), PyTorch, and the 32K op profile.
BINS=.gpu/s37d/bins.tgz LIMIT=${LIMIT:-300} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
mkdir -p /root/s37a; [ -x /root/s37a/lserve ] || tar -xzf .gpu/s37a/bins.tgz -C /root/s37a
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::page_select cuda::silu_mul
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096 --prefill-estimate mean_bound"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768 --prefill-estimate mean_bound"
C mb32_prof $PF $S32 --profile
C mb32 $PF $S32
LSERVE_BIN=/root/s37a/lserve C mb32_a $PF $S32
C mb32_2 $PF $S32
C mb128 $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
