// rope_sincos: sin_cos(x) of the RoPE shaders (rope_append_kv, rope_append_kv16), computed here,
// not with the builtins (whose accuracy WGSL leaves to the driver): Cody-Waite reduction by pi/2
// split into 7 parts of 6 significant bits (k * part is exact for k < 2^18, i.e. |angle| <
// ~411,000 rad), then the cephes minimax polynomials on [-pi/4, pi/4]. Absolute error ~1.2e-7
// against a correctly rounded cos/sin of the same f32 angle.

// (sin, cos) of x.
fn sin_cos(x: f32) -> vec2<f32> {
    let kf = round(x * 0.63661977236758134f);
    var r = x - kf * 0x1.9p0f;
    r = r - kf * 0x1.08p-7f;
    r = r - kf * 0x1.fp-13f;
    r = r - kf * 0x1.a8p-19f;
    r = r - kf * 0x1.1p-26f;
    r = r - kf * 0x1.08p-34f;
    r = r - kf * 0x1.ap-41f;
    let z = r * r;
    let s = r + r * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
    let c = 1.0f - 0.5f * z + z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f + z * 2.443315711809948e-5f));
    let quad = u32(i32(kf)) & 3u;
    if (quad == 0u) { return vec2<f32>(s, c); }
    if (quad == 1u) { return vec2<f32>(c, -s); }
    if (quad == 2u) { return vec2<f32>(-s, -c); }
    return vec2<f32>(-c, s);
}
