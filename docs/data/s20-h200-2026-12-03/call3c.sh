#!/usr/bin/env bash
# Session 20, GPU call 3c (right after 3a and 3b, same machine): the default model joined, then
# wgpu_e2e on the H200 (greedy ids of SmolLM2 on wgpu against the CPU, f32 and f16 weights,
# dense and sparse; prompt prefills of m > 64 run matmul_coop_128).
BINS=.gpu/s20c/bins.tgz LIMIT=${LIMIT:-400}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cat /root/smol.part.00 /root/smol.part.01 .gpu/s20e/smol.part.02 > /root/smol.gguf
md5sum /root/smol.gguf | tee -a "$L"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
LSERVE_TEST_MODEL=/root/smol.gguf E e2e 300 $B/wgpu_e2e --test-threads 1
LSERVE_TEST_MODEL=/root/smol.gguf LSERVE_WGPU_CHECKS=1 E e2e_checked 200 $B/wgpu_e2e dense_f16 --test-threads 1
# wgpu parity one test thread at a time (call 3a: with two, adapters failed to open).
P par1 200 wgpu::matmul wgpu::prefill_attention wgpu::page_select wgpu::sparse_decode_attention wgpu::embed --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
