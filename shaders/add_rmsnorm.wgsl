// add_rmsnorm: residual += x, then out = rmsnorm(residual) * w. One workgroup per row; the body
// is shaders/row_norm.wgsl, which these hooks feed (the new residual is stored as soon as it is
// summed and, for rows past NORM_HELD, read back for the scaling; out holds f32 bits), or for
// the `add_rmsnorm_x8` variant, one row's out as x8 digits, shaders/row_norm_x8.wgsl (x8_put).
@group(0) @binding(0) var<uniform> p: RmsnormParams;
@group(0) @binding(1) var<storage, read_write> residual: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> wn: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

fn norm_segs() -> u32 { return p.rows; }
fn norm_dim() -> u32 { return p.dim; }
fn norm_eps() -> f32 { return p.eps; }
fn norm_base(r: u32) -> u32 { return r * p.dim; }
fn norm_wbase(r: u32) -> u32 { return 0u; }
fn norm_load(i: u32) -> f32 { return residual[i] + x[i]; }
fn norm_keep(i: u32, v: f32) { residual[i] = v; }
fn norm_reload(i: u32) -> f32 { return residual[i]; }
fn norm_store(i: u32, v: f32) { out[i] = bitcast<u32>(v); }
fn x8_put(i: u32, v: u32) { out[i] = v; }
