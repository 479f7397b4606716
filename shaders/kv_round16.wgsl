// kv_round16: f32 to the 16-bit KV types (KV_KIND 1 = f16, 2 = bf16), round to nearest even by
// bit operations (the `half` crate's conversions, bit for bit; pack2x16float's rounding is the
// driver's), and pack16, two values a u32 word (the first in the low half). Part of
// rope_append_kv_pack and rope_append_kv16.

fn f32_to_bf16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn f32_to_f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let ex = b & 0x7f800000u;
    let man = b & 0x007fffffu;
    if (ex == 0x7f800000u) {
        return sign | 0x7c00u | select(0u, 0x200u, man != 0u) | (man >> 13u);
    }
    let he = i32(ex >> 23u) - 127 + 15;
    if (he >= 31) { return sign | 0x7c00u; }
    if (he <= 0) {
        if (14 - he > 24) { return sign; }
        let m = man | 0x00800000u;
        var hm = m >> u32(14 - he);
        let rb = 1u << u32(13 - he);
        if ((m & rb) != 0u && (m & (3u * rb - 1u)) != 0u) { hm = hm + 1u; }
        return sign | hm;
    }
    let h = sign | (u32(he) << 10u) | (man >> 13u);
    if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) { return h + 1u; }
    return h;
}

fn pack16(a: f32, b: f32) -> u32 {
    if (KV_KIND == 2u) { return f32_to_bf16_bits(a) | (f32_to_bf16_bits(b) << 16u); }
    return f32_to_f16_bits(a) | (f32_to_f16_bits(b) << 16u);
}
