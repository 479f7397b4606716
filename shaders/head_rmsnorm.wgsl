// head_rmsnorm, in place: in each of p.rows rows of p.row_stride floats, segment h < p.n_heads
// (floats h*head_dim .. (h+1)*head_dim) becomes x / sqrt(mean(x^2) + eps) * w[h][:]. One
// workgroup per (row, head) segment; the body is shaders/row_norm.wgsl, which these hooks feed.
@group(0) @binding(0) var<uniform> p: HeadRmsnormParams;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> wn: array<f32>;

fn norm_segs() -> u32 { return p.rows * p.n_heads; }
fn norm_dim() -> u32 { return p.head_dim; }
fn norm_eps() -> f32 { return p.eps; }
fn norm_base(seg: u32) -> u32 { return (seg / p.n_heads) * p.row_stride + (seg % p.n_heads) * p.head_dim; }
fn norm_wbase(seg: u32) -> u32 { return (seg % p.n_heads) * p.head_dim; }
fn norm_load(i: u32) -> f32 { return x[i]; }
fn norm_keep(i: u32, v: f32) {}
fn norm_reload(i: u32) -> f32 { return x[i]; }
fn norm_store(i: u32, v: f32) { x[i] = v; }
