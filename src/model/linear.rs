//! Weight matrices as the model holds them on the device, and how they get there.
//!
//! A [`Linear`] is one `[n][k]` matrix (x `[m][k]` -> out `[m][n]`) made of row parts stacked in
//! order — q|k|v, gate|up, or a single matrix. Parts whose storage type is the same are one
//! buffer (one matmul); where the types differ (Gemma 3's Q4_K_M file: q/k Q5_0, v Q8_0) each run
//! of equal types is its own buffer, written into its columns of the fused output by a matmul with
//! `ldo = n` and `out_off` = the run's first row, so the activations downstream see the same fused
//! `[m][n]` layout either way.
//!
//! Storage of each part ([`LoadOptions`]): the file's quantized blocks as they are when the mode
//! is native and the backend lists their type in `caps().weight_dtypes`; otherwise its f32 values
//! (dequantized by the loader; the reason is logged once per type), stored as `quantize`
//! (int8/fp8 rows, `weight_quant::quantize_rows`) or as the float dtype.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::weights::{LoadOptions, RawTensor, WeightMode, WeightSource};
use crate::backend::reference::weight_quant;
use crate::backend::{
    Backend, DType, LayerKvMut, MatmulParams, Prologue, PrologueKind, RopeAppendKvParams, RopeAppendMeta, SiluMulParams,
};
use crate::error::{Error, Result};

struct Part<B: Backend> {
    w: B::Buffer,
    bias: Option<B::Buffer>,
    /// Rows of this part and its first row in the fused matrix.
    rows: usize,
    off: usize,
}

/// A `[n][k]` weight matrix in one or more row parts (see the module header).
pub struct Linear<B: Backend> {
    parts: Vec<Part<B>>,
    n: usize,
    k: usize,
}

impl<B: Backend> Linear<B> {
    /// A matrix in one buffer (synthetic weights, tests).
    pub fn single(w: B::Buffer, bias: Option<B::Buffer>, n: usize, k: usize) -> Self {
        Linear { parts: vec![Part { w, bias, rows: n, off: 0 }], n, k }
    }

    /// A matrix of row parts stacked in order (synthetic weights with mixed types), no biases.
    pub fn stacked(parts: Vec<(B::Buffer, usize)>, k: usize) -> Self {
        let mut off = 0;
        let parts: Vec<Part<B>> = parts
            .into_iter()
            .map(|(w, rows)| {
                off += rows;
                Part { w, bias: None, rows, off: off - rows }
            })
            .collect();
        Linear { parts, n: off, k }
    }

    /// out `[m][n]` = x `[m][k]` . w^T (+ bias), one matmul per part.
    pub fn matmul(&self, be: &B, m: usize, x: &B::Buffer, out: &mut B::Buffer) -> Result<()> {
        self.run(be, m, x, out, false)
    }

    /// out `[m][n]` (f32) += x `[m][k]` . w^T (+ bias): the residual add folded into the matmul
    /// (`MatmulParams::accumulate`); only where [`Linear::accumulates`].
    pub fn matmul_add(&self, be: &B, m: usize, x: &B::Buffer, out: &mut B::Buffer) -> Result<()> {
        self.run(be, m, x, out, true)
    }

    /// out `[m][n]` (+)= pro(src) . w^T (+ bias): x made by `pro` in the matmul's loads
    /// (`Backend::matmul_prologue`), added into out with `acc`; only where
    /// [`Linear::prologue_fuses`] (and [`Linear::accumulates`] for `acc`).
    pub fn matmul_prologue(
        &self,
        be: &B,
        m: usize,
        pro: Prologue<'_, B::Buffer>,
        src: &B::Buffer,
        out: &mut B::Buffer,
        acc: bool,
    ) -> Result<()> {
        self.each(m, acc, |mp, p| be.matmul_prologue(mp, pro, src, &p.w, p.bias.as_ref(), out))
    }

