#!/usr/bin/env bash
# Session 21, GPU call 4c (right after 4a and 4b, same machine): the default model joined, then
# wgpu_e2e and the wgpu native-quantized test on the H200 (greedy ids against the CPU; the
# Q4_1 / Q8_0 decode steps now take x8 activations from their producers).
BINS=.gpu/s21h/bins.tgz LIMIT=${LIMIT:-420}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cat /root/smol.part.00 /root/smol.part.01 .gpu/s21j/smol.part.02 > /root/smol.gguf
md5sum /root/smol.gguf | tee -a "$L"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
LSERVE_TEST_MODEL=/root/smol.gguf E e2e 300 $B/wgpu_e2e --test-threads 1
LSERVE_TEST_MODEL=/root/smol.gguf E qw 200 $B/quant_weights wgpu --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
