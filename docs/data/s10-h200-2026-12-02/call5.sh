#!/usr/bin/env bash
# Session 10, GPU set 5: the merged wgpu batched GEMV (+ 16-byte K reads in decode attention)
# against the previous binary, with the measurement switches; wgpu parity on NVIDIA (subgroup 32).
set -uo pipefail
B=/root/s10e; mkdir -p $B; tar -xzf .gpu/c5/bins.tgz -C $B
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json LSERVE_REQUIRE_WGPU=1
L=$OUT/log.txt
t0=$(date +%s); timeout 150 $B/backend_parity wgpu::matmul wgpu::sparse_decode > $OUT/parity_wgpu.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_wgpu.txt | head -8 | tee -a $L; grep -A8 "panicked" $OUT/parity_wgpu.txt | head -20 | tee -a $L
t0=$(date +%s); LSERVE_WGPU_GEMV_BATCH_ROWS=32 timeout 100 $B/backend_parity wgpu::matmul > $OUT/parity_wgpu_r32.txt 2>&1; echo "wgpu parity r32 rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED" $OUT/parity_wgpu_r32.txt | head -4 | tee -a $L
W() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 120 $bin bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on --contexts 32k "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -22 | tee -a $L; }
W old $B/lserve-old --batch 1,8 --repeats 5
W new $B/lserve --batch 1,8,16 --repeats 5
LSERVE_WGPU_GEMV_BATCH_ROWS=32 W r32 $B/lserve --batch 8 --repeats 5
LSERVE_WGPU_DECODE_WORKGROUPS=2048 W wg2048 $B/lserve --batch 8 --repeats 5
LSERVE_WGPU_DECODE_WORKGROUPS=4096 W wg4096 $B/lserve --batch 8 --repeats 5
W new_prof $B/lserve --batch 1,8 --repeats 3 --profile
LSERVE_WGPU_GEMV_BATCH_ROWS=32 W r32_prof $B/lserve --batch 8 --repeats 3 --profile
W old2 $B/lserve-old --batch 8 --repeats 5
cd $OUT && tar -czf all.tgz *.txt 2>/dev/null; ls | wc -l
