// row_sum: the workgroup sum of the row norms (shaders/row_norm.wgsl, shaders/row_norm_x8.wgsl;
// 256 threads).
var<workgroup> row_sum_a: array<f32, 256>;
var<workgroup> row_sum_b: array<f32, 16>;

// The sum of one f32 per thread over the workgroup, returned to every thread: threads 0..15 each
// add 16 partials (strided: distinct banks), then every thread adds the 16 sums in the same
// order, so all get the same value. Two barriers instead of a tree of eight.
fn row_sum(v: f32, lid: u32) -> f32 {
    row_sum_a[lid] = v;
    workgroupBarrier();
    if (lid < 16u) {
        let a = vec4(row_sum_a[lid], row_sum_a[lid + 16u], row_sum_a[lid + 32u], row_sum_a[lid + 48u]);
        let b = vec4(row_sum_a[lid + 64u], row_sum_a[lid + 80u], row_sum_a[lid + 96u], row_sum_a[lid + 112u]);
        let c = vec4(row_sum_a[lid + 128u], row_sum_a[lid + 144u], row_sum_a[lid + 160u], row_sum_a[lid + 176u]);
        let d = vec4(row_sum_a[lid + 192u], row_sum_a[lid + 208u], row_sum_a[lid + 224u], row_sum_a[lid + 240u]);
        let s = (a + b) + (c + d);
        row_sum_b[lid] = (s.x + s.y) + (s.z + s.w);
    }
    workgroupBarrier();
    let a = vec4(row_sum_b[0], row_sum_b[1], row_sum_b[2], row_sum_b[3]);
    let b = vec4(row_sum_b[4], row_sum_b[5], row_sum_b[6], row_sum_b[7]);
    let c = vec4(row_sum_b[8], row_sum_b[9], row_sum_b[10], row_sum_b[11]);
    let d = vec4(row_sum_b[12], row_sum_b[13], row_sum_b[14], row_sum_b[15]);
    let s = (a + b) + (c + d);
    return (s.x + s.y) + (s.z + s.w);
}
