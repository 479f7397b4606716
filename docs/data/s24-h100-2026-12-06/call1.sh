#!/usr/bin/env bash
# Session 24, GPU call 1: programmatic dependent launch with the GEMVs' weights prefetched into L2
# before their wait, and page_select's bound_shrink. Correctness (the GEMV parity of the batch-1
# modes touched, the decode ops, page_select with shrunk boxes on CUDA and wgpu, cuda_e2e: greedy
# ids against the CPU and graph replay bit-identical), then the 8B step against session 23's
# binary (lserve_prev, dd1c49d), alternated; the same binary with LSERVE_CUDA_PDL=off, with the
# trigger after the wait (LSERVE_PDL_EARLY=0) and with 4 prefetched lines a thread.
BINS=.gpu/s24/bins.tgz LIMIT=${LIMIT:-450} # lserve, lserve_prev, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
F=()
for m in cuda cuda_mmv_reg; do for w in w_q4_k w_int8 w_q8_0 w_bf16; do F+=("$m::matmul::$w"); done; done
P par 200 "${F[@]}" cuda::rope_append_kv:: cuda::sparse_decode_attention:: cuda::page_select:: cuda::add_rmsnorm cuda::silu_mul
E e2e 120 $B/cuda_e2e
LSERVE_REQUIRE_WGPU=1 P wpar 100 wgpu::page_select::
E warm_prev 120 $B/lserve_prev bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 4k --repeats 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
OFF() { LSERVE_CUDA_PDL=off C "$@"; }
for i in 1 2; do C new_$i --dtype q4_k $S; PREV prev_$i --dtype q4_k $S; OFF off_$i --dtype q4_k $S; done
C new_q8 --dtype q8_0 $S; PREV prev_q8 --dtype q8_0 $S
C new_bf16 --dtype bf16 $S; PREV prev_bf16 --dtype bf16 $S
C new_128k --dtype q4_k ${S/32k/128k}; PREV prev_128k --dtype q4_k ${S/32k/128k}
C new_pf4k --dtype bf16 --contexts 4k --repeats 2 --prefill 4096 --sparse off
PREV prev_pf4k --dtype bf16 --contexts 4k --repeats 2 --prefill 4096 --sparse off
LSERVE_CUDA_DEFINES="-DLSERVE_PDL_EARLY=0" C late_1 --dtype q4_k $S
LSERVE_CUDA_DEFINES="-DLSERVE_PF_LINES=4" C pf4_1 --dtype q4_k $S
C new_i8 --dtype int8 $S; PREV prev_i8 --dtype int8 $S
C new_3 --dtype q4_k $S; PREV prev_3 --dtype q4_k $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
