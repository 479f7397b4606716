//! The instantiation macros of tests/backend_parity.rs: `parity_tests!(name, constructor)` makes
//! one module of tests per backend with one test per op name, and `axes!` the per-axis tests
//! (KV / weight dtype, head_dim) of the ops that have axes.

/// Tests of one op over axis values, in a module named as the op: `kv_<dtype>_hd<d>` (KV dtype x
/// head_dim), `kv_<dtype>` or `w_<dtype>` (weight dtype), each one calling
/// `super::super::test_<op>(backend, axes..)` under the backend module's lock.
macro_rules! axes {
    (kv_hd $f:ident: $($d:ident $hd:literal => $test:ident),+) => {$(
        #[test]
        fn $test() {
            let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            super::backend().map(|b| super::super::$f(&b, lserve::backend::DType::$d, $hd));
        }
    )+};
    (ggml $f:ident: $($d:ident => $test:ident),+) => {$(
        #[test]
        fn $test() {
            let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            let dtype = lserve::backend::DType::Ggml(lserve::backend::GgmlType::$d);
            super::backend().map(|b| super::super::$f(&b, dtype));
        }
    )+};
    (dtype $f:ident: $($d:ident => $test:ident),+) => {$(
        #[test]
        fn $test() {
            let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            super::backend().map(|b| super::super::$f(&b, lserve::backend::DType::$d));
        }
    )+};
}

/// One module of tests per backend: `$name::<op>` for ops without axes, `$name::<op>::<axes>` for
/// the others, one name per op (the trait method).
macro_rules! parity_tests {
    ($name:ident, $ctor:expr) => {
        mod $name {
            /// One test of this backend at a time: each test opens its own device, and several
            /// devices created at once in one process are a suspect of the intermittent stall
            /// seen on the NVIDIA Vulkan driver (docs/benchmarks.md).
            static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

            fn backend() -> Option<impl lserve::backend::Backend> {
                $ctor
            }
            #[test]
            fn rmsnorm() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_rmsnorm(&b));
            }
            #[test]
            fn add_rmsnorm() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_add_rmsnorm(&b));
            }
            #[test]
            fn add() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_add(&b));
            }
            #[test]
            fn matmul_silu_mul() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_matmul_silu_mul(&b));
            }
            #[test]
            fn silu_mul() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_silu_mul(&b));
            }
            #[test]
            fn gelu_tanh_mul() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_gelu_tanh_mul(&b));
            }
            #[test]
            fn head_rmsnorm() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_head_rmsnorm(&b));
            }
            #[test]
            fn scale() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_scale(&b));
            }
            #[test]
            fn gather_rows() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_gather_rows(&b));
            }
            #[test]
            fn mean_rows() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_mean_rows(&b));
            }
            #[test]
            fn argmax() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_argmax(&b));
            }
            #[test]
            fn sample() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_sample(&b));
            }
            #[test]
            fn fill_random() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_fill_random(&b));
            }
            #[test]
            fn write_at() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_write_at(&b));
            }
            mod embed {
                axes!(dtype test_embed: F32 => w_f32, F16 => w_f16, BF16 => w_bf16, I8Row => w_int8, F8Row => w_fp8);
                axes!(ggml test_embed: Q4_0 => w_q4_0, Q4_1 => w_q4_1, Q5_0 => w_q5_0, Q5_1 => w_q5_1, Q8_0 => w_q8_0, Q4_K => w_q4_k, Q5_K => w_q5_k, Q6_K => w_q6_k);
            }
            mod matmul {
                axes!(dtype test_matmul: F32 => w_f32, F16 => w_f16, BF16 => w_bf16, I8Row => w_int8, F8Row => w_fp8);
                axes!(ggml test_matmul: Q4_0 => w_q4_0, Q4_1 => w_q4_1, Q5_0 => w_q5_0, Q5_1 => w_q5_1, Q8_0 => w_q8_0, Q4_K => w_q4_k, Q5_K => w_q5_k, Q6_K => w_q6_k);
            }
            mod rope_append_kv {
                axes!(dtype test_rope_append_kv: F32 => kv_f32, F16 => kv_f16, BF16 => kv_bf16, I8 => kv_int8, F8E4M3 => kv_fp8);
            }
            mod matmul_rope_append_kv {
                axes!(dtype test_matmul_rope_append_kv: F32 => kv_f32, F16 => kv_f16, BF16 => kv_bf16);
            }
            mod lambda_mass {
                axes!(dtype test_lambda_mass: F32 => kv_f32, F16 => kv_f16, BF16 => kv_bf16, I8 => kv_int8, F8E4M3 => kv_fp8);
            }
            /// KV swap out and in (download_raw / write_raw_at) of a sequence.
            mod swap_round_trip {
                axes!(dtype test_swap_round_trip: F32 => kv_f32, F16 => kv_f16, BF16 => kv_bf16, I8 => kv_int8, F8E4M3 => kv_fp8);
            }
            /// head_dim 16: short chained chunks; 64, 72 (8-bit KV: 80), 128, 256: a ragged batch.
            mod prefill_attention {
                axes!(kv_hd test_prefill_attention: F32 16 => kv_f32_hd16, F32 72 => kv_f32_hd72, F32 128 => kv_f32_hd128, F32 256 => kv_f32_hd256, F16 16 => kv_f16_hd16, F16 64 => kv_f16_hd64, F16 72 => kv_f16_hd72, F16 128 => kv_f16_hd128, F16 256 => kv_f16_hd256, BF16 16 => kv_bf16_hd16, BF16 64 => kv_bf16_hd64, BF16 72 => kv_bf16_hd72, BF16 128 => kv_bf16_hd128, BF16 256 => kv_bf16_hd256, I8 16 => kv_int8_hd16, I8 64 => kv_int8_hd64, I8 80 => kv_int8_hd80, I8 128 => kv_int8_hd128, I8 256 => kv_int8_hd256, F8E4M3 16 => kv_fp8_hd16, F8E4M3 64 => kv_fp8_hd64, F8E4M3 80 => kv_fp8_hd80, F8E4M3 128 => kv_fp8_hd128, F8E4M3 256 => kv_fp8_hd256);
            }
            mod sparse_decode_attention {
                axes!(kv_hd test_sparse_decode_attention: F32 16 => kv_f32_hd16, F32 72 => kv_f32_hd72, F32 128 => kv_f32_hd128, F16 16 => kv_f16_hd16, F16 72 => kv_f16_hd72, F16 128 => kv_f16_hd128, BF16 16 => kv_bf16_hd16, BF16 72 => kv_bf16_hd72, BF16 128 => kv_bf16_hd128, F16 256 => kv_f16_hd256, I8 16 => kv_int8_hd16, I8 64 => kv_int8_hd64, I8 128 => kv_int8_hd128, F8E4M3 16 => kv_fp8_hd16, F8E4M3 64 => kv_fp8_hd64, F8E4M3 128 => kv_fp8_hd128);
            }
            /// head_dim 64 (a GQA group of 8), 72 (zero-padded dims), 128, 256 for the KV dtypes.
            mod antidiagonal_score {
                axes!(kv_hd test_antidiagonal_score: F32 64 => kv_f32_hd64, F32 72 => kv_f32_hd72, F32 128 => kv_f32_hd128, F16 64 => kv_f16_hd64, F16 128 => kv_f16_hd128, F16 256 => kv_f16_hd256, BF16 72 => kv_bf16_hd72, BF16 128 => kv_bf16_hd128, BF16 256 => kv_bf16_hd256, I8 64 => kv_int8_hd64, I8 128 => kv_int8_hd128, F8E4M3 128 => kv_fp8_hd128, F8E4M3 256 => kv_fp8_hd256);
                /// GQA groups of 1-6 at head_dim 64, 128 and 256.
                #[test]
                fn groups() {
                    let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                    super::backend().map(|b| super::super::test_antidiagonal_score_groups(&b));
                }
                /// One sequence's 18 blocks with a GQA group of 8 (two chunks of CUDA's GEMM path).
                #[test]
                fn chunks() {
                    let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                    super::backend().map(|b| super::super::test_antidiagonal_score_chunks(&b));
                }
            }
            #[test]
            fn page_top_k() {
                let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                backend().map(|b| super::test_page_top_k(&b));
            }
            mod page_select {
                axes!(kv_hd test_page_select: F32 16 => kv_f32_hd16, F32 72 => kv_f32_hd72, F32 128 => kv_f32_hd128, F16 16 => kv_f16_hd16, F16 72 => kv_f16_hd72, F16 128 => kv_f16_hd128, BF16 16 => kv_bf16_hd16, BF16 72 => kv_bf16_hd72, BF16 128 => kv_bf16_hd128, F16 256 => kv_f16_hd256, I8 16 => kv_int8_hd16, I8 64 => kv_int8_hd64, I8 128 => kv_int8_hd128, F8E4M3 16 => kv_fp8_hd16, F8E4M3 64 => kv_fp8_hd64, F8E4M3 128 => kv_fp8_hd128);
                /// page_select at scale (f32 summaries; independent of the KV dtype).
                #[test]
                fn many() {
                    let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                    super::backend().map(|b| super::super::test_page_select_many(&b));
                }
                /// Block-sparse prefill's virtual rows, which share their page lists.
                #[test]
                fn rows() {
                    let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                    super::backend().map(|b| super::super::test_page_select_rows(&b));
                }
                /// Both rankings (max, head_norm), with and without the pinned sink page.
                #[test]
                fn ranks() {
                    let _one = super::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                    super::backend().map(|b| super::super::test_page_select_ranks(&b));
                }
            }
        }
    };
}

