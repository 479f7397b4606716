#!/usr/bin/env bash
# Session 18, GPU call 2: x8 activations now also from the decode attention (its merge writes the
# o projection's digits) and only for the formats whose batch-1 GEMV reads digits
# (ops_matmul::x8_dtypes: Q4_K, Q5_K, Q6_K, Q5_1, int8 rows). Parity (attention X8 outs, the
# norms, matmul X8 x), CUDA e2e (quantized synthetic weights vs CPU, graph replay), then the 8B
# 32K sparse batch-1 step with LSERVE_CUDA_ACT_X8=0 vs on, alternated twice; Q8_0 (no longer
# x8) and bf16 once; a --profile of the Q4_K step.
BINS=.gpu/s18b/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 # (E was defined here in the run; now in gpu_call_lib.sh, same steps)
P par 200 cuda::sparse_decode_attention cuda::rmsnorm cuda::add_rmsnorm cuda::silu_mul cuda::matmul::w_q4_k cuda::matmul::w_int8 cuda::matmul::w_q6_k cuda::matmul::w_q8_0
E e2e 150 $B/cuda_e2e --nocapture quantized_weights graph_replay
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for d in q4_k q5_k int8 q6_k; do
    LSERVE_CUDA_ACT_X8=0 S ${d}_f32x_$r --dtype $d; S ${d}_x8_$r --dtype $d
  done
done
LSERVE_CUDA_ACT_X8=0 S q8_0_f32x_1 --dtype q8_0; S q8_0_x8_1 --dtype q8_0
S bf16_1 --dtype bf16
S q4_k_prof --dtype q4_k --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
