#!/usr/bin/env bash
# Session 19, GPU call 3c (right after 3a and 3b, same machine): the default model joined from its
# three parts, SmolLM2 natively quantized on CUDA against the dequantized CPU path (its 1536-wide
# down projections are Q4_1 rows of whole super-blocks: packed; the 576-wide ones stay GGML
# blocks), then the 8B step of Q4_1 and Q5_1 with packing off and on, and the other packed formats once.
BINS=.gpu/s19d/bins.tgz LIMIT=${LIMIT:-400} # lserve, quant_weights: unpacked by call 3b into /root/s19d
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
cat /root/smol.part.00 /root/smol.part.01 .gpu/s19e/smol.part.02 > /root/smol.gguf
md5sum /root/smol.gguf | tee -a "$L"
# tests/common reads tests/data from the build machine's checkout path.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
LSERVE_TEST_MODEL=/root/smol.gguf E smol 200 $B/quant_weights smollm2_native_quantized_matches_dequantized_cuda --nocapture
grep -E "device weight bytes|diverges|mean NLL" "$OUT/smol.txt" | tee -a "$L"
E warm 200 $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype bf16 --batch 1 --contexts 4k --repeats 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
LSERVE_CUDA_PACK=0 C q4_1_off --dtype q4_1 $S
C q4_1_on --dtype q4_1 $S
LSERVE_CUDA_PACK=0 C q5_1_off --dtype q5_1 $S
C q5_1_on --dtype q5_1 $S
C q4_0 --dtype q4_0 $S
C q5_0 --dtype q5_0 $S
C q8_0 --dtype q8_0 $S
C q4_k --dtype q4_k $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
