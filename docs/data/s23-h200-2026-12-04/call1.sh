#!/usr/bin/env bash
# Session 23, GPU call 1: the Q4_K / Q5_K GEMV with 64 elements a lane (matmul_gemv_<fmt>_m1_regw,
# MmvMode::RegWide, the new Auto for both) and rope_append_kv folding a one-token call's keys into
# the page summaries (no rope_append_kv_summary launch in a batch-1 step). Correctness first
# (every kernel compiles; parity of the GEMV modes for Q4_K / Q5_K, rope_append_kv for every KV
# dtype, the decode attention; cuda_e2e), then the 8B step alternated: the new default, the new
# binary with the 32-element kernel (LSERVE_CUDA_MMV=reg: the fold alone), and session 22's
# binary (lserve_prev). Last, wgpu parity of the decode attention on the H200 (session 22's
# shared key list had run on lavapipe only).
BINS=.gpu/s23a/bins.tgz LIMIT=${LIMIT:-560} # lserve, lserve_prev, backend_parity, cuda_test, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
E compile 200 $B/cuda_test every_kernel_compiles
F=()
for m in cuda cuda_mmv_reg cuda_mmv_reg_loop cuda_mmv_regw cuda_mmv_regw_loop cuda_mmv_pre; do
  for w in w_q4_k w_q5_k; do F+=("$m::matmul::$w"); done
done
P par 300 "${F[@]}" cuda::rope_append_kv:: cuda::sparse_decode_attention:: cuda::page_select::
E e2e 200 $B/cuda_e2e
E warm_prev 200 $B/lserve_prev bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 4k --repeats 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
C new_1 --dtype q4_k $S
LSERVE_CUDA_MMV=reg C narrow_1 --dtype q4_k $S
PREV prev_1 --dtype q4_k $S
C new_2 --dtype q4_k $S
LSERVE_CUDA_MMV=reg C narrow_2 --dtype q4_k $S
PREV prev_2 --dtype q4_k $S
C new_q5k --dtype q5_k $S
PREV prev_q5k --dtype q5_k $S
C new_128k --dtype q4_k ${S/32k/128k}
C new_prof --dtype q4_k $S --profile
C new_q8 --dtype q8_0 $S
PREV prev_q8 --dtype q8_0 $S
export LSERVE_REQUIRE_WGPU=1
P par_wgpu 150 wgpu::sparse_decode_attention:: wgpu::rope_append_kv:: --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
