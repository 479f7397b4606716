#!/usr/bin/env bash
# Session 13, GPU call 1 (the measurements session 12 could not make; main at 8e97e8e).
# (1) Parity of the batch-1 quantized GEMV with x quantized once (LSERVE_CUDA_MMV=pre|pre:N), the
# wgpu row norms in registers, the wgpu decode-attention variant (LSERVE_WGPU_DECODE_ATTN=new).
# (2) CUDA Llama-3-8B 32K sparse batch-1 step per weight format and MMV mode; (3) wgpu f16 32K
# batch 1 / 8 with each decode-attention variant, its profile, and wgpu q4_k batch 1.
# Binaries in .gpu/s13/bins.tgz (lserve, backend_parity, wgpu_dispatch_cost); re-tars $OUT/all.tgz.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-540}
B=/root/s13; mkdir -p $B; tar -xzf .gpu/s13/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
pack() { (cd $OUT && tar -czf all.tgz *.txt 2>/dev/null); }
P() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 170 $B/backend_parity "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "test result|FAILED|panicked" $OUT/$name.txt | head -8 | tee -a $L; grep -A6 "panicked" $OUT/$name.txt | head -24 | tee -a $L; pack; }
C() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 90 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 --contexts 32k --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | grep -v "backend    mode" | head -10 | tee -a $L; pack; }
W() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 60 $B/lserve bench --device wgpu --shape llama3-8b --kv-dtype f16 --token-budget 4096 --head argmax --sparse on --contexts 32k "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | grep -v "backend    mode" | head -14 | tee -a $L; pack; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
timeout 60 $B/wgpu_dispatch_cost 2048 > $OUT/dispatch_cost.txt 2>&1; echo "== dispatch_cost rc $?" | tee -a $L; tail -4 $OUT/dispatch_cost.txt | tee -a $L
LSERVE_REQUIRE_CUDA=1 P pc cuda::matmul cuda_mmv_pre cuda_mmv_pre_loop cuda::embed
LSERVE_REQUIRE_WGPU=1 P pw wgpu::rmsnorm wgpu::add_rmsnorm wgpu::head_rmsnorm wgpu::sparse_decode_attention wgpu_plain::sparse_decode_attention
LSERVE_REQUIRE_WGPU=1 LSERVE_WGPU_DECODE_ATTN=new P pw_new wgpu::sparse_decode_attention wgpu_plain::sparse_decode_attention
for r in 1 2; do
  for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C q4_k_${m/:/}_$r --dtype q4_k --repeats 10; done
  W wold_$r --dtype f16 --batch 1,8 --repeats 10
  LSERVE_WGPU_DECODE_ATTN=new W wnew_$r --dtype f16 --batch 1,8 --repeats 10
done
for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C int8_${m/:/}_1 --dtype int8 --repeats 10; done
W wold_prof --dtype f16 --batch 8 --repeats 5 --profile
LSERVE_WGPU_DECODE_ATTN=new W wnew_prof --dtype f16 --batch 8 --repeats 5 --profile
W wq4k_1 --dtype q4_k --batch 1 --repeats 10
W wq4k_prof --dtype q4_k --batch 1 --repeats 5 --profile
for m in inblock pre; do LSERVE_CUDA_MMV=$m C q8_0_${m/:/}_1 --dtype q8_0 --repeats 10; done
echo "total $(( $(date +%s)-T0 ))s" | tee -a $L; pack