    /// qkv `[m][n]` = x . w^T (+ bias), then `rope_append_kv` of it (`Backend::matmul_rope_append_kv`:
    /// one kernel where [`Linear::rope_fuses`]; a matrix of several parts runs its matmuls, then
    /// the op).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_rope(
        &self,
        be: &B,
        m: usize,
        x: &B::Buffer,
        qkv: &mut B::Buffer,
        r: &RopeAppendKvParams,
        meta: &RopeAppendMeta<B>,
        q: &mut B::Buffer,
        kv: LayerKvMut<B>,
    ) -> Result<()> {
        if let Some((mp, p)) = self.one_part(m) {
            return be.matmul_rope_append_kv(&mp, x, &p.w, p.bias.as_ref(), qkv, r, meta, q, kv);
        }
        self.matmul(be, m, x, qkv)?;
        be.rope_append_kv(r, qkv, meta, q, kv)
    }

    /// Its matmul at `m` rows and `rope_append_kv` with `r` into pools of `kv` are one kernel
    /// (`Backend::matmul_rope_fuses`; one part only).
    pub fn rope_fuses(&self, be: &B, m: usize, r: &RopeAppendKvParams, kv: DType) -> bool {
        self.one_part(m).is_some_and(|(mp, p)| be.matmul_rope_fuses(&mp, &p.w, r, kv))
    }

    /// gate_up `[m][n]` = x . w^T (+ bias), then act = `silu_mul` of it
    /// (`Backend::matmul_silu_mul`: one kernel where [`Linear::silu_fuses`]; a matrix of several
    /// parts runs its matmuls, then the op).
    pub fn matmul_silu(
        &self,
        be: &B,
        m: usize,
        x: &B::Buffer,
        gate_up: &mut B::Buffer,
        act: &mut B::Buffer,
    ) -> Result<()> {
        if let Some((mp, p)) = self.one_part(m) {
            return be.matmul_silu_mul(&mp, x, &p.w, p.bias.as_ref(), gate_up, act);
        }
        self.matmul(be, m, x, gate_up)?;
        let sp = SiluMulParams { rows: m as u32, dim: (self.n / 2) as u32, ..Default::default() };
        be.silu_mul(&sp, gate_up, act)
    }

    /// Its matmul at `m` rows and `silu_mul` into an act of dtype `act` are one kernel
    /// (`Backend::matmul_silu_mul_fuses`; one part only).
    pub fn silu_fuses(&self, be: &B, m: usize, act: DType) -> bool {
        self.one_part(m).is_some_and(|(mp, p)| be.matmul_silu_mul_fuses(&mp, &p.w, act))
    }

    /// Its one part with that part's params at `m` rows (the whole `[m][n]` out); None for a
    /// matrix of several parts, whose fused ops run as their matmuls and then the op.
    fn one_part(&self, m: usize) -> Option<(MatmulParams, &Part<B>)> {
        match self.parts.as_slice() {
            [p] => Some((MatmulParams::new(m, p.rows, self.k, p.bias.is_some()), p)),
            _ => None,
        }
    }

    fn run(&self, be: &B, m: usize, x: &B::Buffer, out: &mut B::Buffer, acc: bool) -> Result<()> {
        self.each(m, acc, |mp, p| be.matmul(mp, x, &p.w, p.bias.as_ref(), out))
    }

    /// `f` for each part with its params (its column block of a shared out).
    fn each(&self, m: usize, acc: bool, mut f: impl FnMut(&MatmulParams, &Part<B>) -> Result<()>) -> Result<()> {
        for p in &self.parts {
            let mut mp = MatmulParams::new(m, p.rows, self.k, p.bias.is_some());
            if self.parts.len() > 1 {
                (mp.ldo, mp.out_off) = (self.n as u32, p.off as u32);
            }
            mp.accumulate = acc as u32;
            f(&mp, p)?;
        }
        Ok(())
    }

    /// Its matmul at `m` rows takes a prologue of `kind` in one kernel per part
    /// (`Backend::matmul_prologue_fuses`).
    pub fn prologue_fuses(&self, be: &B, m: usize, kind: PrologueKind) -> bool {
        let mut all = true;
        let _ = self.each(m, false, |mp, p| {
            all &= be.matmul_prologue_fuses(mp, &p.w, kind);
            Ok(())
        });
        all
    }

    /// Its matmul at `m` rows takes `matmul_add` (`Backend::matmul_accumulates` for every part).
    pub fn accumulates(&self, be: &B, m: usize) -> bool {
        self.parts.iter().all(|p| be.matmul_accumulates(&p.w, m))
    }

    /// The 16-bit dtype its x of `m` rows may come in where the backend takes 16-bit activations
    /// (`Caps::act16_from`): every part's `Backend::weight_x16_dtype` is that one type (f16 / bf16
    /// weights their own; CUDA's quantized weights f16 on its dequantize path), so the GEMM takes
    /// such an x as it is. None: f32 x.
    pub fn x16_dtype(&self, be: &B, m: usize) -> Option<DType> {
        self.common(|p| be.weight_x16_dtype(&p.w, m))
    }

    /// The 16-bit dtype its matmul may write an `m`-row out in (`Backend::matmul_out16_dtype`):
    /// every part's, and no part with a bias (biases are added in f32).
    pub fn out16_dtype(&self, be: &B, m: usize) -> Option<DType> {
        self.common(|p| be.matmul_out16_dtype(&p.w, m).filter(|_| p.bias.is_none()))
    }

    /// `f`'s dtype where every part gives the same one.
    fn common(&self, f: impl Fn(&Part<B>) -> Option<DType>) -> Option<DType> {
        let d = f(self.parts.first()?)?;
        self.parts.iter().all(|p| f(p) == Some(d)).then_some(d)
    }

    /// Its matmul takes x as one row of x8 digits (`DType::X8`): every part does
    /// (`Backend::weight_takes_x8`: its dtype in `Caps::act_x8_dtypes`, k a multiple of 4 up to
    /// `act_x8_max_k`, and whatever the backend adds per buffer).
    pub fn takes_x8(&self, be: &B) -> bool {
        self.parts.iter().all(|p| be.weight_takes_x8(&p.w, self.k))
    }

    /// The single buffer of a one-part matrix (an embedding table), or None.
    pub fn buffer(&self) -> Option<&B::Buffer> {
        match self.parts.as_slice() {
            [p] => Some(&p.w),
            _ => None,
        }
    }

    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Bytes on the device (weights and biases).
    pub fn bytes(&self, be: &B) -> usize {
        let size = |b: &B::Buffer| be.len(b) * be.dtype(b).size();
        self.parts.iter().map(|p| size(&p.w) + p.bias.as_ref().map_or(0, size)).sum()
    }

    /// The buffer of each part (weights, then biases).
    pub fn buffers(&self) -> impl Iterator<Item = &B::Buffer> {
        self.parts.iter().map(|p| &p.w).chain(self.parts.iter().filter_map(|p| p.bias.as_ref()))
    }

    /// The storage type of each part.
    pub fn dtypes(&self, be: &B) -> Vec<DType> {
        self.parts.iter().map(|p| be.dtype(&p.w)).collect()
    }
}

