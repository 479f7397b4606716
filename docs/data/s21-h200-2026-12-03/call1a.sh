#!/usr/bin/env bash
# Session 21, GPU call 1a: wgpu's batch-1 activations as x8 digits written by their producers
# (rmsnorm_x8, add_rmsnorm_x8, silu_mul_x8, sparse_decode_attention_merge_x8; the GEMV without its
# pack pass). The 32K q4_k and q8_0 steps of the new build (lserve) against session 20's final
# build (lserve_old), alternated, and profiled; wgpu parity of the ops that changed (processes of
# at most 25 tests); the first part of the default model kept in /root (call1b.sh, call1c.sh).
BINS=.gpu/s21a/bins.tgz LIMIT=${LIMIT:-420} # lserve, lserve_old, backend_parity, wgpu_e2e, quant_weights
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cp .gpu/s21a/smol.part.00 /root/
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1"
Wold() { LSERVE_BIN=$B/lserve_old W "$@"; }
W new_q4k_1 $D --dtype q4_k
Wold old_q4k_1 $D --dtype q4_k
W new_q4k_2 $D --dtype q4_k
Wold old_q4k_2 $D --dtype q4_k
W new_q8_1 $D --dtype q8_0
Wold old_q8_1 $D --dtype q8_0
W new_q4k_prof $D --dtype q4_k --profile
Wold old_q4k_prof $D --dtype q4_k --profile
P par_act 200 wgpu::rmsnorm wgpu::add_rmsnorm wgpu::silu_mul wgpu::sparse_decode_attention --test-threads 2
P par_mm 200 wgpu::matmul::w_ --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
