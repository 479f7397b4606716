#!/usr/bin/env bash
# Session 23, GPU call 2 (call 1's binaries): the summary fold against session 22's binary, three
# alternated pairs each for Q4_K (the 32-element GEMV: LSERVE_CUDA_MMV=reg) and Q8_0; the
# 64-element GEMV (regw) on capped grids, N blocks an SM; ptxas' register counts of both GEMVs.
BINS=.gpu/s23a/bins.tgz LIMIT=${LIMIT:-560}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
E warm 200 $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 4k --repeats 1
E warm_prev 200 $B/lserve_prev bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 4k --repeats 1
for f in $(ls $LSERVE_CACHE/cuda/matmul_quant-*.ptx 2>/dev/null); do
  ptxas -arch=sm_90 -v "$f" -o /dev/null 2>&1 | grep -A3 -E "q4_k_m1_regw?'" | grep -E "Compiling|registers|spill" >> $OUT/ptxas.txt
done
ls $LSERVE_CACHE/cuda | head -3 >> $OUT/ptxas.txt; head -40 $OUT/ptxas.txt | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
for i in 1 2 3; do
  LSERVE_CUDA_MMV=reg C fold_$i --dtype q4_k $S
  PREV prev_$i --dtype q4_k $S
done
for n in 4 8 9 12; do LSERVE_CUDA_MMV=regw:$n C regw${n} --dtype q4_k $S; done
LSERVE_CUDA_MMV=reg C fold_4 --dtype q4_k $S
for i in 1 2; do
  C fold_q8_$i --dtype q8_0 $S
  PREV prev_q8_$i --dtype q8_0 $S
done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
