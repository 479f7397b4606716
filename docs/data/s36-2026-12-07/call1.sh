#!/usr/bin/env bash
# Session 36, GPU call 1 (session 35's call1.sh, unrun there; binaries from 21b6a20): session 34's call2.sh (the antidiagonal estimate's parallel finalize:
# its CUDA parity, the 32K and 128K block-sparse rows with both estimates, PyTorch at 128K as one
# chunk, and the wgpu tests that died with a segmentation fault in session 34's call 1, one at a
# time), plus decode selection in logical-page units (`--select-unit logical`): the CUDA and wgpu
# parity of sparse_decode_attention and page_select, whose tests now run each selection unit,
# and the batch-1 128K sparse decode step with physical against logical units. Added here: the
# random tiny-Gemma tests of tests/gemma3.rs on CUDA and Vulkan (no model file needed), whose
# cuda_block_sparse_prefill_matches_cpu has never run on a GPU; and the 128K step with selection
# at every step (--selector-interval 1, the setting that meets #18 at 31K on the CPU).
BINS=.gpu/s36a/bins.tgz LIMIT=${LIMIT:-470} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::antidiagonal_score cuda::sparse_decode_attention cuda::page_select
E gem 90 $B/gemma3 cuda_ wgpu_ --test-threads 1
PF="--contexts 4k --repeats 1 --prefill 32768"
BS="--sparse on --prefill-budget 2048 --prefill-dense-below 4096"
C ad_prof $PF $BS --profile
C ad $PF $BS
C mb $PF $BS --prefill-estimate mean_bound
D="--contexts 128k --sparse on --dtype q4_k"
C dec_phys $D
C dec_log $D --select-unit logical
C dec_phys2 $D
C dec_log2 $D --select-unit logical
C dec_log_si1 $D --select-unit logical --selector-interval 1
C dec_phys_si1 $D --selector-interval 1
P128="--contexts 4k --repeats 1 --prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad128 $P128
C mb128 $P128 --prefill-estimate mean_bound
left && { timeout ${TT:-150} python3 scripts/torch_prefill_bench.py --lengths 131072 --chunk 131072 --repeats 1 > $OUT/torch128.txt 2>&1; echo "== torch128 rc $?" | tee -a $L; tail -3 $OUT/torch128.txt | tee -a $L; pack; }
P wsel 120 wgpu::sparse_decode_attention wgpu::page_select --test-threads 1
P ptk 40 wgpu::page_top_k --test-threads 1 --nocapture
P ptk_plain 40 wgpu_plain::page_top_k --test-threads 1 --nocapture
P ad_i8 60 wgpu::antidiagonal_score::kv_int8_hd64 --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
