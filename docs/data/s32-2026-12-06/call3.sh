#!/usr/bin/env bash
# Session 32, GPU call 3: the prefill's small ops found in call 2 (s32c) against call 2's build
# (s32b) in the same call — rope_append_kv for several tokens in one block a token (its cos/sin
# once per (token, pair) and 4 heads instead of once per head; LSERVE_CUDA_ROPE_ROWS=0 keeps the
# old kernel), page_select_score with 4 candidates a warp, the row's past-the-end blocks skipping
# the query load and the GQA group's warp sums interleaved (22.7 ms of a block-sparse 32K
# prefill), mean_rows with 8 loads in flight (7.5 ms). Parity first, then the 32K prefills
# (dense, half streaming, + block-sparse) alternated old/new, the PyTorch anchor, the batch-1
# Q4_K decode step (page_select runs in it every 4 steps), cuda_e2e.
BINS=.gpu/s32c/bins.tgz LIMIT=${LIMIT:-250} # lserve, backend_parity, cuda_e2e (new)
. scripts/gpu_call_lib.sh
OLD=/root/s32b; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s32b/bins.tgz -C $OLD
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::rope_append_kv cuda::page_select cuda::mean_rows cuda::sparse_decode_attention::
PF="--contexts 4k --repeats 1 --prefill 32768"
BS="--sparse on --prefill-budget 2048 --prefill-dense-below 4096"
C new_bs_prof $PF $BS --profile
C new_dense_prof $PF --sparse off --profile
left && { timeout 120 python3 scripts/torch_prefill_bench.py --lengths 32768 --repeats 1 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
LSERVE_BIN=$OLD/lserve C old_bs $PF $BS
C new_bs $PF $BS
LSERVE_BIN=$OLD/lserve C old_dense $PF --sparse off
C new_dense $PF --sparse off
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
LSERVE_BIN=$OLD/lserve C q4k_old --dtype q4_k $S
C q4k_new --dtype q4_k $S
E e2e 60 $B/cuda_e2e
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
