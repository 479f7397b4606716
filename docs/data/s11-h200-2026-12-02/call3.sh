#!/usr/bin/env bash
# Session 11, GPU call 3 (the last ~6 device minutes): parity of every new kernel, then the
# benchmarks in priority order; each step re-tars $OUT/all.tgz so a cut-off run keeps what ran.
# A step starts only while fewer than LIMIT seconds have passed.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-185}
B=/root/s11f; mkdir -p $B; tar -xzf .gpu/s11f/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
pack() { (cd $OUT && tar -czf all.tgz *.txt 2>/dev/null); }
P() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 100 $B/backend_parity "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "test result|FAILED|panicked" $OUT/$name.txt | head -8 | tee -a $L; grep -A6 "panicked" $OUT/$name.txt | head -24 | tee -a $L; pack; }
C() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 60 $B/lserve bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -12 | tee -a $L; pack; }
W() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 60 $B/lserve bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -14 | tee -a $L; pack; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
# 1. CUDA parity: the wgmma prefill (head_dim 128, 16-bit KV; the new head_dim-64 axes run the
# mma.sync kernel), the 8-bit KV kernels.
LSERVE_REQUIRE_CUDA=1 P pc_main cuda::prefill_attention::kv_bf16_hd128 cuda::prefill_attention::kv_f16_hd128 cuda::prefill_attention::kv_f16_hd64 cuda::prefill_attention::kv_bf16_hd64 cuda::rope_append_kv cuda::sparse_decode_attention::kv_int8_hd128 cuda::sparse_decode_attention::kv_bf16_hd128 cuda::page_select::kv_int8_hd128
# 2. wgpu parity (own processes: the driver stops giving adapters after ~30 devices a process).
LSERVE_REQUIRE_WGPU=1 P pw_mm wgpu::matmul
LSERVE_REQUIRE_WGPU=1 P pw_pf wgpu::prefill_attention
# 3. CUDA prefill 32K dense, wgmma vs mma.sync (prefill_attention us -> TFLOP/s = 2.815e8 / us).
LSERVE_CUDA_PREFILL_WGMMA=1 C pf32k_wgmma --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
LSERVE_CUDA_PREFILL_WGMMA=0 C pf32k_mma --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
# 4. wgpu 4K prefill with the new GEMM and attention (old: 2,489 ms in call 2).
W wpf_new --contexts 4k --prefill 4096 --repeats 1 --profile
# 5. CUDA 4K prefill.
C pf4k --contexts 4k --repeats 1 --prefill 4096 --sparse both
# 6. CUDA 8-bit KV sparse decode at 128K, alternated.
for i in 1 2; do for kv in bf16 int8; do C sp_${kv}_$i --contexts 128k --sparse on --kv-dtype $kv --repeats 10; done; done
# 7. wgpu batched decode (#12).
W wb_new --contexts 32k --batch 1,8 --repeats 10
# PyTorch prefill anchor (4K / 32K; attention TFLOP/s beside ours).
left && { timeout 60 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
# 8. The _ovl wgmma variant; CUDA q4_k with the warm bench; wgpu old GEMM for the record.
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_ovl cuda::prefill_attention::kv_bf16_hd128 cuda::prefill_attention::kv_f16_hd128
LSERVE_CUDA_PREFILL_WGMMA=2 C pf32k_ovl --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
C q4k --contexts 32k --sparse on --dtype q4_k --repeats 10
W wb_prof --contexts 32k --batch 8 --repeats 5 --profile
echo "total $(( $(date +%s)-T0 ))s" | tee -a $L; pack
