//! TMA tensor maps (`CUtensorMap`, made by `cuTensorMapEncodeTiled`) for the kernels that copy
//! tiles with `cp.async.bulk.tensor`: the Hopper prefill attention's `_ws` and `_tma` entries
//! (cuda/prefill_attention_wgmma.cu), which copy runs of 16 keys of one page as boxes.
//!
//! Invariants: a map describes a whole 16-bit pool as `[rows][cols]` elements (rows = the pool's
//! bytes / (2 cols), at least 1), with a box of [`BOX_COLS`] x [`BOX_ROWS`] elements in the
//! 128-byte swizzle (the layout wgmma reads; a box row is 128 bytes, its 16-byte chunk c lands at
//! chunk c ^ (row % 8)). Maps live in device memory, [`SET`] to a set of pools (K, V, streaming
//! K, streaming V, in that order): encoded here, uploaded once per set by the context
//! (`Gpu::tensor_maps`), which keeps them for the backend's life (a cache's pools never move; a
//! new set only appears with new pools). This file imports nothing else of the backend.

use cudarc::driver::sys;

use crate::error::{Error, Result};

/// Elements per box row (128 bytes of 16-bit elements: the 128-byte swizzle's width).
pub const BOX_COLS: u32 = 64;
/// Rows per box (16 consecutive keys of one page, copied as one run). The kernel spells both box
/// sizes as literals (16 rows, 64 columns, 2,048 bytes a box).
pub const BOX_ROWS: u32 = 16;
/// Maps per set of pools.
pub const SET: usize = 4;
/// Bytes of one `CUtensorMap`.
const MAP_BYTES: usize = std::mem::size_of::<sys::CUtensorMap>();

/// A pool: its device address and its bytes.
pub type Pool = (u64, usize);

/// The bytes of the [`SET`] maps of `pools` (rows of `cols` 16-bit elements), in order.
pub fn encode_set(pools: &[Pool; SET], cols: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(SET * MAP_BYTES);
    for &(ptr, bytes) in pools {
        out.extend_from_slice(&encode(ptr, bytes, cols)?);
    }
    Ok(out)
}

/// One pool's map: `[rows][cols]` 16-bit elements, row stride 2 cols bytes, boxes of
/// [`BOX_COLS`] x [`BOX_ROWS`], 128-byte swizzle, no out-of-bounds rows ever asked for.
fn encode(ptr: u64, bytes: usize, cols: usize) -> Result<[u8; MAP_BYTES]> {
    let row_bytes = 2 * cols;
    if cols < BOX_COLS as usize || !row_bytes.is_multiple_of(16) || !ptr.is_multiple_of(16) {
        return Err(err(format!("rows of {cols} 16-bit elements at {ptr:#x} cannot be boxed")));
    }
    let rows = (bytes / row_bytes).max(1) as u64;
    // The kernels address rows with 32-bit signed coordinates.
    if rows > i32::MAX as u64 {
        return Err(err(format!("{rows} rows exceed TMA's 32-bit coordinates")));
    }
    let dims = [cols as u64, rows];
    let strides = [row_bytes as u64];
    let boxes = [BOX_COLS, BOX_ROWS];
    let steps = [1u32, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every pointer argument points at an array of the rank's length (2; strides 1);
    // the driver only writes the map and does not touch the pool's memory.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
    }
    .map_err(|e| err(format!("cuTensorMapEncodeTiled: {e:?}")))?;
    // SAFETY: the call succeeded, so the map is initialised; CUtensorMap is 128 plain bytes.
    Ok(unsafe { std::mem::transmute::<sys::CUtensorMap, [u8; MAP_BYTES]>(map.assume_init()) })
}

fn err(msg: String) -> Error {
    Error::Backend { backend: "cuda", msg: format!("tensor map: {msg}") }
}
