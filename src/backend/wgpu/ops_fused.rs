//! Recording of the batch-1 GEMVs with an op in their epilogue (Backend; the CPU reference of
//! each is its default, the two ops). Each writes what the two ops write, bit for bit: the same
//! GEMV row sums (shaders/gemv_x8_row.wgsl) and the same text for the op. A layer saves the op's
//! dispatch and its barrier.
//! - `matmul_rope_append_kv`: where [`fuses`], one dispatch of `matmul_gemv_x8_rope`
//!   (shaders/matmul_gemv_x8_rope.wgsl), a q|k|v GEMV whose workgroups take their 8 rows by
//!   rotation quads and run rope_append_kv16's rotation and stores (shaders/rope16_quad.wgsl);
//!   qkv unrotated, q, the pools and the page summary (`WgpuOptions::fuse_rope`,
//!   `LSERVE_WGPU_FUSE_ROPE`, on by default).
//! - `matmul_silu_mul`: where [`silu_fuses`], one dispatch of `matmul_gemv_x8_silu_mul`, a
//!   gate|up GEMV whose workgroups take the 32 gate and 32 up rows of one x8 block of act and
//!   quantize silu(gate) * up into it (shaders/x8_store.wgsl, as silu_mul_x8); gate|up and act
//!   (`WgpuOptions::fuse_silu`, `LSERVE_WGPU_FUSE_SILU`, on by default).

use super::ops_basic::{need_act, rows_grid};
use super::pipelines as pl;
use super::{WgpuBackend, WgpuBuffer, ops_basic, ops_kv, ops_matmul, shaders};
use crate::backend::*;
use crate::error::Result;

/// Storage buffers `matmul_gemv_x8_rope` binds.
const ROPE_GEMV_BUFFERS: u32 = 15;

/// Whether `matmul_rope_append_kv` of `p` over `w` with `r` into `kv` pools is one dispatch: the
/// switch on, one token (m == 1, r.n_tokens == 1) on a dense `[1][n]` out without accumulate, the
/// batch-1 GEMV's formats (SUBGROUP, an integer form, k % 32 == 0), 16-bit pools, head_dim % 8
/// == 0 (a workgroup's 8 rows are whole quads) and n = (n_heads + 2 n_kv_heads) head_dim.
pub fn fuses(be: &WgpuBackend, p: &MatmulParams, w: &WgpuBuffer, r: &RopeAppendKvParams, kv: DType) -> bool {
    let hd = r.head_dim as usize;
    be.fuse_rope
        && p.m == 1
        && r.n_tokens == 1
        && p.accumulate == 0
        && p.is_dense()
        && p.k.is_multiple_of(32)
        && be.has_subgroup()
        && shaders::has_x8(w.dtype)
        && matches!(kv, DType::F16 | DType::BF16)
        && hd > 0
        && hd.is_multiple_of(8)
        && p.n as usize == (r.n_heads as usize + 2 * r.n_kv_heads as usize) * hd
        && be.gpu().limits.max_storage_buffers_per_shader_stage >= ROPE_GEMV_BUFFERS
}

#[allow(clippy::too_many_arguments)]
pub fn matmul_rope_append_kv(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &WgpuBuffer,
    w: &WgpuBuffer,
    bias: Option<&WgpuBuffer>,
    qkv: &mut WgpuBuffer,
    r: &RopeAppendKvParams,
    m: &RopeAppendMeta<WgpuBackend>,
    q: &mut WgpuBuffer,
    kv: LayerKvMut<WgpuBackend>,
) -> Result<()> {
    if !fuses(be, p, w, r, kv.k.dtype) {
        ops_matmul::matmul(be, p, x, w, bias, qkv)?;
        return ops_kv::rope_append_kv(be, r, qkv, m, q, kv);
    }
    let bias = ops_matmul::check(be, p, x, w, bias, qkv)?;
    ops_kv::check_rope(r, qkv, m, q, &kv)?;
    let op = if kv.k.dtype == DType::BF16 { pl::matmul_gemv_x8_rope::BF16 } else { pl::matmul_gemv_x8_rope::OP };
    let params = MatmulRopeParams::new(p, r);
    // n is a multiple of 8 (head_dim % 8 == 0): every workgroup has its 8 rows.
    let groups = rows_grid(be, p.n as usize / 8);
    ops_matmul::with_x8(be, p, x, |xq| {
        let binds = pl::matmul_gemv_x8_rope::Binds {
            xq,
            w,
            bias,
            out: qkv,
            positions: m.positions,
            slots: m.slots,
            ring_slots: m.ring_slots,
            inv_freq: m.inv_freq,
            head_map: kv.head_map,
            q,
            k: kv.k,
            v: kv.v,
            sk: kv.sk,
            sv: kv.sv,
            summary: kv.summary,
        };
        pl::matmul_gemv_x8_rope::dispatch_variant(be.gpu(), op, Some(w.dtype), &params, binds, groups)
    })
}

/// Whether `matmul_silu_mul` of `p` over `w` into an act of dtype `act` is one dispatch: the
/// switch on, one row (m == 1) on a dense out without accumulate, the batch-1 GEMV's formats
/// (SUBGROUP, an integer form, k % 32 == 0), an X8 act (one row of digits) and n = 2 dim with
/// dim % 32 == 0 (a workgroup's 64 rows are one block's gates and ups).
pub fn silu_fuses(be: &WgpuBackend, p: &MatmulParams, w: &WgpuBuffer, act: DType) -> bool {
    be.fuse_silu
        && p.m == 1
        && p.accumulate == 0
        && p.is_dense()
        && p.k.is_multiple_of(32)
        && be.has_subgroup()
        && shaders::has_x8(w.dtype)
        && act == DType::X8
        && p.n > 0
        && p.n.is_multiple_of(64)
}

pub fn matmul_silu_mul(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &WgpuBuffer,
    w: &WgpuBuffer,
    bias: Option<&WgpuBuffer>,
    gate_up: &mut WgpuBuffer,
    act: &mut WgpuBuffer,
) -> Result<()> {
    if !silu_fuses(be, p, w, act.dtype) {
        ops_matmul::matmul(be, p, x, w, bias, gate_up)?;
        let sp = SiluMulParams { rows: p.m, dim: p.n / 2, ..Default::default() };
        return ops_basic::silu_mul(be, &sp, gate_up, act);
    }
    let bias = ops_matmul::check(be, p, x, w, bias, gate_up)?;
    let dim = p.n as usize / 2;
    need_act(be, act, 1, dim, "matmul_silu_mul act")?;
    // A workgroup a block of 32 elements of act.
    let groups = rows_grid(be, dim / 32);
    ops_matmul::with_x8(be, p, x, |xq| {
        let binds = pl::matmul_gemv_x8_silu_mul::Binds { xq, w, bias, out: gate_up, act };
        pl::matmul_gemv_x8_silu_mul::dispatch(be.gpu(), Some(w.dtype), p, binds, groups)
    })
}
