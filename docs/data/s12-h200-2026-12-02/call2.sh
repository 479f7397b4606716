#!/usr/bin/env bash
# Session 12, GPU call 2. (1) The batch-1 quantized GEMV with x quantized once (LSERVE_CUDA_MMV=
# inblock | pre | pre:N): parity (cuda::matmul, the forced-pre modules), the Llama-3-8B 32K sparse
# step per weight format and mode. (2) wgpu: the row norms in registers (binary B = main with
# branch wnorm, A = before it) and the decode-attention variant (LSERVE_WGPU_DECODE_ATTN=new):
# parity, then batch 1 / 8 step times. Re-tars $OUT/all.tgz after every step.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-200}
A=/root/s12b; B=/root/s12c; C=/root/s12d; mkdir -p $A $B $C; tar -xzf .gpu/s12b/bins.tgz -C $A; tar -xzf .gpu/s12c/bins.tgz -C $B
tar -xzf .gpu/s12d/bins.tgz -C $C  # C = B + parameter slots written once per submission
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
pack() { (cd $OUT && tar -czf all.tgz *.txt 2>/dev/null); }
P() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 150 $B/backend_parity "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "test result|FAILED|panicked" $OUT/$name.txt | head -8 | tee -a $L; grep -A6 "panicked" $OUT/$name.txt | head -24 | tee -a $L; pack; }
C() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 90 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 --contexts 32k --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | grep -v "backend    mode" | head -10 | tee -a $L; pack; }
W() { local name=$1 bin=$2; shift 2; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 60 $bin bench --device wgpu --shape llama3-8b --kv-dtype f16 --token-budget 4096 --head argmax --sparse on --contexts 32k "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | grep -v "backend    mode" | head -12 | tee -a $L; pack; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
# Host cost of one wgpu dispatch (recording vs the GPU finishing), examples/wgpu_dispatch_cost.rs.
for x in B C; do eval bin=\$$x; timeout 60 $bin/wgpu_dispatch_cost 2048 > $OUT/dispatch_cost_$x.txt 2>&1; echo "== dispatch_cost $x rc $?" | tee -a $L; tail -3 $OUT/dispatch_cost_$x.txt | tee -a $L; done
LSERVE_REQUIRE_CUDA=1 P pc cuda::matmul cuda_mmv_pre cuda_mmv_pre_loop cuda::embed
LSERVE_REQUIRE_WGPU=1 P pw wgpu::rmsnorm wgpu::add_rmsnorm wgpu::head_rmsnorm wgpu::sparse_decode_attention wgpu_plain::sparse_decode_attention
LSERVE_REQUIRE_WGPU=1 LSERVE_WGPU_DECODE_ATTN=new P pw_new wgpu::sparse_decode_attention wgpu_plain::sparse_decode_attention
for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C q4_k_${m/:/}_1 --dtype q4_k --repeats 10; done
for r in 1 2; do
  W wA_$r $A/lserve --dtype f16 --batch 1,8 --repeats 10
  W wB_$r $B/lserve --dtype f16 --batch 1,8 --repeats 10
  LSERVE_WGPU_DECODE_ATTN=new W wBnew_$r $B/lserve --dtype f16 --batch 1,8 --repeats 10
  W wC_$r $C/lserve --dtype f16 --batch 1,8 --repeats 10
done
for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C int8_${m/:/}_1 --dtype int8 --repeats 10; done
for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C q4_k_${m/:/}_2 --dtype q4_k --repeats 10; done
W wB_prof $B/lserve --dtype f16 --batch 8 --repeats 5 --profile
W wA_prof $A/lserve --dtype f16 --batch 8 --repeats 5 --profile
for m in inblock pre pre:4; do LSERVE_CUDA_MMV=$m C q8_0_${m/:/}_1 --dtype q8_0 --repeats 10; done
W wCq_1 $C/lserve --dtype q4_k --batch 1 --repeats 10
W wAq_1 $A/lserve --dtype q4_k --batch 1 --repeats 10
echo "total $(( $(date +%s)-T0 ))s" | tee -a $L; pack
