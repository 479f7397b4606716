#!/usr/bin/env bash
# Session 16, GPU call 3: the batch-1 quantized GEMV with x read from shared memory once for all
# of a warp's rows (mmv_rows computes every row's dot unconditionally, so the compiler shares the
# x loads: SASS 71 -> 37 LDS in q4_k_m1_pre; int8 rows go through k four at a time). Parity of
# every m == 1 mode, then the Llama-3-8B 32K sparse batch-1 step per format: the old binary
# (call 1's, whose default is main's) against the new one with LSERVE_CUDA_MMV_MIN_BLOCKS 4
# (today's grid), 2 and 1 (more rows per warp), alternated twice.
BINS=.gpu/s16c/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
NEW=$B; OLD=/root/s16a; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s16a/bins.tgz -C $OLD
LSERVE_REQUIRE_CUDA=1 P c_mmv 240 cuda_mmv_inblock cuda_mmv_pre cuda::matmul
grep -q "test result: ok" $OUT/c_mmv.txt || { echo "parity failed" | tee -a $L; exit 0; }
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for d in q4_k int8 q5_k q6_k; do
    B=$OLD S ${d}_old_$r --dtype $d
    for mb in 4 2 1; do B=$NEW LSERVE_CUDA_MMV_MIN_BLOCKS=$mb S ${d}_new${mb}_$r --dtype $d; done
  done
done
B=$NEW
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
