#!/usr/bin/env bash
# Session 12, GPU call 2: the batch-1 quantized GEMV with x quantized once (LSERVE_CUDA_MMV=
# inblock | pre | pre:N) — parity (cuda::matmul, the forced-pre modules), then the Llama-3-8B
# 32K sparse step per weight format and mode, alternated; profiles. Re-tars $OUT/all.tgz per step.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-300}
B=/root/s12b; mkdir -p $B; tar -xzf .gpu/s12b/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
pack() { (cd $OUT && tar -czf all.tgz *.txt 2>/dev/null); }
P() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 150 $B/backend_parity "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "test result|FAILED|panicked" $OUT/$name.txt | head -8 | tee -a $L; grep -A6 "panicked" $OUT/$name.txt | head -24 | tee -a $L; pack; }
C() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 90 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 --contexts 32k --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | grep -v "backend    mode" | head -10 | tee -a $L; pack; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
export LSERVE_REQUIRE_CUDA=1
P pc cuda::matmul cuda_mmv_pre cuda_mmv_pre_loop cuda::embed
for d in q4_k int8 q8_0; do for m in inblock pre pre:4; do
  LSERVE_CUDA_MMV=$m C ${d}_${m/:/}_1 --dtype $d --repeats 10
done; done
for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C q4_k_${m/:/}_2 --dtype q4_k --repeats 10; done
C bf16_1 --repeats 10
for m in inblock pre; do LSERVE_CUDA_MMV=$m C q4_k_${m}_prof --dtype q4_k --repeats 3 --profile; done
echo "total $(( $(date +%s)-T0 ))s" | tee -a $L; pack
