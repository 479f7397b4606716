#!/usr/bin/env bash
# Session 9, call 1: profiles for #14 (CUDA/wgpu quantized), #12 (wgpu b8), serving load test on the current tree.
set -uo pipefail
B=/root/g11; mkdir -p $B; tar -xzf .gpu/g11/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $L
PB() { local name=$1; shift; local t0=$(date +%s)
  timeout 150 $B/lserve bench --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "^ *(cuda|wgpu) |calls|rror" $OUT/$name.txt | head -40 | tee -a $L; }
PB cq4 --device cuda --dtype q4_k --contexts 32k --batch 1 --sparse on --repeats 5 --profile
PB cq8 --device cuda --dtype q8_0 --contexts 32k --batch 1 --sparse on --repeats 5 --profile
for d in q4_k q8_0 bf16; do PB c_$d --device cuda --dtype $d --contexts 32k --batch 1,16 --sparse on --repeats 5; done
PB wf16 --device wgpu --dtype f16 --kv-dtype f16 --contexts 32k --batch 1,8 --sparse on --repeats 3 --profile
PB wf16np --device wgpu --dtype f16 --kv-dtype f16 --contexts 32k --batch 1,8 --sparse on --repeats 5
PB wq4 --device wgpu --dtype q4_k --kv-dtype f16 --contexts 32k --batch 1 --sparse on --repeats 3 --profile
# serving load test
LOAD_PORT=8765
$B/lserve serve --device cuda --synthetic llama3-8b --model .gpu/smollm2-vocab.gguf --port $LOAD_PORT --max-num-seqs 64 \
  --max-num-batched-tokens 8192 --prefill-chunk 4096 --kv-memory 80GiB --swap-space 16GiB > $OUT/load_server.txt 2>&1 &
spid=$!; t0=$(date +%s)
for _ in $(seq 200); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$LOAD_PORT/health', timeout=2)" 2>/dev/null && break; sleep 1; done
echo "server up after $(( $(date +%s)-t0 ))s" | tee -a $L
LR() { local name=$1; shift; local t0=$(date +%s)
  timeout 200 python3 scripts/load_bench.py --client http --base-url "http://127.0.0.1:$LOAD_PORT/v1" --model synthetic-llama3-8b \
    --label $name --json $OUT/load_$name.json "$@" > $OUT/load_$name.txt 2>&1; echo "== load $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  tail -25 $OUT/load_$name.txt | tee -a $L; }
LR b1 --clients 1 --requests 2 --warmup 1 --prompt-tokens 32k --max-tokens 512
LR b16 --clients 16 --requests 16 --prompt-tokens 32k --max-tokens 512
kill $spid; wait $spid 2>/dev/null
tail -5 $OUT/load_server.txt >> $L
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null; ls
