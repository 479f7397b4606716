#!/usr/bin/env bash
# Session 42, GPU call 2 (a new machine start after call 1): #11's 32K prefill rows with
# PyTorch's dense prefill (scripts/torch_prefill_bench.py, SDPA) in the same call, for a ratio
# with session 41's lazy rescaling in the Hopper prefill (no anchor ran in session 41's calls);
# and wgpu Q4_K profiles with each epilogue turned off, which separate the plain q|k|v and
# gate|up GEMVs (profiled as matmul_gemv_x8 with o_proj, down and the LM head) from the fused ones.
BINS=.gpu/s42c/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
WS="--kv-dtype f16 $S"
LSERVE_WGPU_FUSE_ROPE=0 W wq4k_prof_norope --dtype q4_k $WS --profile
LSERVE_WGPU_FUSE_SILU=0 W wq4k_prof_nosilu --dtype q4_k $WS --profile
W wq4k_prof --dtype q4_k $WS --profile
export LSERVE_REQUIRE_CUDA=1
PF="--contexts 4k --repeats 1"
BENCH_TIMEOUT=300 C dense32_1 $PF --prefill 32768
C s32_1 $PF --prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096
left && E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768 --repeats 2
[ -f "$OUT/torch.txt" ] && grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
C dense32_2 $PF --prefill 32768
C s32_2 $PF --prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
