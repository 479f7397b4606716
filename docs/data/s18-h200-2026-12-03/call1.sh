#!/usr/bin/env bash
# Session 18, GPU call 1: batch-1 activations as x8 digits (DType::X8: rmsnorm / add_rmsnorm /
# silu_mul write the digits the integer GEMV reads, no matmul_quantize_x_m1 launch). Parity of
# the ops with X8 outs and of matmul with an X8 x (every mode of the batch-1 GEMV, whose choice
# was restructured), CUDA e2e with quantized synthetic weights vs the CPU, then the 8B 32K sparse
# batch-1 step with LSERVE_CUDA_ACT_X8=0 (each GEMV quantizes x itself) vs on, alternated twice.
BINS=.gpu/s18a/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 # (E was defined here in the run; now in gpu_call_lib.sh, same steps)
P par 220 cuda::rmsnorm cuda::add_rmsnorm cuda::silu_mul cuda::matmul cuda_mmv
E e2e 150 $B/cuda_e2e --nocapture quantized_weights graph_replay
grep -q "test result: ok" $OUT/e2e.txt && grep -q "test result: ok" $OUT/par.txt || { echo "correctness failed" | tee -a $L; }
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for d in q4_k int8 q8_0 q5_k; do
    LSERVE_CUDA_ACT_X8=0 S ${d}_f32x_$r --dtype $d; S ${d}_x8_$r --dtype $d
  done
done
S bf16_1 --dtype bf16
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
