#!/usr/bin/env bash
# Session 30, GPU call 2: where the Q4_K batch-1 step's time goes. Nsight Compute's per-kernel
# durations of a whole decode step (every graph node, caches and clocks left alone) with the
# register GEMVs (default) and with the bulk-copy ones; then the full Nsight Compute sections of
# one layer's four GEMVs (qkv, o, gate|up, down) in both modes.
BINS=.gpu/s30b/bins.tgz LIMIT=${LIMIT:-560} # lserve, backend_parity (the stage index kept by the loop)
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P par 200 cuda_mmv_bulk_loop:: cuda_mmv_bulkf_loop::
S="--batch 1 --contexts 32k --sparse on --token-budget 4096"
C q4k_def --dtype q4_k $S --repeats 10
LSERVE_CUDA_MMV=bulk C q4k_bulk --dtype q4_k $S --repeats 10
for m in auto bulk; do
  t0=$(date +%s)
  left && LSERVE_CUDA_MMV=$m timeout 150 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
    $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k $S --repeats 2 --warmup 1 --warmup-ms 0 \
    > $OUT/ncu_step_$m.csv 2> $OUT/ncu_step_$m.err
  echo "== ncu $m rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  gzip -f $OUT/ncu_step_$m.csv; tail -2 $OUT/ncu_step_$m.err | tee -a $L; pack
done
for m in auto bulk; do
  t0=$(date +%s)
  left && OUT=$OUT LSERVE=$B/lserve DTYPE=q4_k LAUNCH_SKIP=129 LAUNCHES=4 NCU_TIMEOUT=120 LSERVE_CUDA_MMV=$m \
    bash scripts/ncu_decode_gemv.sh > $OUT/ncu_gemv_$m.txt 2>&1
  step_end ncu_gemv_$m $? $t0; grep -E "^  [a-z_0-9]+ \(|Duration|DRAM Throughput|Issued Warp|Eligible" $OUT/ncu_gemv_$m.txt | head -24 | tee -a $L
  mv $OUT/ncu_q4_k.txt $OUT/ncu_q4_k_$m.txt 2>/dev/null; rm -f $OUT/ncu_q4_k.ncu-rep; pack
done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
