#!/usr/bin/env bash
# Session 26, GPU call 2: #11's Hopper prefill attention pipelined (a round issues S(ti) with
# O += P V(ti - 1) so the softmax of ti overlaps P V(ti - 1); K staged a round ahead of V; the
# boundary-tile mask predicated per element) against session 25's binary (lserve_prev) in the same
# call, beside the PyTorch anchor; the prefill-attention parity tests; #14's quantized prefill with
# the new default scratch (256 MiB) and cuda_e2e's f16-GEMM-path test (dense only); #14's memory
# target on wgpu with the allocator's own figures (sub-allocation blocks of 4-8 MiB).
BINS=.gpu/s26b/bins.tgz LIMIT=${LIMIT:-520} # lserve, lserve_prev, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::prefill_attention
E e2e 60 $B/cuda_e2e quantized_prefill
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
S32="--contexts 4k --repeats 1 --prefill 32768"
PREV prev_32k $S32 --sparse off --profile
C new_32k $S32 --sparse off --profile
PREV prev_32k_2 $S32 --sparse off
C new_32k_2 $S32 --sparse off
C new_32k_sparse $S32 --sparse on
C new_32k_bs2k $S32 --sparse on --prefill-budget 2048 --prefill-dense-below 4096
PREV prev_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C new_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
left && { timeout 120 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -6 $OUT/torch.txt | tee -a $L; pack; }
C new_q4k_4k --dtype q4_k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C new_q4k_32k --dtype q4_k $S32 --sparse off
MEM() { local name=$1; shift; left || return
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) > $OUT/mem_$name.txt 2>&1 & local MP=$!
  timeout 150 $B/lserve bench --device wgpu --dtype q4_k_m --shape llama3-8b --contexts 8k --batch 1 \
    --head argmax --repeats 2 "$@" > $OUT/memb_$name.txt 2>&1; echo "== mem $name rc $?" | tee -a $L
  kill $MP; grep -E "^ *wgpu|rror|device memory" $OUT/memb_$name.txt | tee -a $L
  echo "memory.used MiB ($name): max $(sort -n $OUT/mem_$name.txt | tail -1)" | tee -a $L; pack; }
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tee -a $L
MEM f16_w3 --kv-dtype f16 --sparse off --warmup 3 --warmup-ms 0
MEM f16_sparse_w3 --kv-dtype f16 --sparse on --warmup 3 --warmup-ms 0
MEM f16 --kv-dtype f16 --sparse off
MEM int8_w3 --kv-dtype int8 --sparse off --warmup 3 --warmup-ms 0
PREV prev_32k_3 $S32 --sparse off
C new_32k_3 $S32 --sparse off
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
