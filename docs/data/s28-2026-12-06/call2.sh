#!/usr/bin/env bash
# Session 28, GPU call 2: 16-bit GEMM outputs for a prefill's q|k|v and gate|up
# (Backend::matmul_out16_dtype; silu_mul and rope_append_kv read them) and the page-summary pass's
# vectorized scan. Parity of the ops it touches, the CUDA end-to-end greedy tests (the quantized
# prefill test runs the f16 outputs), then #11's rows with LSERVE_CUDA_OUT16=0 (the f32 outputs)
# beside the default in the same call, the PyTorch anchor, and Nsight Compute on `_ws` if time is left.
BINS=.gpu/s28b/bins.tgz LIMIT=${LIMIT:-470}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P cpar 200 cuda::silu_mul cuda::rope_append_kv cuda::matmul cuda::add_rmsnorm cuda::rmsnorm
E e2e 200 $B/cuda_e2e
S="--contexts 4k --repeats 1 --prefill 32768"
C o16_32k $S --sparse off --profile
LSERVE_CUDA_OUT16=0 C f32_32k $S --sparse off --profile
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
C o16_32k_2 $S --sparse off
LSERVE_CUDA_OUT16=0 C f32_32k_2 $S --sparse off
C o16_32k_sp $S --sparse on
C o16_32k_bs2k $S --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C o16_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
LSERVE_CUDA_OUT16=0 C f32_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C o16_4k_q4k --dtype q4_k --contexts 4k --repeats 2 --prefill 4096 --sparse off
LSERVE_CUDA_OUT16=0 C f32_4k_q4k --dtype q4_k --contexts 4k --repeats 2 --prefill 4096 --sparse off
if left; then
  t0=$(date +%s)
  timeout 150 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 40 --launch-count 1 \
    --set full --import-source no -f -o /root/pws $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k \
    --repeats 1 --prefill 16384 --sparse off > $OUT/ncu_run_ws.txt 2>&1
  echo "== ncu ws rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  ncu --import /root/pws.ncu-rep --page details --print-details all > $OUT/ncu_details_ws.txt 2>&1
  ncu --import /root/pws.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_ws.txt 2>&1
  gzip -k $OUT/ncu_sass_ws.txt
  grep -E "Duration|Pipe Tensor|Issue Slots Busy|No Eligible|Active Warps Per|Warp Cycles Per Issued" $OUT/ncu_details_ws.txt | head -8 | tee -a $L
fi
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
