#!/usr/bin/env bash
# Session 18, GPU call 4: the review's mends, re-verified. The batch-1 GEMV modes now open with
# their mode (cuda_mmv_* backends: `pre` and `reg` list all nine integer formats for X8, so
# matmul with an X8 x runs for every format), the X8 outs' block sums are checked, the ops refuse
# X8 when it is off; the decode attention and norms with X8 outs, the quantized e2e, TP on one GPU.
BINS=.gpu/s18d/bins.tgz LIMIT=${LIMIT:-330}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
P mmv 200 cuda_mmv cuda::rmsnorm cuda::add_rmsnorm cuda::silu_mul
P attn 100 cuda::sparse_decode_attention cuda::matmul::w_q4_k cuda::matmul::w_int8
E e2e 100 $B/cuda_e2e
E tp 60 $B/cuda_tp
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
