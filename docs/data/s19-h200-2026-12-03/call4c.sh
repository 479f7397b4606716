#!/usr/bin/env bash
# Session 19, GPU call 4c (right after 4a and 4b, same machine): the default model joined from its
# three parts, SmolLM2 natively quantized on CUDA against the dequantized CPU path (its 1536-wide
# down projections are Q4_1 rows of whole super-blocks: packed; the 576-wide ones stay GGML
# blocks; after the review the 576-wide ones take f32 x again), then the register GEMVs' shared
# store tail (mmv_reg_put4 / mmv_reg_out: same instruction count, other scheduling) against call
# 3's binary (lserve_old), alternated.
BINS=.gpu/s19d/bins.tgz LIMIT=${LIMIT:-400} # lserve, quant_weights: unpacked by call 4b into /root/s19d
tar -xzf .gpu/s19e/old.tgz -C /root/s19d
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
old() { local name=$1; shift; left || return; local t0; t0=$(date +%s)
  timeout 120 $B/lserve_old bench --device cuda --shape llama3-8b --head argmax "$@" > "$OUT/$name.txt" 2>&1
  step_end "$name" $? "$t0"; grep -E "^ +cuda" "$OUT/$name.txt" | tee -a "$L"; pack; }
E warm_old 200 $B/lserve_old bench --device cuda --shape llama3-8b --head argmax --dtype bf16 --batch 1 --contexts 4k --repeats 1
old q4_k_old1 --dtype q4_k $S
C q4_k_new1 --dtype q4_k $S
old q8_0_old1 --dtype q8_0 $S
C q8_0_new1 --dtype q8_0 $S
old q4_k_old2 --dtype q4_k $S
C q4_k_new2 --dtype q4_k $S
C q4_1_new --dtype q4_1 $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
