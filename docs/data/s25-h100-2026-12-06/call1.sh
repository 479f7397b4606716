#!/usr/bin/env bash
# Session 25, GPU call 1: main at b1115b9 (session 24's GPU code; this session's eval, floor and q4_k_m changes) validated on the GPU — every
# CUDA parity test (all batch-1 GEMV modes), cuda_e2e, tensor parallelism on one GPU, every wgpu
# parity test (with and without the adapter's optional features) and the shader checks on this
# GPU's Vulkan (call 2); then #11's 32K prefill (dense, streaming heads, + block-sparse prefill at two
# budgets) beside the PyTorch anchor with its SDPA backend chosen (every backend timed, the
# fastest used; and the dispatcher's own choice as before); then #14's quantized prefill: 4K and
# 32K with Q4_K / Q8_0 weights (dequantized per GEMM into an f16 scratch for cuBLAS) against bf16.
BINS=.gpu/s25/bins.tgz LIMIT=${LIMIT:-500} # lserve, backend_parity, cuda_e2e, cuda_tp, shaders
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P cpar 300 cuda
E e2e 150 $B/cuda_e2e
E tp 100 $B/cuda_tp
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch_best.txt 2>&1; echo "torch best rc $?" | tee -a $L; cat $OUT/torch_best.txt | tee -a $L; pack; }
S="--contexts 4k --repeats 1 --prefill 32768"
C pf32k $S --sparse both
C pf32k_bs2k $S --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C pf32k_bs4k $S --sparse on --prefill-budget 4096 --prefill-dense-below 8192
C pf32k_prof $S --sparse off --profile
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 --sdpa default > $OUT/torch_default.txt 2>&1; echo "torch default rc $?" | tee -a $L; tail -3 $OUT/torch_default.txt | tee -a $L; pack; }
C pf4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C pf4k_q4k --dtype q4_k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C pf4k_q8 --dtype q8_0 --contexts 4k --repeats 2 --prefill 4096 --sparse off
C pf32k_q4k --dtype q4_k $S --sparse off --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
