#!/usr/bin/env bash
# Session 39, GPU call 3: prefill_attention writes o_proj's x in bf16 (Caps::act16_from; the
# round_x pass before o_proj goes) and the fused residual only from 256 rows (ACC_FROM_M). Parity
# first (every prefill kernel into f32, f16 and bf16 outs; the matmul accumulate cases), the CUDA
# end-to-end greedy tests and tiny Gemma; then the 32K dense / sparse and 128K sparse rows of this
# build and call 2's (s39b: the fused residual, f32 attention out) alternated, PyTorch's dense
# prefill, the 32K sparse profile, and the batch-16 decode row.
BINS=.gpu/s39c/bins.tgz LIMIT=${LIMIT:-520} # lserve, backend_parity, gemma3, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
OLD=/root/s39b; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s39b/bins.tgz -C $OLD
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P par 300 cuda::prefill_attention cuda_prefill_ cuda::matmul
E e2e 150 $B/cuda_e2e --test-threads 1
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad32 $PF $S32
LSERVE_BIN=$OLD/lserve C ad32_b $PF $S32
C dense32 $PF --prefill 32768
LSERVE_BIN=$OLD/lserve C dense32_b $PF --prefill 32768
C ad128 $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
C ad32_2 $PF $S32
LSERVE_BIN=$OLD/lserve C ad32_b2 $PF $S32
C dense32_2 $PF --prefill 32768
LSERVE_BIN=$OLD/lserve C dense32_b2 $PF --prefill 32768
C ad32_prof $PF $S32 --profile --out-dir /root/ad32p
cp /root/ad32p/bench.json "$OUT/ad32_prof.json" 2>/dev/null
C dec16 --contexts 32k --batch 16 --sparse on --repeats 5
LSERVE_BIN=$OLD/lserve LSERVE_CUDA_FUSE_RESIDUAL=0 C dec16_b --contexts 32k --batch 16 --sparse on --repeats 5
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; (cd "$OUT" && tar -czf all.tgz ./*.txt ./*.json)