/// A part on its way to the device.
enum Stored {
    Raw(RawTensor),
    Values(Vec<f32>),
}

/// Uploads a model's weights under one [`LoadOptions`].
pub struct WeightLoader<'a, B: Backend, S: WeightSource + ?Sized> {
    be: &'a B,
    src: &'a S,
    opts: LoadOptions,
    float: DType,
    /// Quantized types already reported as dequantized (one log line per type).
    noted: Mutex<BTreeSet<String>>,
}

/// The f32 tensor `name` of exactly `shape` (a transposed weight must not load).
pub fn take<S: WeightSource + ?Sized>(src: &S, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let (data, got) = src.get(name)?.ok_or_else(|| Error::Format(format!("weight `{name}` is missing")))?;
    if got != shape || data.len() != shape.iter().product::<usize>() {
        return Err(Error::Format(format!("weight `{name}` has shape {got:?}, expected {shape:?}")));
    }
    Ok(data)
}

impl<'a, B: Backend, S: WeightSource + ?Sized> WeightLoader<'a, B, S> {
    pub fn new(be: &'a B, src: &'a S, opts: LoadOptions) -> Result<Self> {
        let float = opts.resolve(be.caps().name, &be.caps().weight_dtypes)?;
        Ok(WeightLoader { be, src, opts, float, noted: Mutex::default() })
    }

