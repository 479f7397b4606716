#!/usr/bin/env bash
# Session 28, GPU call 5: after the review's simplifications (silu_mul's one launch geometry for
# both input kinds, the summary scan without its redundant padding checks, one common-dtype helper
# in the model): parity of the ops they touch, the CUDA end-to-end tests, memcheck of the summary
# pass, and a 32K prefill beside the PyTorch anchor.
BINS=.gpu/s28e/bins.tgz LIMIT=${LIMIT:-300}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P cpar 200 cuda::silu_mul cuda::rope_append_kv cuda::matmul
E e2e 120 $B/cuda_e2e
E memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda::rope_append_kv::kv_bf16 cuda::silu_mul --test-threads 1
C new_32k --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
left && { timeout 100 python3 scripts/torch_prefill_bench.py --lengths 32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -2 $OUT/torch.txt | tee -a $L; pack; }
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
