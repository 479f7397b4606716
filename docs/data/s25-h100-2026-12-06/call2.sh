#!/usr/bin/env bash
# Session 25, GPU call 2 (same binaries as call 1): every wgpu parity test (with and without the
# adapter's optional features) and the shader checks on this GPU's Vulkan; #14's memory target on
# the named shape — a Q4_K_M-mixed Llama-3-8B (`--dtype q4_k_m`: llama.cpp's recipe) at an 8K
# context on wgpu, nvidia-smi memory.used polled every 0.1 s, per KV dtype; and the batch-1 32K
# sparse step with Q4_K_M against uniform Q4_K (CUDA, then wgpu).
BINS=.gpu/s25/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P wpar 240 wgpu
E shaders 100 $B/shaders
for kv in f16 int8; do
  left || break
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) > $OUT/mem_$kv.txt 2>&1 & MP=$!
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
  timeout 150 $B/lserve bench --device wgpu --dtype q4_k_m --kv-dtype $kv --shape llama3-8b --contexts 8k --batch 1 --sparse off \
    --token-budget 4096 --head argmax --repeats 2 > $OUT/mem_b_$kv.txt 2>&1; echo "== mem $kv rc $?" | tee -a $L
  kill $MP; grep -E "^ *wgpu|rror" $OUT/mem_b_$kv.txt | tee -a $L
  echo "memory.used MiB ($kv KV): before $base, max during $(sort -n $OUT/mem_$kv.txt | tail -1)" | tee -a $L; pack
done
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
export LSERVE_REQUIRE_CUDA=1
C c_q4km --dtype q4_k_m $S
C c_q4k --dtype q4_k $S
C c_q4km_2 --dtype q4_k_m $S
W w_q4km --dtype q4_k_m $S
W w_q4k --dtype q4_k $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
