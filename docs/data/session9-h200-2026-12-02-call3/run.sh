#!/usr/bin/env bash
# Session 9, call 3: CUDA MMQ (quantized 2..64 rows) and wgpu cooperative-matrix GEMMs on the H200.
set -uo pipefail
B=/root/g13; mkdir -p $B; tar -xzf .gpu/g13/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
$B/lserve devices 2>&1 | tee -a $L | head -12
t0=$(date +%s); timeout 240 $B/backend_parity cuda::matmul > $OUT/parity_cuda.txt 2>&1; echo "cuda parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_cuda.txt | head -12 | tee -a $L; grep -A6 "panicked" $OUT/parity_cuda.txt | head -24 | tee -a $L
t0=$(date +%s); LSERVE_REQUIRE_WGPU=1 timeout 150 $B/backend_parity wgpu::matmul > $OUT/parity_wgpu.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_wgpu.txt | head -12 | tee -a $L; grep -A6 "panicked" $OUT/parity_wgpu.txt | head -24 | tee -a $L
PB() { local name=$1; shift; local t0=$(date +%s)
  timeout 120 $B/lserve bench --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "^ *(cuda|wgpu) |calls|rror" $OUT/$name.txt | head -12 | tee -a $L; }
for d in q4_k q8_0; do PB c_$d --device cuda --dtype $d --contexts 32k --batch 1,16 --sparse on --repeats 5; done
PB c_q4_k_128k --device cuda --dtype q4_k --contexts 128k --batch 1,8 --sparse on --repeats 5
PB c_q4_k_b16p --device cuda --dtype q4_k --contexts 32k --batch 16 --sparse on --repeats 3 --profile
PB w_f16 --device wgpu --dtype f16 --kv-dtype f16 --contexts 32k --batch 1,8 --sparse on --repeats 5
LSERVE_WGPU_NO_COOP=1 PB w_f16_nocoop --device wgpu --dtype f16 --kv-dtype f16 --contexts 32k --batch 8 --sparse on --repeats 5
PB w_f16_prof --device wgpu --dtype f16 --kv-dtype f16 --contexts 32k --batch 8 --sparse on --repeats 3 --profile
PB w_p4k --device wgpu --dtype f16 --kv-dtype f16 --contexts 1k --batch 1 --repeats 1 --prefill 4096 --sparse both
LSERVE_WGPU_NO_COOP=1 PB w_p4k_nocoop --device wgpu --dtype f16 --kv-dtype f16 --contexts 1k --batch 1 --repeats 1 --prefill 4096 --sparse on
PB w_q4_k --device wgpu --dtype q4_k --kv-dtype f16 --contexts 32k --batch 1,8 --sparse on --repeats 3
cd $OUT && tar -czf all.tgz *.txt 2>/dev/null; ls | head -2
