#!/usr/bin/env bash
# Session 8, call 1: new prefill kernel parity + prefill bench old/new + torch; #14 pending checks.
set -uo pipefail
B=/root/g8; mkdir -p $B; tar -xzf .gpu/g8/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $L
t0=$(date +%s); timeout 240 $B/backend_parity cuda::prefill cuda::matmul cuda::embed > $OUT/parity.txt 2>&1; echo "parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity.txt | head -12 | tee -a $L
grep -A8 "panicked" $OUT/parity.txt | head -40 | tee -a $L
PB() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 240 $bin bench --device cuda --shape llama3-8b --contexts 1k --batch 1 --token-budget 4096 --head argmax \
    --repeats 1 --warmup 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "^ *cuda|prefill_attention|matmul|rror" $OUT/$name.txt | head -24 | tee -a $L; }
PB new4k $B/lserve --prefill 4096 --sparse both
PB old4k $B/lserve.old --prefill 4096 --sparse both
PB new32k_512 $B/lserve --prefill 32768 --sparse both --profile
PB new32k_8k $B/lserve --prefill 32768 --sparse both --prefill-chunk 8192 --profile
PB old32k_8k $B/lserve.old --prefill 32768 --sparse both --prefill-chunk 8192 --profile
PB new32k_8k_np $B/lserve --prefill 32768 --sparse both --prefill-chunk 8192
timeout 200 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L
tail -8 $OUT/torch.txt | tee -a $L
cd $OUT && tar -czf all.tgz *.txt && ls
