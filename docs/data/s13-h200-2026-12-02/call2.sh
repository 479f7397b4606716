#!/usr/bin/env bash
# Session 13, GPU call 2. (1) The wgpu row-norm parity tests one at a time (in call 1 the batch of
# wgpu parity tests with them did not finish in 170 s; the same tests without them passed in 6 s).
# (2) CUDA: the batch-1 quantized GEMV in each mode (LSERVE_CUDA_MMV=inblock forced, the new
# default auto), and the Llama-3-8B 32K sparse step per remaining weight format, in-block vs x
# quantized once, to fill ops_matmul::mmv_pre_wins. Binaries in .gpu/s13b/bins.tgz.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-520}
B=/root/s13b; mkdir -p $B; tar -xzf .gpu/s13b/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
pack() { (cd $OUT && tar -czf all.tgz *.txt 2>/dev/null); }
P() { local name=$1 to=$2; shift 2; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout $to $B/backend_parity "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "^test |test result|FAILED|panicked" $OUT/$name.txt | head -12 | tee -a $L; grep -A6 "panicked" $OUT/$name.txt | head -24 | tee -a $L; pack; }
C() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 90 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 --contexts 32k --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | grep -v "backend    mode" | head -4 | tee -a $L; pack; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
export LSERVE_REQUIRE_WGPU=1
P w_head 60 wgpu::head_rmsnorm --test-threads 1
P w_rms 120 wgpu::rmsnorm --exact --test-threads 1 --nocapture
P w_add 120 wgpu::add_rmsnorm --exact --test-threads 1 --nocapture
P w_plain 120 wgpu_plain::rmsnorm wgpu_plain::add_rmsnorm wgpu_plain::head_rmsnorm --test-threads 1
unset LSERVE_REQUIRE_WGPU
LSERVE_REQUIRE_CUDA=1 P c_mm 200 cuda::matmul cuda_mmv_inblock
for r in 1 2; do
  for d in q4_0 q4_1 q5_0 q5_1 q5_k q6_k; do
    for m in inblock pre; do LSERVE_CUDA_MMV=$m C ${d}_${m}_$r --dtype $d --repeats 10; done
  done
  C q4_k_auto_$r --dtype q4_k --repeats 10
done
echo "total $(( $(date +%s)-T0 ))s" | tee -a $L; pack
