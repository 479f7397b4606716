#!/usr/bin/env bash
# Session 14, GPU call 3 (warm after call 2): call 1's failing parity seed and three others on the
# mma.sync kernel (0), the plain wgmma (1) and `_pipe` (2). Binaries in .gpu/s14a/bins.tgz.
BINS=.gpu/s14a/bins.tgz; . scripts/gpu_call_lib.sh >/dev/null 2>&1
for v in 0 1 2; do for s in 1796256535111391395 11 12 13; do
  LSERVE_TEST_SEED=$s LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=$v timeout 60 $B/backend_parity cuda::prefill_attention::kv_f16_hd128 2>&1 | grep -E "test result|got" | sed "s/^/v$v s$s /" | cut -c1-200
done; done