    /// The weights being loaded.
    pub fn source(&self) -> &'a S {
        self.src
    }

    /// The float dtype of matrices held as floats.
    pub fn float_dtype(&self) -> DType {
        self.float
    }

    /// A one-buffer `[n][k]` matrix: an embedding table (gathered by `embed`, and the LM head
    /// when the embeddings are tied).
    pub fn table(&self, name: &str, n: usize, k: usize) -> Result<B::Buffer> {
        let mut l = self.linear(&[(name, n)], k, None)?;
        Ok(l.parts.pop().expect("one part makes one run").w)
    }

    /// An f32 vector (norm weights, biases) of exactly `n` values, on the device as f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<B::Buffer> {
        self.be.upload_f32(DType::F32, take(self.src, name, &[n])?)
    }

    /// The `[n][k]` matrix stacked from `parts` (`(name, rows)` each, in order), with the biases
    /// of `bias` (one name per part) when given.
    pub fn linear(&self, parts: &[(&str, usize)], k: usize, bias: Option<&[&str]>) -> Result<Linear<B>> {
        let mut stored = Vec::with_capacity(parts.len());
        for &(name, rows) in parts {
            stored.push(self.part(name, rows, k)?);
        }
        let n = parts.iter().map(|p| p.1).sum();
        let mut out = Linear { parts: vec![], n, k };
        let (mut i, mut off) = (0, 0);
        while i < parts.len() {
            let dt = self.target(&stored[i]);
            let j = (i..parts.len()).find(|&j| self.target(&stored[j]) != dt).unwrap_or(parts.len());
            let rows: usize = parts[i..j].iter().map(|p| p.1).sum();
            let w = self.upload_run(&mut stored[i..j], dt, rows, k)?;
            let b = match bias {
                Some(names) => {
                    let mut v = vec![];
                    for (name, &(_, r)) in names[i..j].iter().zip(&parts[i..j]) {
                        v.extend(take(self.src, name, &[r])?);
                    }
                    Some(self.be.upload_f32(DType::F32, v)?)
                }
                None => None,
            };
            out.parts.push(Part { w, bias: b, rows, off });
            (i, off) = (j, off + rows);
        }
        Ok(out)
    }

    /// One part, raw when it is to stay in the file's quantized type, else its values.
    fn part(&self, name: &str, rows: usize, k: usize) -> Result<Stored> {
        if self.opts.weights == WeightMode::Native
            && let Some(raw) = self.src.get_raw(name)?
        {
            if raw.shape != [rows, k] {
                return Err(Error::Format(format!(
                    "weight `{name}` has shape {:?}, expected {:?}",
                    raw.shape,
                    [rows, k]
                )));
            }
            if self.be.caps().weight_dtypes.contains(&raw.dtype) {
                return Ok(Stored::Raw(raw));
            }
            self.note(raw.dtype);
        }
        Ok(Stored::Values(take(self.src, name, &[rows, k])?))
    }

    fn note(&self, dt: DType) {
        let name = dt.weight_name();
        if self.noted.lock().expect("not poisoned").insert(name.clone()) {
            let to = self.opts.quantize.unwrap_or(self.float).weight_name();
            tracing::warn!(
                "the {} backend does not compute with {name} weights: those matrices are dequantized to {to}",
                self.be.caps().name
            );
        }
    }

    fn target(&self, s: &Stored) -> DType {
        match s {
            Stored::Raw(r) => r.dtype,
            Stored::Values(_) => self.opts.quantize.unwrap_or(self.float),
        }
    }

    /// Uploads consecutive parts of one storage type `dt` as one `[rows][k]` buffer.
    fn upload_run(&self, run: &mut [Stored], dt: DType, rows: usize, k: usize) -> Result<B::Buffer> {
        if let [Stored::Raw(r)] = run {
            return self.be.upload_weight(dt, rows, k, &r.bytes);
        }
        if dt.is_weight_quant() && matches!(run[0], Stored::Raw(_)) {
            // GGML rows are self-contained blocks: stacking matrices is concatenating their bytes.
            let mut bytes = Vec::with_capacity(dt.weight_bytes(rows, k).unwrap_or(0));
            for s in run.iter() {
                if let Stored::Raw(r) = s {
                    bytes.extend_from_slice(&r.bytes);
                }
            }
            return self.be.upload_weight(dt, rows, k, &bytes);
        }
        let mut values = Vec::with_capacity(rows * k);
        for s in run.iter_mut() {
            if let Stored::Values(v) = s {
                values.append(v);
            }
        }
        if dt.is_weight_quant() {
            let q = weight_quant::quantize_rows(dt, &values, rows, k).ok_or_else(|| {
                Error::InvalidArgument(format!("{} weights cannot be made at load", dt.weight_name()))
            })?;
            return self.be.upload_weight(dt, rows, k, &q);
        }
        self.be.upload_f32(dt, values)
    }
}
