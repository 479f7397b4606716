#!/usr/bin/env bash
# Session 37, GPU call 3: page_select_score_rows with small tiles (16 rows x 32 logical pages,
# 128 threads, one row a thread: call 2's 32 x 64 tiles gave a 32K step's few rows too few
# blocks, 22.7 -> 16.8 ms) and silu_mul's 16-bit rows with 8 columns a thread (16-byte
# accesses; 36.3 ms of a 32K prefill at ~2.5 TB/s). Parity (page_select, silu_mul, the tiny-Gemma
# tests), then the 32K/128K mean-bound rows against the session's first build (s37a; call 2's
# does not fit the carry) in the same call, PyTorch's dense prefill, the 32K op profile and the
# 32K dense row.
BINS=.gpu/s37c/bins.tgz LIMIT=${LIMIT:-420} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
for o in s37a; do mkdir -p /root/$o; [ -x /root/$o/lserve ] || tar -xzf .gpu/$o/bins.tgz -C /root/$o; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::page_select cuda::silu_mul
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096 --prefill-estimate mean_bound"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768 --prefill-estimate mean_bound"
C mb32 $PF $S32
LSERVE_BIN=/root/s37a/lserve C mb32_a $PF $S32
C mb32_2 $PF $S32
C mb128 $PF $S128
LSERVE_BIN=/root/s37a/lserve C mb128_a $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
C mb32_prof $PF $S32 --profile
C dense32 $PF --prefill 32768
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
