#!/usr/bin/env bash
# Session 8, call 5: the 8-bit KV tensor-core prefill (parity + speed against bf16 KV and the scalar kernel's old times).
set -uo pipefail
B=/root/g11; mkdir -p $B; tar -xzf .gpu/g10/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
t0=$(date +%s); timeout 240 $B/backend_parity cuda::prefill > $OUT/parity.txt 2>&1; echo "parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity.txt | head -12 | tee -a $L
grep -A12 "panicked" $OUT/parity.txt | head -60 | tee -a $L
for kv in bf16 int8 fp8; do
  timeout 200 $B/lserve bench --device cuda --shape llama3-8b --contexts 1k --batch 1 --token-budget 4096 --head argmax \
    --repeats 1 --warmup 1 --prefill 32768 --sparse both --kv-dtype $kv --profile > $OUT/p32k_$kv.txt 2>&1; echo "== $kv rc $?" | tee -a $L
  grep -E "^ *cuda|prefill_attention|rror" $OUT/p32k_$kv.txt | head -12 | tee -a $L
done
