#!/usr/bin/env bash
# Session 30, GPU call 1: the batch-1 register GEMVs with their weight rows streamed into shared
# memory by bulk copies (LSERVE_CUDA_MMV=bulk|bulkf, matmul_gemv_<fmt>_m1_bulk[f]): parity on
# every format (default grid, and 2 blocks refilling their stages), then the 8B 32K sparse step
# alternated with the default (the register kernels) in the same binary; the MUFU throughput of
# packed f16x2 / bf16x2 ex2 (for #11's softmax); last, Nsight Compute's per-kernel durations of
# one decode step (graph nodes one by one, caches and clocks left alone).
BINS=.gpu/s30a/bins.tgz LIMIT=${LIMIT:-560} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P par 240 cuda_mmv_bulk:: cuda_mmv_bulk_loop:: cuda_mmv_bulkf:: cuda_mmv_bulkf_loop::
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
C q4k_def1 --dtype q4_k $S
LSERVE_CUDA_MMV=bulk C q4k_bulk1 --dtype q4_k $S
C q4k_def2 --dtype q4_k $S
LSERVE_CUDA_MMV=bulk C q4k_bulk2 --dtype q4_k $S
C i8_def --dtype int8 $S
LSERVE_CUDA_MMV=bulkf C i8_bulkf --dtype int8 $S
C q8_def --dtype q8_0 $S
LSERVE_CUDA_MMV=bulkf C q8_bulkf --dtype q8_0 $S
LSERVE_CUDA_MMV=bulk C q4k_bulk_prof --dtype q4_k $S --profile
t0=$(date +%s)
nvcc -O3 -arch=sm_90a -o /root/mufu docs/data/s30-2026-12-06/mufu_bench.cu > $OUT/mufu.txt 2>&1 && /root/mufu >> $OUT/mufu.txt 2>&1
cuobjdump -sass /root/mufu | grep -E "MUFU" | sort | uniq -c | sort -rn | head > $OUT/mufu_sass.txt 2>&1
step_end mufu $? $t0; grep -E "rep 1|err" $OUT/mufu.txt | tee -a $L; head -5 $OUT/mufu_sass.txt | tee -a $L; pack
for m in reg bulk; do
  t0=$(date +%s)
  left && LSERVE_CUDA_MMV=$m timeout 150 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
    $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k $S --repeats 1 --warmup 1 --warmup-ms 0 \
    > $OUT/ncu_step_$m.csv 2> $OUT/ncu_step_$m.err
  echo "== ncu $m rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  gzip -f $OUT/ncu_step_$m.csv; tail -2 $OUT/ncu_step_$m.err | tee -a $L; pack
done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
