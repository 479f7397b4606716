#!/usr/bin/env bash
# Session 25, GPU call 3 (same binaries, the machine of calls 1-2): the wgpu parity tests again
# with two test threads (call 2's run on 16 threads found no adapter for 194 of 224 tests: the
# NVIDIA Vulkan driver refused that many devices at once), and the PyTorch anchor with the
# dispatcher's own SDPA choice, outside our CUDA library path (cuda_env.sh puts a cuDNN 9.14 on
# LD_LIBRARY_PATH; torch 2.11 needs its bundled 9.19 and, finding the older one, has no cuDNN
# attention at all: the anchor of sessions 11-24 ran on flash attention, half as fast).
BINS=.gpu/s25/bins.tgz LIMIT=${LIMIT:-450}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P wpar 400 wgpu --test-threads 2
left && { env -u LD_LIBRARY_PATH timeout 120 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 --sdpa default > $OUT/torch_default.txt 2>&1; echo "torch default rc $?" | tee -a $L; tail -3 $OUT/torch_default.txt | tee -a $L; pack; }
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
