#!/usr/bin/env bash
# Session 12, GPU call 1: parity after the session-11 review refactor (prefill / decode / rope
# kernels) and of the 8-bit decode kernels with the next tile in flight (`_pf`, default); then
# 128K decode with bf16 / int8 / fp8 KV, LSERVE_CUDA_DECODE_PF=0|1|2 alternated; ncu of the Q4_K
# batch-1 GEMV. Each step re-tars $OUT/all.tgz so a cut-off run keeps what ran.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-300}
B=/root/s12a; mkdir -p $B; tar -xzf .gpu/s12a/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
pack() { (cd $OUT && tar -czf all.tgz *.txt 2>/dev/null); }
P() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 150 $B/backend_parity "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "test result|FAILED|panicked" $OUT/$name.txt | head -8 | tee -a $L; grep -A6 "panicked" $OUT/$name.txt | head -24 | tee -a $L; pack; }
C() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 90 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -12 | tee -a $L; pack; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
export LSERVE_REQUIRE_CUDA=1
P pc cuda::prefill_attention cuda::sparse_decode_attention cuda::rope_append_kv cuda::page_select cuda::swap_round_trip
LSERVE_CUDA_DECODE_PF=2 P pc_pf2 cuda::sparse_decode_attention
# 128K dense decode (the 0.65x target), then sparse (no slower), alternated.
C d_bf16 --contexts 128k --sparse off --kv-dtype bf16 --repeats 10
for pf in 0 1 2; do LSERVE_CUDA_DECODE_PF=$pf C d_int8_pf$pf --contexts 128k --sparse off --kv-dtype int8 --repeats 10; done
LSERVE_CUDA_DECODE_PF=1 C d_fp8_pf1 --contexts 128k --sparse off --kv-dtype fp8 --repeats 10
for r in 1 2; do
  C s_bf16_$r --contexts 128k --sparse on --kv-dtype bf16 --repeats 10
  for pf in 0 1 2; do LSERVE_CUDA_DECODE_PF=$pf C s_int8_pf${pf}_$r --contexts 128k --sparse on --kv-dtype int8 --repeats 10; done
done
LSERVE_CUDA_DECODE_PF=1 C d_int8_pf1_prof --contexts 128k --sparse off --kv-dtype int8 --repeats 3 --profile
LSERVE_CUDA_DECODE_PF=1 C s_int8_pf1_prof --contexts 128k --sparse on --kv-dtype int8 --repeats 3 --profile
C s_bf16_prof --contexts 128k --sparse on --kv-dtype bf16 --repeats 3 --profile
# ncu: the Q4_K batch-1 GEMV (issue #14) and the 8-bit decode kernel.
N() { local name=$1 kern=$2; shift 2; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 120 ncu --kernel-name regex:"$kern" --launch-skip 300 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 --repeats 2 --warmup-ms 0 "$@" > $OUT/$name.txt 2>&1
  echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers|Achieved Occupancy|No Eligible|Stall" $OUT/$name.txt | head -20 | tee -a $L; pack; }
N ncu_q4k 'matmul_gemv_q4_k_m1' --contexts 32k --sparse on --dtype q4_k
LSERVE_CUDA_DECODE_PF=1 N ncu_int8_pf1 'sparse_decode_attention_mma' --contexts 32k --sparse off --kv-dtype int8
LSERVE_CUDA_DECODE_PF=0 N ncu_int8_pf0 'sparse_decode_attention_mma' --contexts 32k --sparse off --kv-dtype int8
echo "total $(( $(date +%s)-T0 ))s" | tee -a $L; pack
