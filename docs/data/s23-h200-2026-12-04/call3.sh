#!/usr/bin/env bash
# Session 23, GPU call 3: the final code (the summary fold; the 64-element GEMV removed) —
# parity of the Q4_K / Q5_K GEMV modes, rope_append_kv, the decode attention and page
# selection; cuda_e2e; tensor parallelism on one GPU; then the 8B step against session 22's
# binary, alternated, for Q4_K and Q8_0 at 32K and 128K, int8 rows and bf16 at 32K.
BINS=.gpu/s23b/bins.tgz LIMIT=${LIMIT:-540} # lserve, lserve_prev, backend_parity, cuda_e2e, cuda_tp, cuda_test
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
F=()
for m in cuda cuda_mmv_reg cuda_mmv_reg_loop cuda_mmv_pre; do for w in w_q4_k w_q5_k; do F+=("$m::matmul::$w"); done; done
P par 300 "${F[@]}" cuda::rope_append_kv:: cuda::sparse_decode_attention:: cuda::page_select::
E e2e 200 $B/cuda_e2e
E tp 200 $B/cuda_tp
E warm_prev 200 $B/lserve_prev bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 4k --repeats 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
for i in 1 2; do C new_$i --dtype q4_k $S; PREV prev_$i --dtype q4_k $S; done
C new_128k --dtype q4_k ${S/32k/128k}
PREV prev_128k --dtype q4_k ${S/32k/128k}
C new_i8 --dtype int8 $S
PREV prev_i8 --dtype int8 $S
C new_bf16 --dtype bf16 $S
PREV prev_bf16 --dtype bf16 $S
C new_q8_128k --dtype q8_0 ${S/32k/128k}
PREV prev_q8_128k --dtype q8_0 ${S/32k/128k}
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
