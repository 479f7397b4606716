#!/usr/bin/env bash
# Session 8, call 3: prefill kernel v3 (rescale skip), torch unchunked, wgpu #14 checks.
set -uo pipefail
B=/root/g10; mkdir -p $B; tar -xzf .gpu/g10/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $L
t0=$(date +%s); timeout 240 $B/backend_parity cuda::prefill > $OUT/parity.txt 2>&1; echo "parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity.txt | head -12 | tee -a $L
grep -A8 "panicked" $OUT/parity.txt | head -40 | tee -a $L
PB() { local name=$1; shift; local t0=$(date +%s)
  timeout 300 $B/lserve bench --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "^ *(cuda|wgpu)|prefill_attention|matmul|rror" $OUT/$name.txt | head -24 | tee -a $L; }
PB p4k --device cuda --contexts 1k --batch 1 --repeats 3 --warmup 1 --prefill 4096 --sparse both
PB p32k --device cuda --contexts 1k --batch 1 --repeats 1 --warmup 1 --prefill 32768 --sparse both --profile
PB p128k_sparse --device cuda --contexts 1k --batch 1 --repeats 1 --warmup 0 --prefill 131072 --sparse on --profile
PB dec1 --device cuda --contexts 32k,128k --batch 1,16 --repeats 5 --sparse on
PB dec2 --device cuda --contexts 32k,128k --batch 1,16 --repeats 5 --sparse on
timeout 300 python3 scripts/torch_prefill_bench.py --lengths 4096,32768,131072 --chunk 131072 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L
tail -6 $OUT/torch.txt | tee -a $L
# wgpu (Vulkan on the H200): the #14 two-digit integer-dot GEMV, unverified on this GPU so far.
for f in .gl/*.deb; do dpkg -x $f / >/dev/null 2>&1; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json LSERVE_REQUIRE_WGPU=1
t0=$(date +%s); timeout 200 $B/backend_parity wgpu::matmul wgpu::embed > $OUT/wgpu_parity.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/wgpu_parity.txt | head -12 | tee -a $L
for d in f16 q4_k q8_0; do PB wgpu_$d --device wgpu --dtype $d --contexts 32k --batch 1 --sparse on --repeats 3; done
( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.2; done ) > $OUT/mem.txt 2>&1 & MP=$!
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
PB wgpu_q4k_8k --device wgpu --dtype q4_k --contexts 8k --batch 1 --sparse off --repeats 2
kill $MP; echo "memory.used MiB: before $base, max during $(sort -n $OUT/mem.txt | tail -1)" | tee -a $L
cd $OUT && tar -czf all.tgz *.txt
