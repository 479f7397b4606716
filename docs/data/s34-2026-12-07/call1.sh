#!/usr/bin/env bash
# Session 34, GPU call 1 (session 33's call1.sh, which never ran, less the Gemma 3 tests that need
# the model carried first): block-sparse prefill's antidiagonal estimate (antidiagonal_score +
# page_top_k) on the device. Parity of the new ops on CUDA and on the NVIDIA Vulkan driver (wgpu),
# then the 32K and 128K prefill rows: dense, block-sparse (budget 2048 from 4K; 4096 from 32K at
# 128K) with the antidiagonal (the default) and with the mean-query bound, op by op (--profile)
# and whole, beside the PyTorch anchor in the same call.
BINS=.gpu/s34a/bins.tgz LIMIT=${LIMIT:-480} # lserve, backend_parity, gemma3, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 antidiagonal_score page_top_k cuda::page_select::
PF="--contexts 4k --repeats 1 --prefill 32768"
BS="--sparse on --prefill-budget 2048 --prefill-dense-below 4096"
C ad_prof $PF $BS --profile
C mb_prof $PF $BS --prefill-estimate mean_bound --profile
C ad $PF $BS
C mb $PF $BS --prefill-estimate mean_bound
C dense $PF --sparse off
left && { timeout 120 python3 scripts/torch_prefill_bench.py --lengths 32768 --repeats 1 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
P128="--contexts 4k --repeats 1 --prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad128 $P128
C mb128 $P128 --prefill-estimate mean_bound
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 131072 --repeats 1 > $OUT/torch128.txt 2>&1; echo "== torch128 rc $?" | tee -a $L; tail -3 $OUT/torch128.txt | tee -a $L; pack; }
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
