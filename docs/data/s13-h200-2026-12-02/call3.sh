#!/usr/bin/env bash
# Session 13, GPU call 3: the serving load test with long outputs (issue #12's end-to-end reading:
# 16 clients with 32K-token prompts against 1 client, 16,384 output tokens each, so that the
# decode rate rather than the 512K prompt tokens' prefill decides throughput). Same server flags
# as the session-9 rows in docs/benchmarks.md, a larger KV pool for 16 x 48K tokens.
set -uo pipefail
B=/root/s13b; mkdir -p $B; [ -x $B/lserve ] || tar -xzf .gpu/s13b/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt; PORT=8765; NT=${NT:-16384}
$B/lserve serve --device cuda --synthetic llama3-8b --model .gpu/smollm2-vocab.gguf --port $PORT \
  --sparse on --streaming-ratio 0.5 --token-budget 4096 --prefill-chunk 4096 --max-num-batched-tokens 8192 \
  --max-num-seqs 64 --kv-memory ${KV:-100GiB} --swap-space 16GiB > $OUT/server.txt 2>&1 &
spid=$!
for _ in $(seq 240); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null && break
  kill -0 $spid 2>/dev/null || break; sleep 1
done
echo "server up after $SECONDS s" | tee -a $L
run() { local name=$1; shift; local t0=$SECONDS
  timeout 400 python3 scripts/load_bench.py --client http --base-url http://127.0.0.1:$PORT/v1 --model synthetic-llama3-8b \
    --label $name --json $OUT/load_$name.json --prompt-tokens 32k --max-tokens $NT "$@" > $OUT/load_$name.txt 2>&1
  echo "== $name rc $? $(( SECONDS - t0 ))s" | tee -a $L; tail -12 $OUT/load_$name.txt | tee -a $L; }
run b1 --clients 1 --requests 1 --warmup 1
run b16 --clients 16 --requests 16
kill $spid; wait $spid 2>/dev/null; tail -5 $OUT/server.txt | tee -a $L
