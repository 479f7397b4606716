#!/usr/bin/env bash
# Session 39, GPU call 1: session 38's split.patch (the GEMM path's page sums as two kernels with
# many more CTAs: antidiagonal_row_stats a warp per row, antidiagonal_block_sums a CTA per run
# of whole pages with eight rows' loads in flight; q packed with 16-byte reads), folded into the
# shared ad_block / ad_vmax. Parity first, then the 32K / 128K default-estimate rows with
# PyTorch's dense prefill, the 32K profile with clocks logged, the tiny-Gemma GPU tests, then the
# larger prefill steps and wgpu's rope_append_kv tests alone (kv_fp8 failed once in session 38).
BINS=.gpu/s39a/bins.tgz LIMIT=${LIMIT:-520} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
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
C ad32_prof $PF $S32 --profile --out-dir $OUT/ad32p
kill $SMI
C dense32 $PF --prefill 32768
E gem 60 $B/gemma3 cuda_ --test-threads 1
C ad32_c16 $PF $S32 --prefill-chunk 16384
C ad32_c32 $PF $S32 --prefill-chunk 32768
C mb32 $PF $S32 --prefill-estimate mean_bound
export LSERVE_REQUIRE_WGPU=1
E wrope 60 $B/backend_parity wgpu::rope_append_kv --test-threads 1
grep -B2 -A14 "stdout ----" "$OUT/wrope.txt" | head -60 | tee -a "$L"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
