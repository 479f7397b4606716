#!/usr/bin/env bash
# Session 27, GPU call 6: `_tma` as the default Hopper prefill (the kernel of call 3, unchanged;
# LSERVE_CUDA_PREFILL_WGMMA=1 now picks the plain one). Parity of the default and of the plain
# kernel, compute-sanitizer memcheck over the hd128 prefill cases, the PyTorch anchor and the
# rows of issue #11 (32K dense / sparse, 4K), with decode rows beside them.
BINS=.gpu/s27e/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par_default 240 cuda::prefill_attention
LSERVE_CUDA_PREFILL_WGMMA=1 P par_plain 60 cuda::prefill_attention
E memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda::prefill_attention::kv_bf16_hd128 --test-threads 1
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
C tma_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=1 C plain_32k $S32 --profile
C tma_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=1 C plain_32k_2 $S32
C tma_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
C tma_32k_sp --contexts 4k --repeats 1 --prefill 32768 --sparse on
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
