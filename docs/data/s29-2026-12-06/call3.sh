#!/usr/bin/env bash
# Session 29, GPU call 3: two more changes to the Hopper prefill on top of HEAD fb626dc (lserve):
# (`lserve_rpv`, built, was dropped from the call for device time: see the README)
# `lserve_rpv` rescales O just before P V is issued, inside the burst while S runs, every tile
# (FlashAttention-3's order; the softmax's tail is then only P's packing), and `lserve_both` adds
# a suspend-time hint to every mbarrier wait (call 2's profile: the producer's spin loop was 5%
# of the issued instructions). Parity of the Hopper prefill variants, memcheck and cuda_e2e run on
# the `both` tree (backend_parity and cuda_e2e built from it); 32K dense alternated; the PyTorch
# anchor; #11's other rows with `both`.
BINS=.gpu/s29/bins.tgz LIMIT=${LIMIT:-290}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 240 cuda::prefill_attention cuda_prefill_ws cuda_prefill_tma cuda_prefill_plain
E memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda_prefill_ws::prefill_attention::kv_bf16_hd128 --test-threads 1
S="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
LSERVE_BIN=$B/lserve_both C both_32k $S --profile
C head_32k $S --profile
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
for i in 2 3; do
  LSERVE_BIN=$B/lserve_both C both_32k_$i $S
  C head_32k_$i $S
done
E e2e 100 "$B/cuda_e2e" --test-threads 1
T="--contexts 4k --repeats 1 --prefill 32768"
LSERVE_BIN=$B/lserve_both C both_32k_sp $T --sparse on
LSERVE_BIN=$B/lserve_both C both_32k_bs2k $T --sparse on --prefill-budget 2048 --prefill-dense-below 4096
LSERVE_BIN=$B/lserve_both C both_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
C head_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
