// row_norm_x8: the norm_tail hook of rmsnorm and add_rmsnorm (shaders/row_norm.wgsl), which
// writes the X8 out of their `_x8` variants (X8_OUT; one row, dim % 32 == 0: the op checks) and
// does nothing otherwise. After the row's reduction the workgroup's threads take the row's
// vec4s in turn, 8 threads a block of 32 (shaders/x8_store.wgsl), each value norm_reload(i) *
// inv * w[i] as the f32 out computes it; storageBarrier makes the residual that add_rmsnorm's
// threads stored (norm_keep) visible to the others first.
fn norm_tail(base: u32, wb: u32, d: u32, inv: f32, l: u32) {
    if (!X8_OUT) { return; }
    storageBarrier();
    let tasks = d / 4u;
    for (var r = 0u; r < tasks; r += 256u) {
        let g = r + l;
        let live = g < tasks;
        var v = vec4(0.0);
        if (live) {
            let e = 4u * g;
            let x = vec4(norm_reload(base + e), norm_reload(base + e + 1u), norm_reload(base + e + 2u),
                         norm_reload(base + e + 3u));
            v = x * inv * vec4(wn[wb + e], wn[wb + e + 1u], wn[wb + e + 2u], wn[wb + e + 3u]);
        }
        x8_store(l, g / 8u, v, live, d / 32u);
    }
}
