//! GGUF v2/v3 reader: header, metadata key/values, tensor index, and tensor data as f32.
//!
//! Layout (ggml `docs/gguf.md`): magic `GGUF`, u32 version, u64 tensor count, u64 kv count, the
//! key/values, the tensor infos (name, dims in ggml order — `dims[0]` varies fastest — type,
//! offset), then the data section at the next multiple of `general.alignment` (default 32).
//! Every length and offset read from the file is checked against the file size before use, so a
//! truncated or corrupt file is an [`Error::Gguf`] that says what is wrong, never a panic or a huge
//! allocation. The file is memory-mapped; tensors are dequantized on request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::dequant::{GgmlType, dequantize};
use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest metadata array read (vocabularies and merge lists are below 2^20 entries); each value
/// takes 32 bytes in memory, so a 1-byte-per-item array of a huge file cannot ask for a buffer
/// many times the file size.
const MAX_ARRAY: usize = 1 << 24;
/// Smallest encoding of one tensor info (empty name, one dim): 8 + 4 + 8 + 4 + 8 bytes.
const MIN_TENSOR_INFO: usize = 32;
/// Smallest encoding of one metadata pair (empty key, a one-byte value): 8 + 4 + 1 bytes.
const MIN_KV: usize = 13;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// Any integer type (and bool) as u64; negative values give None.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            GgufValue::Bool(v) => Some(v as u64),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v as i64),
            GgufValue::I16(v) => Some(v as i64),
            GgufValue::I32(v) => Some(v as i64),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => self.as_u64().map(|v| v != 0),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Where one tensor lives in the file.
#[derive(Clone, Debug)]
pub struct GgufTensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (fastest) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte offset in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl GgufTensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
    /// Row-major shape as Hugging Face writes it (reverse of ggml order).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// An opened GGUF file.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensorInfo>,
    index: BTreeMap<String, usize>,
    mmap: Mmap,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| format!("truncated at byte {} (wanted {n} more bytes)", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// A count that must be satisfiable by the bytes left (each item at least `min_item` bytes).
    fn count(&mut self, min_item: usize, what: &str) -> std::result::Result<usize, String> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item as u64) > left {
            return Err(format!("{what} count {n} at byte {} exceeds the file size", self.pos - 8));
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let n = self.count(1, "string length")?;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("invalid UTF-8 string at byte {}", self.pos - n))
    }

    fn value(&mut self, ty: u32, depth: usize) -> std::result::Result<GgufValue, String> {
        Ok(match ty {
            0 => GgufValue::U8(self.arr::<1>()?[0]),
            1 => GgufValue::I8(self.arr::<1>()?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.arr()?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.arr()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.arr()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.arr()?)),
            7 => GgufValue::Bool(self.arr::<1>()?[0] != 0),
            8 => GgufValue::String(self.string()?),
            9 => {
                if depth > 2 {
                    return Err("arrays nested too deeply".into());
                }
                let inner = self.u32()?;
                let min_item = match inner {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    _ => 8,
                };
                let n = self.count(min_item, "array")?;
                if n > MAX_ARRAY {
                    return Err(format!("array of {n} values is longer than lserve accepts ({MAX_ARRAY})"));
                }
                // Capacity is bounded by the bytes left, but stay modest and let it grow.
                let mut v = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    v.push(self.value(inner, depth + 1)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.arr()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.arr()?)),
            t => {
                return Err(format!("unknown metadata value type {t} at byte {}", self.pos - 4));
            }
        })
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the map is read-only; a file changed underneath us by another process is outside
        // what any loader can defend against (llama.cpp and safetensors make the same assumption).
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let bad = |msg: String| Error::Gguf { path: path.to_path_buf(), msg };
        let (version, metadata, tensors) = parse(&mmap).map_err(bad)?;
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile { path: path.to_path_buf(), version, metadata, tensors, index, mmap })
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of a tensor (bounds were checked at open).
    pub fn tensor_bytes(&self, t: &GgufTensorInfo) -> &[u8] {
        &self.mmap[t.offset as usize..(t.offset + t.n_bytes) as usize]
    }

    /// Dequantize a tensor to f32, row-major in HF order (see [`GgufTensorInfo::shape`]).
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
        let t = self
            .tensor(name)
            .ok_or_else(|| Error::Format(format!("{}: tensor `{name}` is missing", self.path.display())))?;
        let mut out = vec![0f32; t.n_elements() as usize];
        dequantize(t.ty, self.tensor_bytes(t), &mut out).map_err(|e| Error::UnsupportedTensorType {
            name: name.to_string(),
            ty: format!("{} ({e})", t.ty.name()),
        })?;
        Ok((out, t.shape()))
    }
}

