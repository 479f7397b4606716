#!/usr/bin/env bash
# Session 11, GPU call 1: profiles of today's main (80db714) for the open misses: wgpu quantized
# decode (#14), wgpu batch 8 (#12), CUDA 8-bit KV sparse decode (#13), CUDA dense 128K with
# quantized weights and 8-bit KV (#13's 0.65x with the weight bytes cut).
set -uo pipefail
B=/root/s11c1; mkdir -p $B; tar -xzf .gpu/s11c1/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
W() { local name=$1; shift; local t0=$(date +%s)
  timeout 150 $B/lserve bench --device wgpu --shape llama3-8b --token-budget 4096 --head argmax --sparse on --contexts 32k "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -30 | tee -a $L; }
W w_q4k_prof --dtype q4_k --kv-dtype f16 --batch 1 --repeats 3 --profile
W w_q80_prof --dtype q8_0 --kv-dtype f16 --batch 1 --repeats 3 --profile
W w_f16_prof --dtype f16 --kv-dtype f16 --batch 1 --repeats 3 --profile
C() { local name=$1; shift; local t0=$(date +%s)
  timeout 150 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -30 | tee -a $L; }
C c_sp_bf16_prof --contexts 128k --sparse on --kv-dtype bf16 --repeats 5 --profile
C c_sp_int8_prof --contexts 128k --sparse on --kv-dtype int8 --repeats 5 --profile
for w in q4_k int8; do for kv in bf16 int8; do
  C c_dense_${w}_${kv} --contexts 128k --sparse off --dtype $w --kv-dtype $kv --repeats 5
done; done
C c_dense_q4k_int8_prof --contexts 128k --sparse off --dtype q4_k --kv-dtype int8 --repeats 3 --profile
C c_dense_q4k_bf16_prof --contexts 128k --sparse off --dtype q4_k --kv-dtype bf16 --repeats 3 --profile
cd $OUT && tar -czf all.tgz *.txt 2>/dev/null; ls | wc -l