/// A module `$name` of tests for a backend built to take another variant of some ops' kernels:
/// the backend from `$ctor`, one test at a time, and the op modules in `$body` (`axes!` lists).
macro_rules! variant_tests {
    ($name:ident, $ctor:expr, $($body:tt)*) => {
        mod $name {
            static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

            fn backend() -> Option<impl lserve::backend::Backend> {
                $ctor
            }
            $($body)*
        }
    };
}

/// The matmul tests of the quantized formats with integer codes (not fp8) alone, for a backend
/// built to take another variant of their kernels (CUDA: `MmvMode`, tests/backend_parity.rs):
/// `$name::matmul::w_<dtype>`.
macro_rules! matmul_quant_tests {
    ($name:ident, $ctor:expr) => {
        variant_tests!($name, $ctor, mod matmul {
            axes!(dtype test_matmul: I8Row => w_int8);
            axes!(ggml test_matmul: Q4_0 => w_q4_0, Q4_1 => w_q4_1, Q5_0 => w_q5_0, Q5_1 => w_q5_1, Q8_0 => w_q8_0, Q4_K => w_q4_k, Q5_K => w_q5_k, Q6_K => w_q6_k);
        });
    };
}

/// The prefill-attention tests at head_dim 128 with 16-bit KV alone, for a backend built to take
/// another of the kernels that serve them (CUDA on sm_90: `HopperPrefill`, tests/backend_parity.rs):
/// `$name::prefill_attention::kv_<dtype>_hd128`.
macro_rules! prefill_attention_tests {
    ($name:ident, $ctor:expr) => {
        variant_tests!($name, $ctor, mod prefill_attention {
            axes!(kv_hd test_prefill_attention: F16 128 => kv_f16_hd128, BF16 128 => kv_bf16_hd128);
        });
    };
}
