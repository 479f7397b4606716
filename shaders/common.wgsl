// Shared helpers, prepended (after params.wgsl and the weight-format snippet) to every module.
// WGSL has no include, so the Rust side assembles modules: params + weight format + common + op.

const STREAMING_BIT: u32 = 0x80000000u;
const NEG_INF: f32 = -3.4028235e38;
// f32_key(-inf): the smallest key of a real score (page selection's sort keys).
const KEY_NEG_INF: u32 = 0x007fffffu;

// Monotone map of f32 to u32 in f32::total_cmp order (page selection's sort keys).
fn f32_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b ^ 0x80000000u, ~b, (b >> 31u) == 1u);
}

// Streaming ring index of position `pos` (see src/kv/mod.rs ring_index).
fn ring_index(pos: u32, sink: u32, ring_tokens: u32) -> u32 {
    if (pos < sink) { return pos; }
    return sink + (pos - sink) % (ring_tokens - sink);
}
