//! The ops Gemma 3 adds — `gelu_tanh_mul`, `head_rmsnorm`, `scale` — against the CPU reference,
//! instantiated per backend by `parity_tests!` in tests/backend_parity.rs. Each backend's output
//! is also checked against a float64 evaluation of the formula written here (so the CPU
//! instantiation tests the reference itself): a wrong constant in the tanh, a head normalized
//! over the wrong span, a weight row taken from the wrong head or a touched v segment fails.
//! Outputs are poisoned (NaN) first; inputs come from the harness's fresh printed seed.

use super::{TOL_ELEMENTWISE, TOL_REDUCTION, close, pair};
use lserve::backend::*;

fn gelu_tanh(g: f64) -> f64 {
    0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g.powi(3))).tanh())
}

pub fn test_gelu_tanh_mul<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    // Wide inputs reach the saturated tails of the tanh.
    let (rows, dim) = (5, 300);
    let gu_host = t.f32s(rows * 2 * dim, 4.0);
    let gu = t.up(DType::F32, &gu_host);
    let mut out = t.out(rows * dim);
    let p = GeluTanhMulParams { rows: rows as u32, dim: dim as u32, ..Default::default() };
    t.gpu.gelu_tanh_mul(&p, &gu.0, &mut out.0).unwrap();
    t.cpu.gelu_tanh_mul(&p, &gu.1, &mut out.1).unwrap();
    t.check("gelu_tanh_mul", &out, rows * dim, TOL_ELEMENTWISE);
    let want: Vec<f32> = (0..rows * dim)
        .map(|i| {
            let (r, c) = (i / dim, i % dim);
            (gelu_tanh(gu_host[r * 2 * dim + c] as f64) * gu_host[r * 2 * dim + dim + c] as f64) as f32
        })
        .collect();
    close("gelu_tanh_mul vs f64", &t.gpu.download_f32(&out.0, 0, rows * dim).unwrap(), &want, TOL_ELEMENTWISE);
}

pub fn test_head_rmsnorm<B: Backend>(gpu: &B) {
    // On fused qkv rows (plus one float, so rows are not 16-byte aligned): 4 q heads + 1 k head
    // normalized, the v head untouched. Head dims: Gemma 3's 256; 100 (a partial wgpu chunk);
    // 9000 (wider than the 8192 wgpu holds in registers: its loop).
    for (rows, hd) in [(3, 256), (2, 100), (2, 9000)] {
        head_rmsnorm_case(gpu, rows, 5, hd, 6 * hd + 1);
    }
}

fn head_rmsnorm_case<B: Backend>(gpu: &B, rows: usize, nh: usize, hd: usize, stride: usize) {
    let mut t = pair(gpu);
    let x_host = t.f32s(rows * stride, 2.0);
    let w_host = t.f32s(nh * hd, 1.0);
    let mut x = t.up(DType::F32, &x_host);
    let w = t.up(DType::F32, &w_host);
    let p = HeadRmsnormParams {
        rows: rows as u32,
        n_heads: nh as u32,
        head_dim: hd as u32,
        row_stride: stride as u32,
        eps: 1e-6,
        ..Default::default()
    };
    t.gpu.head_rmsnorm(&p, &mut x.0, &w.0).unwrap();
    t.cpu.head_rmsnorm(&p, &mut x.1, &w.1).unwrap();
    t.check("head_rmsnorm", &x, rows * stride, TOL_REDUCTION);
    let mut want = x_host.clone();
    for r in 0..rows {
        for h in 0..nh {
            let seg = &x_host[r * stride + h * hd..r * stride + (h + 1) * hd];
            let ms = seg.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / hd as f64;
            for c in 0..hd {
                want[r * stride + h * hd + c] = (seg[c] as f64 / (ms + 1e-6).sqrt() * w_host[h * hd + c] as f64) as f32;
            }
        }
    }
    close("head_rmsnorm vs f64", &t.gpu.download_f32(&x.0, 0, rows * stride).unwrap(), &want, TOL_REDUCTION);
    let bad = HeadRmsnormParams { row_stride: (nh * hd - 1) as u32, ..p };
    assert!(t.gpu.head_rmsnorm(&bad, &mut x.0, &w.0).is_err(), "heads wider than the row are refused");
}

pub fn test_scale<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let n = 1001;
    let a_host = t.f32s(n, 1.0);
    let mut a = t.up(DType::F32, &a_host);
    let p = ScaleParams { n: n as u32, scale: 25.298_222, ..Default::default() };
    t.gpu.scale(&p, &mut a.0).unwrap();
    t.cpu.scale(&p, &mut a.1).unwrap();
    t.check("scale", &a, n, TOL_ELEMENTWISE);
    let want: Vec<f32> = a_host.iter().map(|&v| v * 25.298_222).collect();
    close("scale vs host", &t.gpu.download_f32(&a.0, 0, n).unwrap(), &want, TOL_ELEMENTWISE);
}
