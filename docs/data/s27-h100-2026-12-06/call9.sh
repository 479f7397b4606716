#!/usr/bin/env bash
# Session 27, GPU call 9 (the command line of a call made on call 8's machine while it was still
# warm, its kernels cached): `_ws` and `_tma` unprofiled at 32K and the PyTorch anchor beside them.
BINS=.gpu/s27f/bins.tgz LIMIT=80; . scripts/gpu_call_lib.sh; S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
LSERVE_CUDA_PREFILL_WGMMA=2 C ws_32k $S32; C tma_32k $S32
{ timeout 60 python3 scripts/torch_prefill_bench.py --lengths 32768 --repeats 1 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; }
LSERVE_CUDA_PREFILL_WGMMA=2 C ws_32k_2 $S32; pack; tail -20 $L
