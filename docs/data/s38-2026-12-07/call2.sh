#!/usr/bin/env bash
# NOT RUN: after call 1 no device machine could be started in session 38. It measures the code of
# split.patch (it applies to commit 1655081; fold its `ad_block` into the shared `ad_block` /
# `ad_vmax` of antidiagonal_score.cu to apply it on later main; rebuild the bins).
# Session 38, GPU call 2: the GEMM path's page sums in two kernels with many more CTAs
# (antidiagonal_row_stats: a warp per row; antidiagonal_block_sums: a CTA per run of whole pages,
# eight rows' loads in flight) and q packed with 16-byte reads (call 1's profile: block_sums 93.6
# ms, pack_q 16.7 ms of a 32K prefill). Parity, the tiny-Gemma GPU tests, the 32K/128K
# default-estimate rows with PyTorch's dense prefill, the 32K op profile; then wgpu's
# rope_append_kv tests alone (kv_fp8 failed in call 1's all-wgpu run, cut off before its message).
# Also both estimates' 32K op profiles with the SM clock and power logged (cuBLAS measured 600
# ms in antidiagonal runs and 641-655 in mean-bound runs in session 37), and 16K / 32K prefill steps (--prefill-chunk; 8192 by default) for both estimates.
BINS=.gpu/s38c/bins.tgz LIMIT=${LIMIT:-185} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 220 cuda::antidiagonal_score
PF="--contexts 4k --repeats 1"
S32="--prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096"
S128="--prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad32 $PF $S32
C ad128 $PF $S128
E torch 200 python3 scripts/torch_prefill_bench.py --lengths 32768,131072 --chunk 131072 --repeats 2
grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > "$OUT/clocks.txt" 2>&1 &
SMI=$!
C ad32_prof $PF $S32 --profile
C mb32_prof $PF $S32 --prefill-estimate mean_bound --profile
kill $SMI
C ad32_2 $PF $S32
E gem 60 $B/gemma3 cuda_ --test-threads 1
C ad32_c16 $PF $S32 --prefill-chunk 16384
C mb32 $PF $S32 --prefill-estimate mean_bound
C mb32_c16 $PF $S32 --prefill-estimate mean_bound --prefill-chunk 16384
C mb32_c32 $PF $S32 --prefill-estimate mean_bound --prefill-chunk 32768
export LSERVE_REQUIRE_WGPU=1
E wrope 90 $B/backend_parity wgpu::rope_append_kv wgpu_plain::rope_append_kv --test-threads 1
grep -A12 "stdout ----" "$OUT/wrope.txt" | head -40 | tee -a "$L"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
