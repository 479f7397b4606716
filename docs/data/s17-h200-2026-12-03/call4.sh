#!/usr/bin/env bash
# Session 17, GPU call 4: the register GEMVs with unpredicated row loads and word-major dots
# (this binary) against call 3's (.gpu/s17c), each mode forced; the new MmvMode::Auto (int8 rows
# regf, Q5_K reg, Q4_K pre) in the parity run. Llama-3-8B 32K sparse batch 1, alternated twice.
BINS=.gpu/s17e/bins.tgz LIMIT=${LIMIT:-400}
. scripts/gpu_call_lib.sh
NEW=$B; OLD=/root/s17c; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s17c/bins.tgz -C $OLD
LSERVE_REQUIRE_CUDA=1 P c_mmv 240 cuda_mmv_reg cuda_mmv_regf cuda::matmul
grep -q "test result: ok" $OUT/c_mmv.txt || { echo "parity failed" | tee -a $L; exit 0; }
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  B=$NEW S q4_k_pre_$r --dtype q4_k
  for m in "q4_k reg" "int8 regf" "q5_k reg"; do set -- $m
    B=$OLD LSERVE_CUDA_MMV=$2 S ${1}_${2}_old_$r --dtype $1; B=$NEW LSERVE_CUDA_MMV=$2 S ${1}_${2}_new_$r --dtype $1
  done
done
B=$NEW; LSERVE_REQUIRE_CUDA=1 P c_mmv_loop 60 cuda_mmv_reg_loop cuda_mmv_regf_loop
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
