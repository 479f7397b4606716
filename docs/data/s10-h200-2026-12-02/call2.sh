#!/usr/bin/env bash
# Session 10, GPU set 2: the first rewrite of the wgpu batched decode GEMV (branch wgpubatch,
# e0b0c28) against the previous binary; the serving load test under page pressure (#12 item 5);
# block-sparse prefill at 32K; int8 vs bf16 KV sparse decode at 128K, interleaved (#13).
set -uo pipefail
B=/root/s10b; mkdir -p $B; tar -xzf .gpu/c2/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
if [ "${PART:-a}" = a ]; then
t0=$(date +%s); LSERVE_REQUIRE_WGPU=1 timeout 200 $B/parity-wgb1 wgpu::matmul > $OUT/parity_wgpu.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_wgpu.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity_wgpu.txt | head -30 | tee -a $L
W() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 200 $bin bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -24 | tee -a $L; }
W w_old $B/lserve-old --contexts 32k --batch 1,8 --repeats 5
W w_new $B/lserve-wgb1 --contexts 32k --batch 1,2,4,8,16 --repeats 5
W w_old2 $B/lserve-old --contexts 32k --batch 1,8 --repeats 5
W w_new_prof $B/lserve-wgb1 --contexts 32k --batch 8 --repeats 3 --profile
PB() { local name=$1; shift; local t0=$(date +%s)
  timeout 200 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -20 | tee -a $L; }
PB p32k_bs4k --contexts 1k --batch 1 --repeats 1 --prefill 32768 --sparse on --prefill-budget 4096 --prefill-dense-below 8192
PB p32k_bs2k --contexts 1k --batch 1 --repeats 1 --prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096
for r in 1 2; do
  PB kv_bf16_$r --contexts 128k --batch 1 --repeats 10 --sparse on --kv-dtype bf16
  PB kv_int8_$r --contexts 128k --batch 1 --repeats 10 --sparse on --kv-dtype int8
done
fi
if [ "${PART:-a}" = b ]; then
# Page pressure (#12 item 5): the serving engine must preempt (swap to host, recompute when the
# host tier is full) and resume; load_bench.py reports the preemptions from /metrics.
LOAD_PORT=8765
start_server() { local log=$1; shift
  $B/lserve serve --device cuda --synthetic llama3-8b --model $B/smollm2-vocab.gguf --port $LOAD_PORT "$@" > $log 2>&1 &
  spid=$!
  for _ in $(seq 240); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$LOAD_PORT/health', timeout=2)" 2>/dev/null && return 0; kill -0 $spid 2>/dev/null || return 1; sleep 1; done; return 1; }
LR() { local name=$1; shift; local t0=$(date +%s)
  timeout 240 python3 scripts/load_bench.py --client http --base-url "http://127.0.0.1:$LOAD_PORT/v1" --model synthetic-llama3-8b \
    --label $name --json $OUT/load_$name.json "$@" > $OUT/load_$name.txt 2>&1; echo "== load $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  tail -9 $OUT/load_$name.txt | tee -a $L; }
if start_server $OUT/server_p16.txt --max-num-seqs 64 --kv-memory 20GiB --swap-space 48GiB --max-num-batched-tokens 8192 --prefill-chunk 4096; then
  LR p16 --clients 8 --requests 8 --warmup 0 --prompt-tokens 16k --max-tokens 4096
fi
kill $spid 2>/dev/null; wait $spid 2>/dev/null
if start_server $OUT/server_p100.txt --kv-memory 28GiB --swap-space 48GiB --max-num-batched-tokens 8192 --prefill-chunk 4096 --max-num-seqs 8 --sparse on --streaming-ratio 0.5 --token-budget 4096 --synthetic-context 135168; then
  LR p100 --clients 4 --requests 4 --warmup 0 --prompt-tokens 100k --max-tokens 2048
fi
kill $spid 2>/dev/null; wait $spid 2>/dev/null
grep -iE "preempt|error|warn" $OUT/server_p*.txt | head -20 | tee -a $L
fi
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null; ls | wc -l
