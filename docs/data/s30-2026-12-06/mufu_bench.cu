// Session 30: throughput of ex2.approx.f32 against ex2.approx.f16x2 / bf16x2 on the GPU (is a
// packed exp two exponentials per MUFU slot?). Each thread runs 8 independent chains.
#include <cstdio>
#include <cuda_fp16.h>
__global__ void f32k(float* out, int n) {
  float v[8];
  for (int i = 0; i < 8; i++) v[i] = -0.001f * (threadIdx.x + i);
  for (int it = 0; it < n; it++)
#pragma unroll
    for (int i = 0; i < 8; i++) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[i]));
  float s = 0; for (int i = 0; i < 8; i++) s += v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
__global__ void f16k(float* out, int n) {
  unsigned v[8];
  for (int i = 0; i < 8; i++) { __half2 h = __floats2half2_rn(-0.001f * (threadIdx.x + i), -0.002f); v[i] = *(unsigned*)&h; }
  for (int it = 0; it < n; it++)
#pragma unroll
    for (int i = 0; i < 8; i++) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(v[i]));
  float s = 0; for (int i = 0; i < 8; i++) { __half2 h = *(__half2*)&v[i]; s += __low2float(h) + __high2float(h); }
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
__global__ void bf16k(float* out, int n) {
  unsigned v[8];
  for (int i = 0; i < 8; i++) v[i] = 0xbc00bc00u + i;
  for (int it = 0; it < n; it++)
#pragma unroll
    for (int i = 0; i < 8; i++) asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(v[i]));
  float s = 0; for (int i = 0; i < 8; i++) s += __uint_as_float(v[i] << 16) + __uint_as_float(v[i] & 0xffff0000u);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
int main() {
  float* o; cudaMalloc(&o, 132 * 8 * 1024 * 4);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const int n = 4096, blocks = sms * 4, threads = 512;
  for (int k = 0; k < 3; k++) {
    for (int rep = 0; rep < 2; rep++) {
      cudaEventRecord(a);
      if (k == 0) f32k<<<blocks, threads>>>(o, n); else if (k == 1) f16k<<<blocks, threads>>>(o, n); else bf16k<<<blocks, threads>>>(o, n);
      cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b);
      double insts = (double)blocks * threads * n * 8;  // ex2 instructions (thread level)
      double exps = insts * (k == 0 ? 1 : 2);
      printf("%s rep %d: %.3f ms, %.1f G ex2 instr/s, %.1f G exps/s, %.2f exps/clk/SM (clock %d MHz)\n",
             k == 0 ? "f32  " : k == 1 ? "f16x2" : "bf16x2", rep, ms, insts / ms / 1e6, exps / ms / 1e6,
             exps / (ms * 1e-3) / (clk * 1e3) / sms, clk / 1000);
    }
  }
  cudaError_t e = cudaGetLastError(); printf("err %s\n", cudaGetErrorString(e));
  return 0;
}