type Parsed = (u32, BTreeMap<String, GgufValue>, Vec<GgufTensorInfo>);

fn parse(buf: &[u8]) -> std::result::Result<Parsed, String> {
    let mut r = Reader { buf, pos: 0 };
    if r.take(4).map_err(|_| "file is shorter than the GGUF header".to_string())? != MAGIC {
        return Err("bad magic (expected `GGUF`)".into());
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} is not supported (2 and 3 are)"));
    }
    let n_tensors = r.count(MIN_TENSOR_INFO, "tensor")?;
    let n_kv = r.count(MIN_KV, "metadata")?;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string()?;
        let ty = r.u32()?;
        let value = r.value(ty, 0).map_err(|e| format!("metadata `{key}`: {e}"))?;
        metadata.insert(key, value);
    }
    let mut infos = Vec::with_capacity(n_tensors.min(1 << 16));
    for _ in 0..n_tensors {
        infos.push(read_tensor_info(&mut r)?);
    }
    let align = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => v
            .as_u64()
            .filter(|a| a.is_power_of_two() && *a <= 1 << 20)
            .ok_or("general.alignment is not a power of two up to 1 MiB")?,
    };
    let data_start = (r.pos as u64).div_ceil(align) * align;
    let tensors = infos
        .into_iter()
        .map(|(name, dims, ty_id, rel)| locate(name, dims, ty_id, rel, data_start, align, buf.len() as u64))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    check_layout(&tensors, data_start, align, buf.len() as u64)?;
    Ok((version, metadata, tensors))
}

/// The data section as ggml writes it and llama.cpp requires it: tensors in index order, each at
/// the previous one's end rounded up to the alignment, the file ending within one alignment of
/// the last tensor. So a tensor's byte size (from its type and shape) must match the room the
/// file gives it: a type changed to one of another size, or a shape that does not fit the data,
/// is an error instead of reading a neighbour's bytes.
fn check_layout(
    tensors: &[GgufTensorInfo],
    data_start: u64,
    align: u64,
    file_len: u64,
) -> std::result::Result<(), String> {
    let mut expect = data_start;
    for t in tensors {
        if t.offset != expect {
            return Err(format!(
                "tensor `{}` starts at byte {} but the tensors before it end at {expect}: a type or shape does not match the data",
                t.name, t.offset
            ));
        }
        // No overflow: locate checked offset + n_bytes <= file_len, and align <= 2^63.
        expect = (t.offset + t.n_bytes).div_ceil(align).saturating_mul(align);
    }
    let end = tensors.last().map_or(file_len, |t| t.offset + t.n_bytes);
    if file_len - end >= align {
        return Err(format!(
            "{} bytes follow the last tensor's data: a type or shape does not match the data",
            file_len - end
        ));
    }
    Ok(())
}

fn read_tensor_info(r: &mut Reader) -> std::result::Result<(String, Vec<u64>, u32, u64), String> {
    let name = r.string()?;
    let n_dims = r.u32()?;
    if n_dims == 0 || n_dims > 4 {
        return Err(format!("tensor `{name}` has {n_dims} dimensions (1..=4 allowed)"));
    }
    let dims = (0..n_dims).map(|_| r.u64()).collect::<std::result::Result<Vec<_>, _>>()?;
    let ty = r.u32()?;
    let offset = r.u64()?;
    Ok((name, dims, ty, offset))
}

