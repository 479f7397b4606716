//! What one wgpu dispatch costs the host and the GPU: records N `add_rmsnorm` dispatches
//! (1 row of 4096 floats: almost no GPU work) and N 4096 x 4096 f16 GEMVs, and prints the host
//! time spent recording (bind groups, parameter writes, the submission every 64 dispatches) and
//! the time until the GPU has finished, per dispatch. When recording costs as much as the GPU's
//! work per dispatch, a decode step is host-bound.
//! `cargo run --release --example wgpu_dispatch_cost -- [N]`

use lserve::backend::wgpu::WgpuBackend;
use lserve::backend::*;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2048);
    if let Err(e) = run(n) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

fn run(n: usize) -> lserve::error::Result<()> {
    let be = WgpuBackend::new(None)?;
    let dim = 4096usize;
    let mut residual = be.upload_f32(DType::F32, vec![0.5; dim])?;
    let x = be.upload_f32(DType::F32, vec![0.25; dim])?;
    let w = be.upload_f32(DType::F32, vec![1.0; dim])?;
    let mut out = be.alloc(DType::F32, dim)?;
    let p = RmsnormParams { rows: 1, dim: dim as u32, eps: 1e-5, _pad: 0 };
    let wm = be.upload_f32(DType::F16, vec![0.001; dim * dim])?;
    let mut y = be.alloc(DType::F32, dim)?;
    let mp = MatmulParams::new(1, dim, dim, false);
    for round in 0..3 {
        be.sync()?;
        let t0 = Instant::now();
        for _ in 0..n {
            be.add_rmsnorm(&p, &mut residual, &x, &w, &mut out)?;
        }
        let rec = t0.elapsed();
        be.sync()?;
        let all = t0.elapsed();
        let t1 = Instant::now();
        for _ in 0..n / 8 {
            be.matmul(&mp, &out, &wm, None, &mut y)?;
        }
        let rec_m = t1.elapsed();
        be.sync()?;
        let all_m = t1.elapsed();
        let us = |d: std::time::Duration, k: usize| d.as_secs_f64() * 1e6 / k as f64;
        println!(
            "round {round}: add_rmsnorm x{n}: record {:.2} us, done {:.2} us a dispatch; gemv 4096x4096 f16 x{}: record {:.2} us, done {:.2} us a dispatch",
            us(rec, n),
            us(all, n),
            n / 8,
            us(rec_m, n / 8),
            us(all_m, n / 8)
        );
    }
    Ok(())
}
