//! Launches of block-sparse prefill's estimate ops: `antidiagonal_score`
//! (cuda/antidiagonal_score.cu: a CTA per (KV head, query block), 16 warps of mma.sync tiles)
//! and `page_top_k` (cuda/page_select.cu: page_select's radix top-k over a score table's rows).
//! The kernel headers give layouts and block mappings.
//!
//! Invariants: block metadata, page tables and score rows live on the device and are
//! bounds-checked by the kernels (a block whose rows, pages or score row fall outside the buffers
//! is skipped); the host checks shapes and buffer types.

use super::bindings::{self as kern, Scratch, entry};
use super::context::{Launch, err};
use super::graph::{GemmBatch, GemmRec};
use super::ops_kv::{SELECT_THREADS, select_keys_in_smem};
use super::{CudaBackend, CudaBuffer, need, need_kv};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// (entry variant, D, keys per tile, warps per head, heads per CTA) for head_dim `hd` (the
/// kernel's constants: IPW = 256 / D, WPH = 8 / IPW, HG = 16 / WPH).
fn antidiagonal_shape(hd: usize) -> Result<(usize, usize, usize, usize, usize)> {
    let (variant, d) = match hd {
        1..=64 => (0, 64),
        65..=128 => (1, 128),
        129..=256 => (2, 256),
        _ => return Err(err(format!("antidiagonal_score: head_dim {hd} is above 256"))),
    };
    let wph = 8 / (256 / d);
    Ok((variant, d, if d <= 128 { 128 } else { 64 }, wph, 16 / wph))
}