fn locate(
    name: String,
    dims: Vec<u64>,
    ty_id: u32,
    rel: u64,
    data_start: u64,
    align: u64,
    file_len: u64,
) -> std::result::Result<GgufTensorInfo, String> {
    let ty = GgmlType::from_id(ty_id).ok_or_else(|| format!("tensor `{name}` has unknown type id {ty_id}"))?;
    let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).filter(|&n| n < (1 << 40));
    let n = n.ok_or_else(|| format!("tensor `{name}` has an absurd shape {dims:?}"))?;
    let n_bytes = ty.bytes_for(n as usize).map_err(|e| format!("tensor `{name}`: {e}"))? as u64;
    if !rel.is_multiple_of(align) {
        return Err(format!("tensor `{name}` offset {rel} is not aligned to {align}"));
    }
    let offset = data_start.checked_add(rel).filter(|&o| o <= file_len);
    let offset = offset.ok_or_else(|| format!("tensor `{name}` offset {rel} is past the end of the file"))?;
    if offset.checked_add(n_bytes).is_none_or(|end| end > file_len) {
        return Err(format!(
            "tensor `{name}` ({n_bytes} bytes at {offset}) runs past the end of the file ({file_len} bytes): truncated?"
        ));
    }
    Ok(GgufTensorInfo { name, dims, ty, offset, n_bytes })
}

/// Writes GGUF files; used by tests to build small models and corrupt variants.
pub mod write {
    use super::GgufValue;

    pub struct TensorData {
        pub name: String,
        pub dims: Vec<u64>,
        pub ty_id: u32,
        pub bytes: Vec<u8>,
    }

    fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    fn type_id(v: &GgufValue) -> u32 {
        match v {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::String(_) => 8,
            GgufValue::Array(_) => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }

    fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
        match v {
            GgufValue::U8(x) => out.push(*x),
            GgufValue::I8(x) => out.push(*x as u8),
            GgufValue::U16(x) => out.extend(x.to_le_bytes()),
            GgufValue::I16(x) => out.extend(x.to_le_bytes()),
            GgufValue::U32(x) => out.extend(x.to_le_bytes()),
            GgufValue::I32(x) => out.extend(x.to_le_bytes()),
            GgufValue::F32(x) => out.extend(x.to_le_bytes()),
            GgufValue::Bool(x) => out.push(*x as u8),
            GgufValue::String(s) => put_str(out, s),
            GgufValue::Array(a) => {
                out.extend(a.first().map_or(4, type_id).to_le_bytes());
                out.extend((a.len() as u64).to_le_bytes());
                a.iter().for_each(|x| put_value(out, x));
            }
            GgufValue::U64(x) => out.extend(x.to_le_bytes()),
            GgufValue::I64(x) => out.extend(x.to_le_bytes()),
            GgufValue::F64(x) => out.extend(x.to_le_bytes()),
        }
    }

