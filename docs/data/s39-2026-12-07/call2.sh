#!/usr/bin/env bash
# Session 39, GPU call 2: the residual add folded into o_proj's and down's cuBLAS GEMMs (beta = 1,
# `Backend::matmul_accumulates`; LSERVE_CUDA_FUSE_RESIDUAL=0 runs add_rmsnorm as before, same
# binary) and rope_append_kv_rows with four heads' loads in flight a thread. Parity first (the
# matmul cases with accumulate, rope, norms), the CUDA end-to-end greedy tests and tiny Gemma;
# then the 32K dense / sparse and 128K sparse rows with and without the fused residual beside
# PyTorch's dense prefill, the 32K sparse profile (its whole kernel list in bench.json), and a
# batch-16 decode row either way (batch decode GEMMs take the fused residual too).
BINS=.gpu/s39b/bins.tgz LIMIT=${LIMIT:-520} # lserve, backend_parity, gemma3, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P par 240 cuda::matmul cuda_dequant_chunks cuda::rope_append_kv cuda::rmsnorm cuda::add_rmsnorm
E e2e 150 $B/cuda_e2e --test-threads 1
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad32 $PF $S32
LSERVE_CUDA_FUSE_RESIDUAL=0 C ad32_nofuse $PF $S32
C dense32 $PF --prefill 32768
LSERVE_CUDA_FUSE_RESIDUAL=0 C dense32_nofuse $PF --prefill 32768
C ad128 $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
C ad32_prof $PF $S32 --profile --out-dir /root/ad32p
cp /root/ad32p/bench.json "$OUT/ad32_prof.json" 2>/dev/null; (cd "$OUT" && tar -czf all.tgz ./*.txt ./*.json)
C ad32_2 $PF $S32
LSERVE_CUDA_FUSE_RESIDUAL=0 C ad32_nofuse2 $PF $S32
C dec16 --contexts 32k --batch 16 --sparse on --repeats 5
LSERVE_CUDA_FUSE_RESIDUAL=0 C dec16_nofuse --contexts 32k --batch 16 --sparse on --repeats 5
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; (cd "$OUT" && tar -czf all.tgz ./*.txt ./*.json)
