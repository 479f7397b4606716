#!/usr/bin/env bash
# Session 9, call 2: block-sparse prefill (parity, 64K/128K bench, torch anchor), sparse serving load test.
set -uo pipefail
B=/root/g12; mkdir -p $B; tar -xzf .gpu/g12/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $L
t0=$(date +%s); timeout 200 $B/backend_parity cuda::prefill cuda::mean_rows > $OUT/parity.txt 2>&1; echo "parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity.txt | head -12 | tee -a $L
grep -A8 "panicked" $OUT/parity.txt | head -30 | tee -a $L
PB() { local name=$1; shift; local t0=$(date +%s)
  timeout 200 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --contexts 1k --batch 1 --repeats 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "prefill|calls|rror" $OUT/$name.txt | head -14 | tee -a $L; }
PB p128k_base --prefill 131072 --sparse on
PB p128k_b4k --prefill 131072 --sparse on --prefill-budget 4096 --profile
PB p128k_b8k --prefill 131072 --sparse on --prefill-budget 8192
PB p64k_b4k --prefill 65536 --sparse both --prefill-budget 4096
timeout 150 python3 scripts/torch_prefill_bench.py --lengths 65536,131072 --chunk 131072 --repeats 1 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L
tail -6 $OUT/torch.txt | tee -a $L
LOAD_PORT=8765
$B/lserve serve --device cuda --synthetic llama3-8b --model .gpu/smollm2-vocab.gguf --port $LOAD_PORT --max-num-seqs 64 \
  --max-num-batched-tokens 8192 --prefill-chunk 4096 --kv-memory 80GiB --swap-space 16GiB \
  --sparse on --streaming-ratio 0.5 --token-budget 4096 > $OUT/load_server.txt 2>&1 &
spid=$!; t0=$(date +%s)
for _ in $(seq 200); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$LOAD_PORT/health', timeout=2)" 2>/dev/null && break; sleep 1; done
echo "server up after $(( $(date +%s)-t0 ))s" | tee -a $L
LR() { local name=$1; shift; local t0=$(date +%s)
  timeout 150 python3 scripts/load_bench.py --client http --base-url "http://127.0.0.1:$LOAD_PORT/v1" --model synthetic-llama3-8b \
    --label $name --json $OUT/load_$name.json "$@" > $OUT/load_$name.txt 2>&1; echo "== load $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  tail -7 $OUT/load_$name.txt | tee -a $L; }
LR b1 --clients 1 --requests 2 --warmup 1 --prompt-tokens 32k --max-tokens 512
LR b16 --clients 16 --requests 16 --warmup 0 --prompt-tokens 32k --max-tokens 512
LR b16long --clients 16 --requests 16 --warmup 0 --prompt-tokens 32k --max-tokens 2048
kill $spid; wait $spid 2>/dev/null
head -3 $OUT/load_server.txt >> $L
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null; ls | head -3
