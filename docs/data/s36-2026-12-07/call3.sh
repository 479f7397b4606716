#!/usr/bin/env bash
# Session 36, GPU call 3: page_select's top-k by a radix select (select_row) instead of a
# bitonic sort of every candidate — its CUDA parity (page_select, page_top_k, and the decode
# attention reading its lists), the reverted antidiagonal kernel's parity, then the 128K q4_k
# sparse decode step (median and mean with selection every 4th step; every step) with physical
# and logical units, against call 2's rows of the sort (docs/data/s36-2026-12-07/call2/).
BINS=.gpu/s36b/bins.tgz LIMIT=${LIMIT:-220} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 150 cuda::page_select cuda::page_top_k cuda::sparse_decode_attention cuda::antidiagonal_score
D="--contexts 128k --sparse on --dtype q4_k"
C dec_phys $D
C dec_log $D --select-unit logical
C dec_phys_si1 $D --selector-interval 1
C dec_log_si1 $D --select-unit logical --selector-interval 1
E gem 60 $B/gemma3 cuda_ --test-threads 1
PF="--contexts 4k --repeats 1 --prefill 32768"
BS="--sparse on --prefill-budget 2048 --prefill-dense-below 4096"
C ad $PF $BS
C mb $PF $BS --prefill-estimate mean_bound
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
