#!/usr/bin/env bash
# Session 8, call 4: device memory of a Q4_K-shaped Llama-3-8B at 8K context on wgpu, per KV dtype.
set -uo pipefail
B=/root/g10; mkdir -p $B; tar -xzf .gpu/g10/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
for f in .gl/*.deb; do dpkg -x $f / >/dev/null 2>&1; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json LSERVE_REQUIRE_WGPU=1
L=$OUT/log.txt
for kv in f16 int8 f32; do
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) > $OUT/mem_$kv.txt 2>&1 & MP=$!
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
  timeout 200 $B/lserve bench --device wgpu --dtype q4_k --kv-dtype $kv --shape llama3-8b --contexts 8k --batch 1 --sparse off \
    --token-budget 4096 --head argmax --repeats 2 > $OUT/b_$kv.txt 2>&1; echo "== $kv rc $?" | tee -a $L
  kill $MP; grep -E "^ *wgpu|rror" $OUT/b_$kv.txt | tee -a $L
  echo "memory.used MiB: before $base, max during $(sort -n $OUT/mem_$kv.txt | tail -1)" | tee -a $L
done
