#!/usr/bin/env bash
# Session 32, GPU call 2: where a 32K prefill's attention time goes with half the heads streaming
# and with block-sparse prefill (budget 2048 from 4K) — op-level GPU timestamps (--profile) of
# the dense, sparse and block-sparse 32K prefills; and the batch-1 Q4_K step with the new split
# rule (one wave: 49 splits at batch 1) by default.
BINS=.gpu/s32b/bins.tgz LIMIT=${LIMIT:-320} # lserve
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
C q4k_1 --dtype q4_k $S
LSERVE_CUDA_DECODE_SPLITS=50 C q4k_splits50 --dtype q4_k $S
C q4k_2 --dtype q4_k $S
P="--contexts 4k --repeats 1 --prefill 32768"
C pf_dense $P --sparse off --profile
C pf_sparse $P --sparse on --profile
C pf_bs2k $P --sparse on --prefill-budget 2048 --prefill-dense-below 4096 --profile
C pf_bs2k_np $P --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C pf_sparse_np $P --sparse on
# The prefill's rope_append_kv (8,192 tokens a call; ~226 us against ~100 for its bytes).
t0=$(date +%s)
left && timeout 90 ncu -k regex:rope_append_kv_bf16 -s 40 -c 1 --set full -f -o /root/rope \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k --repeats 1 --prefill 16384 --sparse off \
  > $OUT/ncu_rope_run.txt 2>&1
echo "== ncu rope rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
[ -f /root/rope.ncu-rep ] && ncu -i /root/rope.ncu-rep --page details --print-details all > $OUT/ncu_rope.txt 2>&1
grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Block Limit|Issued Warp|No Eligible" $OUT/ncu_rope.txt 2>/dev/null | head -12 | tee -a $L; pack
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