pub fn antidiagonal_score(
    be: &CudaBackend,
    p: &AntidiagonalParams,
    q: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    blocks: &BlockRows<CudaBackend>,
    scores: &mut CudaBuffer,
) -> Result<()> {
    let (nb, ns, nh, nkv, hd, ps) =
        (u(p.n_blocks), u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    p.check().map_err(err)?;
    let (variant, d, tk, wph, hg) = antidiagonal_shape(hd)?;
    need(q, DType::F32, u(p.n_tokens) * nh * hd, "antidiagonal_score q")?;
    need_kv(kv.k, u(p.num_pages) * u(p.n_ret) * ps, hd, "antidiagonal_score k pool")?;
    need(kv.head_map, DType::U32, nkv, "antidiagonal_score head_map")?;
    need(meta.page_indptr, DType::U32, ns + 1, "antidiagonal_score page_indptr")?;
    need(meta.page_table, DType::U32, 0, "antidiagonal_score page_table")?;
    need(meta.kv_len, DType::U32, ns, "antidiagonal_score kv_len")?;
    need(blocks.info, DType::U32, nb * 4, "antidiagonal_score blocks")?;
    need(blocks.page_indptr, DType::U32, nb + 1, "antidiagonal_score block page_indptr")?;
    need(scores, DType::F32, 0, "antidiagonal_score scores")?;
    if nb == 0 || p.n_ret == 0 {
        return Ok(());
    }
    if be.ad_gemm()
        && let Some((info, indptr)) = blocks.host
        && let Some(plan) = ad_plan((info, indptr), nb, (nh / nkv, u(p.n_ret), hd), AD_LIMITS)
    {
        return antidiagonal_gemm(be, p, q, kv, meta, blocks, scores, &plan);
    }
    let name = entry(kern::antidiagonal_score::ENTRIES, kv.k.dtype, variant, 3)?;
    let heads = (nh / nkv).min(hg);
    let nkg = tk / ANTIDIAGONAL_STRIDE;
    // Key tiles [2][tk][d + 8] (16-bit), the partial sums [hg][wph][16][nkg], pz [hg * 16][nkg]
    // and csum [nkg] (f32): the kernel's layout.
    let smem = 2 * tk * (d + 8) * 2 + (hg * wph * 16 * nkg + hg * 16 * nkg + nkg) * 4;
    let l = Launch::new((nkv as u32, nb as u32, 1), (heads * wph * 32) as u32).smem(smem);
    let args = kern::antidiagonal_score::Args {
        q,
        k: kv.k,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        info: blocks.info,
        v_indptr: blocks.page_indptr,
        page_table_len: meta.page_table.len as u32,
        scores_len: scores.len as u32,
        scores,
    };
    kern::antidiagonal_score::launch_variant(be.gpu(), name, l, p, args)
}

/// Bounds of the GEMM path's scratch and chunks ([`ad_plan`]).
#[derive(Clone, Copy, Debug)]
struct AdLimits {
    /// z rows of one retrieval head in a chunk (GEMM m; blocks * group * 16).
    rows: usize,
    /// Bytes of z for a chunk (all retrieval heads, f32).
    z_bytes: usize,
    /// Bytes of the packed keys (all retrieval heads, 16-bit).
    k_bytes: usize,
}

const AD_LIMITS: AdLimits = AdLimits { rows: 2048, z_bytes: 256 << 20, k_bytes: 512 << 20 };

/// The GEMM path of a step: the sequence every block with candidates belongs to, the positions
/// of keys to pack (8 x the most key groups a block scores), and chunks of blocks `(b0, b1, ldz)`
/// covering every block with candidates, each with its z row length `ldz` (a multiple of 4, at
/// least each of its blocks' key groups).
#[derive(Debug, PartialEq, Eq)]
struct AdPlan {
    seq: u32,
    n_pos: usize,
    chunks: Vec<(usize, usize, usize)>,
}

/// [`AdPlan`] from the host copies of a step's blocks, or `None` where the fused kernel serves
/// (blocks with candidates in several sequences, none at all, or scratch past `lim`). A block's
/// key groups: `(first + 8 (rows / 8 - 1)) / 8`, the fused kernel's bound before the sequence's
/// length and page table cap it (so never below what the kernels read).
fn ad_plan(
    (info, indptr): (&[u32], &[u32]),
    nb: usize,
    (group, n_ret, hd): (usize, usize, usize),
    lim: AdLimits,
) -> Option<AdPlan> {
    if info.len() < 4 * nb || indptr.len() < nb + 1 || group == 0 {
        return None;
    }
    let with = |b: usize| indptr[b + 1] >= indptr[b].saturating_add(2);
    let kg = |b: usize| {
        let (rows, first) = (u(info[4 * b + 1]), u(info[4 * b + 2]));
        if with(b) && rows >= 8 { (first + 8 * (rows / 8 - 1)) / 8 } else { 0 }
    };
    let lo = (0..nb).find(|&b| with(b))?;
    let hi = (0..nb).rev().find(|&b| with(b))? + 1;
    let seq = info[4 * lo + 3];
    if (lo..hi).any(|b| with(b) && info[4 * b + 3] != seq) {
        return None;
    }
    let rows_per = group * 16;
    let z_bytes = |blocks: usize, ldz: usize| n_ret * blocks * rows_per * ldz * 4;
    let mut chunks = vec![];
    let (mut b0, mut ldz) = (lo, 4usize);
    for b in lo..hi {
        let want = ldz.max(kg(b).next_multiple_of(4));
        let blocks = b + 1 - b0;
        if blocks > 1 && (blocks * rows_per > lim.rows || z_bytes(blocks, want) > lim.z_bytes) {
            chunks.push((b0, b, ldz));
            (b0, ldz) = (b, kg(b).next_multiple_of(4).max(4));
        } else {
            ldz = want;
        }
        if z_bytes(1, ldz) > lim.z_bytes {
            return None;
        }
    }
    chunks.push((b0, hi, ldz));
    let n_pos = 8 * chunks.iter().map(|c| c.2).max()?;
    // antidiagonal_pack_k's grid: 64 positions a CTA, at most 65,535 CTAs.
    let fits = n_ret * n_pos * hd * 2 <= lim.k_bytes && n_pos.div_ceil(64) <= 65535;
    fits.then_some(AdPlan { seq, n_pos, chunks })
}

/// `antidiagonal_score` by cuBLAS (cuda/antidiagonal_score_gemm.cu): keys packed once, then per
/// chunk q packed, one batched GEMM over the retrieval heads into z, and the page sums.
#[allow(clippy::too_many_arguments)]
fn antidiagonal_gemm(
    be: &CudaBackend,
    p: &AntidiagonalParams,
    q: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    blocks: &BlockRows<CudaBackend>,
    scores: &mut CudaBuffer,
    plan: &AdPlan,
) -> Result<()> {
    let (nkv, hd, nret) = (u(p.n_kv_heads), u(p.head_dim), u(p.n_ret));
    let group = u(p.n_heads) / nkv;
    let (kd, rows_per) = (8 * hd, group * 16);
    let bf16 = kv.k.dtype != DType::F16;
    let g = be.gpu();
    let ks = g.scratch("antidiagonal_ks", nret * plan.n_pos * hd * 2)?;
    let most = plan.chunks.iter().map(|c| (c.1 - c.0) * rows_per).max().unwrap_or(0);
    let qs = g.scratch("antidiagonal_qs", (nret * most * kd * 2).max(1))?;
    let zmost = plan.chunks.iter().map(|c| (c.1 - c.0) * rows_per * c.2).max().unwrap_or(0);
    let z = g.scratch("antidiagonal_z", (nret * zmost * 4).max(1))?;
    let ptl = meta.page_table.len as u32;
    let kl = Launch::new((nkv as u32, plan.n_pos.div_ceil(64) as u32, 1), 256);
    let ka = kern::antidiagonal_pack_k::Args {
        k: kv.k,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        ks: Scratch(ks),
        seq: plan.seq,
        n_pos: plan.n_pos as u32,
        page_table_len: ptl,
    };
    let kname = entry(kern::antidiagonal_pack_k::ENTRIES, kv.k.dtype, 0, 1)?;
    kern::antidiagonal_pack_k::launch_variant(g, kname, kl, p, ka)?;
    let qname = kern::antidiagonal_pack_q::ENTRIES[usize::from(bf16)];
    let stats = g.scratch("antidiagonal_stats", (nret * most * 2 * 4).max(1))?;
    // antidiagonal_block_sums: whole pages of at most 256 key groups a CTA (or one page); shared
    // memory: the row stats, 16 row-group limits and the key-group sums.
    let cpp = u(p.page_size) / 8;
    let ppc = (256 / cpp).max(1);
    let smem = (2 * rows_per + 16 + 256.max(cpp)) * 4;
    for &(b0, b1, ldz) in &plan.chunks {
        let nbc = b1 - b0;
        let ql = Launch::new((nkv as u32, nbc as u32, group as u32), 256);
        let qa = kern::antidiagonal_pack_q::Args {
            q,
            head_map: kv.head_map,
            info: blocks.info,
            qs: Scratch(qs),
            b0: b0 as u32,
            nbc: nbc as u32,
        };
        kern::antidiagonal_pack_q::launch_variant(g, qname, ql, p, qa)?;
        let m = nbc * rows_per;
        let batch =
            GemmBatch { count: nret as i32, w: (plan.n_pos * hd) as i64, x: (m * kd) as i64, out: (m * ldz) as i64 };
        let rec = GemmRec {
            m: m as i32,
            n: ldz as i32,
            k: kd as i32,
            bf16,
            out16: false,
            ldc: ldz as i32,
            w: ks,
            x: qs,
            out: z,
            acc: false,
            batch,
        };
        g.gemm16_as("antidiagonal_gemm", rec)?;
        // The two launches' arguments (one signature), each with its own borrow of scores.
        macro_rules! args {
            () => {
                kern::antidiagonal_sums::Args {
                    head_map: kv.head_map,
                    page_indptr: meta.page_indptr,
                    kv_len: meta.kv_len,
                    info: blocks.info,
                    v_indptr: blocks.page_indptr,
                    z: Scratch(z),
                    stats: Scratch(stats),
                    scores_len: scores.len as u32,
                    scores: &mut *scores,
                    b0: b0 as u32,
                    nbc: nbc as u32,
                    ldz: ldz as u32,
                    seq_one: plan.seq,
                    page_table_len: ptl,
                }
            };
        }
        let [row_stats, block_sums] = kern::antidiagonal_sums::ENTRIES else { unreachable!() };
        let rl = Launch::new((nkv as u32, nbc as u32, (rows_per / 8) as u32), 256);
        kern::antidiagonal_sums::launch_variant(g, row_stats, rl, p, args!())?;
        // Runs of whole candidate pages: every page with a key group below ldz is in one.
        let runs = (ldz / cpp + 1).div_ceil(ppc);
        let bl = Launch::new((nkv as u32, nbc as u32, runs as u32), 256).smem(smem);
        kern::antidiagonal_sums::launch_variant(g, block_sums, bl, p, args!())?;
    }
    Ok(())
}

pub fn page_top_k(
    be: &CudaBackend,
    p: &PageTopKParams,
    scores: &CudaBuffer,
    page_indptr: &CudaBuffer,
    seq_slot: &CudaBuffer,
    select_mask: &CudaBuffer,
    out: SelectedMut<CudaBackend>,
) -> Result<()> {
    let ns = u(p.num_seqs);
    if p.k_pages > p.sel_stride {
        return Err(err("page_top_k: k_pages > sel_stride"));
    }
    need(scores, DType::F32, 0, "page_top_k scores")?;
    need(page_indptr, DType::U32, ns + 1, "page_top_k page_indptr")?;
    need(seq_slot, DType::U32, ns, "page_top_k seq_slot")?;
    need(select_mask, DType::U32, ns, "page_top_k select_mask")?;
    need(out.selected, DType::U32, 0, "page_top_k selected")?;
    need(out.counts, DType::U32, 0, "page_top_k counts")?;
    if ns == 0 || p.n_ret == 0 {
        return Ok(());
    }
    // Keys per row: a power of two covering the longest row (the whole table when unknown).
    let longest = if p.max_seq_pages == 0 { scores.len / u(p.n_ret) } else { u(p.max_seq_pages) };
    let np = longest.next_power_of_two().max(32);
    let g = be.gpu();
    let (scores_len, selected_len, counts_len) = (scores.len as u32, out.selected.len as u32, out.counts.len as u32);
    let grid = (p.n_ret, ns as u32, 1);
    // The two sorts share every argument but the scratch keys (only the global one has them).
    macro_rules! top_k_args {
        ($binding:ident $(, $keys:ident)?) => {
            kern::$binding::Args {
                scores,
                page_indptr,
                seq_slot,
                select_mask,
                $(keys_io: $keys,)?
                selected: out.selected,
                counts: out.counts,
                np: np as u32,
                scores_len,
                selected_len,
                counts_len,
            }
        };
    }
    if select_keys_in_smem(g, np) {
        let l = Launch::new(grid, SELECT_THREADS).smem(np * 8);
        kern::page_top_k::launch(g, l, p, top_k_args!(page_top_k))
    } else {
        let keys = Scratch(g.scratch("page_top_k_keys", ns * u(p.n_ret) * np * 8)?);
        kern::page_top_k_global::launch(g, Launch::new(grid, SELECT_THREADS), p, top_k_args!(page_top_k_global, keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sequence's blocks of 128 rows from position `first0` (`[q_row, rows, first, seq]`), each
    /// with `first / 16` candidates (16-token pages), the first `dense` without.
    fn seq_blocks(n: usize, first0: u32, dense: usize) -> (Vec<u32>, Vec<u32>) {
        let (mut info, mut indptr) = (vec![], vec![0u32]);
        for b in 0..n as u32 {
            let first = first0 + 128 * b;
            info.extend([128 * b, 128, first, 0]);
            let e = if (b as usize) < dense { 0 } else { first / 16 + 1 };
            indptr.push(indptr.last().unwrap() + e);
        }
        (info, indptr)
    }

    #[test]
    fn ad_plan_chunks_cover_the_blocks_with_candidates_within_the_limits() {
        let lim = AD_LIMITS;
        // The 8B shape at 32K (8192-row steps, group 4, 4 retrieval heads): 64 blocks, the step
        // from position 24576: chunks of 32 blocks (2048 rows), each as wide as its last block.
        let (info, indptr) = seq_blocks(64, 24576, 0);
        let plan = ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), lim).unwrap();
        assert_eq!(plan.seq, 0);
        let kg = |b: usize| (24576 + 128 * b + 120) / 8;
        assert_eq!(plan.chunks, vec![(0, 32, kg(31).next_multiple_of(4)), (32, 64, kg(63).next_multiple_of(4))]);
        assert_eq!(plan.n_pos, 8 * kg(63).next_multiple_of(4));
        // Dense blocks before the first with candidates are left out.
        let (info, indptr) = seq_blocks(10, 0, 3);
        let plan = ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), lim).unwrap();
        assert_eq!(plan.chunks.first().unwrap().0, 3);
        assert_eq!(plan.chunks.last().unwrap().1, 10);
        // At 128K a chunk's z stays within the byte limit.
        let (info, indptr) = seq_blocks(64, 131072 - 8192, 0);
        let plan = ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), lim).unwrap();
        for &(b0, b1, ldz) in &plan.chunks {
            assert!(4 * (b1 - b0) * 64 * ldz * 4 <= lim.z_bytes && (b1 - b0) * 64 <= lim.rows, "{b0}..{b1} x {ldz}");
        }
        assert_eq!(plan.chunks.iter().map(|c| c.1 - c.0).sum::<usize>(), 64);
    }

    #[test]
    fn ad_plan_declines_what_the_fused_kernel_serves() {
        let lim = AD_LIMITS;
        // Blocks with candidates in two sequences.
        let (mut info, indptr) = seq_blocks(4, 1024, 0);
        info[4 * 3 + 3] = 1;
        assert!(ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), lim).is_none());
        // No block with candidates.
        let (info, indptr) = seq_blocks(4, 1024, 4);
        assert!(ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), lim).is_none());
        // One block's z alone past the limit, and keys past theirs.
        let (info, indptr) = seq_blocks(2, 1 << 22, 0);
        assert!(ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), lim).is_none());
        let (info, indptr) = seq_blocks(2, 1 << 20, 0);
        assert!(
            ad_plan((&info, &indptr), indptr.len() - 1, (4, 4, 128), AdLimits { k_bytes: 1 << 20, ..lim }).is_none()
        );
        // Malformed host copies.
        assert!(ad_plan((&[0; 3], &[0, 5]), 1, (4, 4, 128), lim).is_none());
        // Host copies shorter than the call's blocks.
        let (info, indptr) = seq_blocks(4, 1024, 0);
        assert!(ad_plan((&info, &indptr), 5, (4, 4, 128), lim).is_none());
        // Keys past pack_k's grid (64 positions a CTA, 65,535 CTAs).
        let (info, indptr) = seq_blocks(2, (1 << 22) + 4096, 0);
        let roomy = AdLimits { z_bytes: 1 << 40, k_bytes: 1 << 40, ..lim };
        assert!(ad_plan((&info, &indptr), 2, (1, 1, 64), roomy).is_none());
        let (info, indptr) = seq_blocks(2, 1 << 20, 0);
        assert!(ad_plan((&info, &indptr), 2, (1, 1, 64), roomy).is_some());
    }
}
