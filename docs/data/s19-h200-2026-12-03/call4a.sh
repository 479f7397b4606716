#!/usr/bin/env bash
# Session 19, GPU call 4a: after the review (X8 only for packed matrices, k checked against the packing), the final
# code (the wide int8 GEMV removed). Parity of the five packed formats in every GEMV-mode backend
# and embed, int8 rows, the quantized e2e (eight formats); the first part of the default model
# (carried in three calls, the working tree and a call's carry sharing 64 MiB: call4b.sh brings the
# second part and the lserve / quant_weights binaries, call4c.sh the third and runs them) is kept in /root.
BINS=.gpu/s19c/bins.tgz LIMIT=${LIMIT:-300} # backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
cp .gpu/s19c/smol.part.00 /root/smol.part.00
F=()
for m in cuda cuda_mmv_inblock cuda_mmv_pre cuda_mmv_pre_loop cuda_mmv_reg cuda_mmv_reg_loop cuda_mmv_regf cuda_mmv_regf_loop; do
  for w in w_q4_0 w_q4_1 w_q5_0 w_q5_1 w_q8_0; do F+=("$m::matmul::$w"); done
done
P par 240 "${F[@]}" cuda::embed::w_q4_0 cuda::embed::w_q4_1 cuda::embed::w_q5_0 cuda::embed::w_q5_1 cuda::embed::w_q8_0 \
  cuda::matmul::w_int8 cuda_mmv_regf::matmul::w_int8
E e2e 150 $B/cuda_e2e
# Packing off: the GGML-block kernels at rows of whole super-blocks, and the e2e in that configuration.
LSERVE_CUDA_PACK=0 P unpacked 150 cuda::matmul::w_q4_0 cuda::matmul::w_q4_1 cuda::matmul::w_q5_0 cuda::matmul::w_q5_1 \
  cuda::matmul::w_q8_0 cuda::embed::w_q8_0 cuda_mmv_pre::matmul::w_q8_0 cuda_mmv_regf::matmul::w_q4_1
LSERVE_CUDA_PACK=0 E e2e_unpacked 150 $B/cuda_e2e quantized
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
