#!/usr/bin/env bash
# Session 18, GPU call 3: how many splits the batch-1 sparse decode attention wants. The computed
# count fills about one wave of blocks (132-ish splits per KV head at 32K), which under page
# selection leaves each split ~32 of a retrieval head's 4096 keys. LSERVE_CUDA_DECODE_SPLITS=N
# caps it; 8B 32K sparse batch 1, bf16 and q4_k (x8 activations), alternated twice; a --profile
# of each; then the x8 activations at 128K (q4_k, on vs off).
BINS=.gpu/s18c/bins.tgz LIMIT=${LIMIT:-480} # the binary of main with decode-splits-knob-measured-no-gain.patch applied
. scripts/gpu_call_lib.sh
S() { C "$@" --batch 1 --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for d in q4_k bf16; do
    for n in 0 8 16 32 64; do LSERVE_CUDA_DECODE_SPLITS=$n S ${d}_s${n}_$r --contexts 32k --dtype $d; done
  done
done
for n in 0 16; do LSERVE_CUDA_DECODE_SPLITS=$n S q4_k_s${n}_prof --contexts 32k --dtype q4_k --profile; done
LSERVE_CUDA_ACT_X8=0 S q4_k_128k_f32x --contexts 128k --dtype q4_k; S q4_k_128k_x8 --contexts 128k --dtype q4_k
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