    /// Serialize a v3 file with 32-byte alignment.
    pub fn to_bytes(metadata: &[(String, GgufValue)], tensors: &[TensorData]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((tensors.len() as u64).to_le_bytes());
        out.extend((metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata {
            put_str(&mut out, k);
            out.extend(type_id(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut rel = 0u64;
        for t in tensors {
            put_str(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.ty_id.to_le_bytes());
            out.extend(rel.to_le_bytes());
            rel += (t.bytes.len() as u64).div_ceil(32) * 32;
        }
        for t in tensors {
            out.resize(out.len().div_ceil(32) * 32, 0);
            out.extend(&t.bytes);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::write::{TensorData, to_bytes};
    use super::*;

    fn sample() -> Vec<u8> {
        let meta = vec![
            ("general.architecture".to_string(), GgufValue::String("llama".into())),
            ("llama.block_count".to_string(), GgufValue::U32(2)),
            ("llama.rope.freq_base".to_string(), GgufValue::F32(1e4)),
            (
                "tokenizer.ggml.tokens".to_string(),
                GgufValue::Array(vec![GgufValue::String("a".into()), GgufValue::String("b".into())]),
            ),
            ("x.i64".to_string(), GgufValue::I64(-5)),
        ];
        let f32_bytes: Vec<u8> = [1.0f32, -2.0, 3.5, 0.25, 5.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        // One Q8_0 block: d = 0.5 (f16 0x3800), codes 0..32 minus 16.
        let mut q8 = vec![0x00, 0x38];
        q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let tensors = vec![
            TensorData { name: "a".into(), dims: vec![3, 2], ty_id: 0, bytes: f32_bytes },
            TensorData { name: "q".into(), dims: vec![32], ty_id: 8, bytes: q8 },
        ];
        to_bytes(&meta, &tensors)
    }

    fn open_bytes(bytes: &[u8]) -> Result<GgufFile> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        std::fs::write(&p, bytes).unwrap();
        GgufFile::open(&p)
    }

    #[test]
    fn parses_metadata_and_tensors() {
        let g = open_bytes(&sample()).unwrap();
        assert_eq!(g.version, 3);
        assert_eq!(g.get("general.architecture").unwrap().as_str(), Some("llama"));
        assert_eq!(g.get("llama.block_count").unwrap().as_u64(), Some(2));
        assert_eq!(g.get("llama.rope.freq_base").unwrap().as_f64(), Some(1e4));
        assert_eq!(g.get("x.i64").unwrap().as_u64(), None);
        assert_eq!(g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap().len(), 2);
        let (a, shape) = g.tensor_f32("a").unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(a, vec![1.0, -2.0, 3.5, 0.25, 5.0, 6.0]);
        let (q, _) = g.tensor_f32("q").unwrap();
        assert_eq!(q, (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect::<Vec<_>>());
        assert!(g.tensor_f32("missing").is_err());
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = sample();
        for cut in 0..bytes.len() {
            let r = open_bytes(&bytes[..cut]);
            assert!(r.is_err(), "truncated at {cut} of {} parsed", bytes.len());
        }
    }

    #[test]
    fn corrupt_headers_are_named() {
        let mut b = sample();
        b[0] = b'X';
        assert!(open_bytes(&b).err().unwrap().to_string().contains("magic"));
        let mut b = sample();
        b[4] = 1;
        assert!(open_bytes(&b).err().unwrap().to_string().contains("version 1"));
        let mut b = sample();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(open_bytes(&b).err().unwrap().to_string().contains("exceeds the file size"));
        // Unknown tensor type id: patch the type of tensor "q" (last info before data).
        let bytes = sample();
        let pos = bytes.windows(9).position(|w| w == b"\x01\0\0\0\0\0\0\0q").unwrap() + 9;
        let ty_at = pos + 4 + 8; // n_dims u32, one dim u64
        let mut b = bytes.clone();
        b[ty_at..ty_at + 4].copy_from_slice(&99u32.to_le_bytes());
        assert!(open_bytes(&b).err().unwrap().to_string().contains("unknown type id 99"));
    }

    #[test]
    fn random_byte_flips_never_panic() {
        let base = sample();
        let mut s = 0x9e3779b97f4a7c15u64
            ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        eprintln!("flip seed {s}");
        for _ in 0..2000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let mut b = base.clone();
            let i = (s as usize) % b.len();
            b[i] ^= (s >> 32) as u8 | 1;
            if let Ok(g) = open_bytes(&b) {
                for t in g.tensors.clone() {
                    let _ = g.tensor_f32(&t.name);
                }
            }
        }
    }
}
