#!/usr/bin/env bash
# Session 31, GPU call 3 — NOT RUN (the session had no device time left; to run it, apply
# decode-q-early-one-barrier-not-run.patch, build, and stage .gpu/s31c/bins.tgz). Call 2 found the merge folded into the decode attention slower (the
# last block's merge: 29.4 us a launch against 16.4 + 4.3 for kernel and merge) and the register
# GEMVs' pointer-step addressing no faster for Q4_K, slower for int8 rows (4.64 vs 4.04 ms): both
# reverted. s31c keeps the separate merge and has: q loaded before the key list, the warps'
# (m, l, O) combined behind one barrier (was one a warp), the norms' weights loaded before their
# reduction, LSERVE_CUDA_DECODE_SPLITS. Failed machine starts left ~400 device seconds, so no
# fe524b4 anchor this time (its kernels take ~75 s to compile): the per-kernel times are compared
# with call 2's and session 30's Nsight Compute runs, the steps with call 2's.
BINS=.gpu/s31c/bins.tgz LIMIT=${LIMIT:-200} # lserve, backend_parity, cuda_e2e (new)
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::sparse_decode_attention:: cuda::add_rmsnorm cuda::rmsnorm cuda::argmax
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
C q4k_new1 --dtype q4_k $S
LSERVE_CUDA_DECODE_SPLITS=49 C q4k_splits49 --dtype q4_k $S
C q4k_new2 --dtype q4_k $S
C i8_new --dtype int8 $S
t0=$(date +%s)
left && timeout 60 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
  --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/ncu_step.csv 2> $OUT/ncu_step.err
echo "== ncu rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; gzip -f $OUT/ncu_step.csv; pack
t0=$(date +%s)
left && LSERVE_CUDA_DECODE_SPLITS=49 timeout 60 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
  --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/ncu_step49.csv 2> $OUT/ncu_step49.err
echo "== ncu49 rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; gzip -f $OUT/ncu_step49.csv; pack
E e2e 60 $B/cuda_e2e
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
