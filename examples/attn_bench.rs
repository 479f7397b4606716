// Temporary microbenchmark of the wgpu attention ops (deleted after use).
use std::time::Instant;

use lserve::backend::wgpu::WgpuBackend;
use lserve::backend::*;

fn fill(be: &WgpuBackend, n: usize, seed: u32) -> <WgpuBackend as Backend>::Buffer {
    let mut b = be.alloc(DType::F32, n).unwrap();
    let p = FillRandomParams { n: n as u32, seed, scale: 1.0, offset: 0.0, ..Default::default() };
    be.fill_random(&p, &mut b).unwrap();
    b
}

fn time(be: &WgpuBackend, iters: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    be.sync().unwrap();
    let t0 = Instant::now();
    for _ in 0..iters {
        f();
    }
    let rec = t0.elapsed().as_secs_f64();
    be.sync().unwrap();
    let tot = t0.elapsed().as_secs_f64();
    (tot / iters as f64 * 1e6, rec / iters as f64 * 1e6)
}

fn main() {
    let small = std::env::args().any(|a| a == "small");
    let be = WgpuBackend::new(None).unwrap();
    println!("{}", be.caps().device);
    let (nh, nkv, hd, ps) = (32usize, 8usize, 128usize, 16usize);
    // Prefill: one sequence of n tokens, retrieval or streaming heads.
    for (n, streaming) in [(if small { 64usize } else { 4096 }, false), (if small { 64 } else { 4096 }, true)] {
        let pages = n.div_ceil(ps);
        let ring = (64 + 1024 + n).div_ceil(ps) * ps;
        let (n_ret, n_str) = if streaming { (0, nkv) } else { (nkv, 0) };
        let rlen = (pages * n_ret * ps * hd).max(1);
        let slen = ((ring / ps) * n_str * ps * hd).max(1);
        let (k, v, sk, sv) = (fill(&be, rlen, 1), fill(&be, rlen, 2), fill(&be, slen, 3), fill(&be, slen, 4));
        let hm: Vec<u32> = (0..nkv as u32).map(|i| if streaming { STREAMING_BIT | i } else { i }).collect();
        let head_map = be.upload_u32(&hm).unwrap();
        let pi = be.upload_u32(&[0, pages as u32]).unwrap();
        let pt = be.upload_u32(&(0..pages as u32).collect::<Vec<_>>()).unwrap();
        let kl = be.upload_u32(&[n as u32]).unwrap();
        let rt = be.upload_u32(&(0..(ring / ps) as u32).collect::<Vec<_>>()).unwrap();
        let qi = be.upload_u32(&[0, n as u32]).unwrap();
        let q = fill(&be, n * nh * hd, 5);
        let mut out = be.alloc(DType::F32, n * nh * hd).unwrap();
        let p = AttentionParams {
            num_seqs: 1,
            n_tokens: n as u32,
            n_heads: nh as u32,
            n_kv_heads: nkv as u32,
            head_dim: hd as u32,
            page_size: ps as u32,
            num_pages: pages as u32,
            scale: 0.088,
            sink: 64,
            local: 1024,
            ring_tokens: ring as u32,
            n_ret: n_ret as u32,
            n_str: n_str as u32,
            num_str_pages: (ring / ps) as u32,
            ..Default::default()
        };
        let (t, r) = time(&be, if small { 2 } else { 10 }, || {
            let kv = LayerKv { k: &k, v: &v, summary: &k, sk: &sk, sv: &sv, head_map: &head_map };
            let m = PagedMeta { page_indptr: &pi, page_table: &pt, kv_len: &kl, ring_table: &rt };
            be.prefill_attention(&p, &q, &qi, kv, &m, &mut out).unwrap();
        });
        let keys = if streaming { (n * (64 + 1024)) as f64 } else { (n * n) as f64 / 2.0 };
        let tflops = 4.0 * keys * (hd * nh) as f64 / (t * 1e-6) / 1e12;
        println!("prefill n {n} streaming {streaming}: {t:.0} us ({r:.0} us recording), {tflops:.2} TFLOP/s");
    }
    // Decode: ns sequences of ctx tokens, dense (tail 0) or sparse (64 selected + 4 tail pages).
    for (ns, ctx) in if small { vec![(1, 300), (2, 100)] } else { vec![(1, 32768), (1, 4096), (8, 16384), (32, 2048)] }
    {
        let per = ctx / ps;
        let pages = ns * per;
        let rlen = pages * nkv * ps * hd;
        let (k, v) = (fill(&be, rlen, 1), fill(&be, rlen, 2));
        let sk = fill(&be, 1, 3);
        let head_map = be.upload_u32(&(0..nkv as u32).collect::<Vec<_>>()).unwrap();
        let pi = be.upload_u32(&(0..=ns as u32).map(|s| s * per as u32).collect::<Vec<_>>()).unwrap();
        let pt = be.upload_u32(&(0..pages as u32).collect::<Vec<_>>()).unwrap();
        let kl = be.upload_u32(&vec![ctx as u32; ns]).unwrap();
        let rt = be.upload_u32(&[0]).unwrap();
        let q = fill(&be, ns * nh * hd, 5);
        let mut out = be.alloc(DType::F32, ns * nh * hd).unwrap();
        let stride = 64usize;
        let sel: Vec<u32> =
            (0..ns * nkv).flat_map(|_| (0..stride as u32).map(|i| i * (per as u32 - 8) / stride as u32)).collect();
        let selected = be.upload_u32(&sel).unwrap();
        let counts = be.upload_u32(&vec![stride.min(per - 8) as u32; ns * nkv]).unwrap();
        let slots = be.upload_u32(&(0..ns as u32).collect::<Vec<_>>()).unwrap();
        let p = AttentionParams {
            num_seqs: ns as u32,
            n_tokens: ns as u32,
            n_heads: nh as u32,
            n_kv_heads: nkv as u32,
            head_dim: hd as u32,
            page_size: ps as u32,
            num_pages: pages as u32,
            scale: 0.088,
            n_ret: nkv as u32,
            sel_stride: stride as u32,
            ..Default::default()
        };
        for (name, tail) in [("dense", 0u32), ("sparse", per as u32 - 4)] {
            let tails = be.upload_u32(&vec![tail; ns]).unwrap();
            let (t, r) = time(&be, if small { 2 } else { 100 }, || {
                let kv = LayerKv { k: &k, v: &v, summary: &k, sk: &sk, sv: &sk, head_map: &head_map };
                let m = PagedMeta { page_indptr: &pi, page_table: &pt, kv_len: &kl, ring_table: &rt };
                let hp = HeadPages { selected: &selected, counts: &counts, seq_slot: &slots, tail_start: &tails };
                be.sparse_decode_attention(&p, &q, kv, &m, &hp, &mut out).unwrap();
            });
            let keys = if tail == 0 { ctx } else { (stride.min(per - 8) + 4) * ps };
            let gbs = (ns * keys * nkv * hd * 8) as f64 / (t * 1e-6) / 1e9;
            println!("decode {name} ns {ns} ctx {ctx}: {t:.1} us ({r:.1} us recording), {gbs:.0} GB/s of KV");
        }
    }
}
