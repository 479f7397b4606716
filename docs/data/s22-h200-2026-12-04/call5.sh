#!/usr/bin/env bash
# Session 22, GPU call 5 (right after calls 3 and 4, same machine): the default model joined, then
# wgpu_e2e and the wgpu native-quantized test on the H200 (greedy ids and NLL against the CPU)
# with the new decode attention, at both of its head counts.
BINS=.gpu/s22c/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cat /root/smol.part.00 /root/smol.part.01 .gpu/s22e/smol.part.02 > /root/smol.gguf
md5sum /root/smol.gguf | tee -a "$L"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
LSERVE_TEST_MODEL=/root/smol.gguf E e2e 240 $B/wgpu_e2e --test-threads 1
LSERVE_TEST_MODEL=/root/smol.gguf E qw 150 $B/quant_weights wgpu --test-threads 1
LSERVE_WGPU_KV16_GMAX=4 LSERVE_TEST_MODEL=/root/smol.gguf E e2e_g4 240 $B/wgpu_e2e --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
