// matmul_gemv_x8 (batch-1 decode on quantized weights, adapters with SUBGROUP; the host sends m
// == 1 and k % 32 == 0 here, every format with an integer form: not fp8): out[out_off + c] =
// x[0][k] . w[c][k]^T (+ bias[c]) (p.accumulate: out += that), with x as the two int8 digits per
// element in xq, written by matmul_gemv_x8_pack or by the op that produced x; the row's product
// is shaders/gemv_x8_row.wgsl's (the layouts and the integer dot are described there).
//
// One workgroup covers ROWS = 8 weight rows (workgroup id g = wg.x + wg.y * num_workgroups.x,
// rows 8g..8g+7) with 256 threads: subgroup s (of num_subgroups, any subgroup size) owns row 8g
// + s, then s + num_subgroups, ...; lane 0 writes. No workgroup memory, no barriers. On the H200
// one row per subgroup was faster than 2 or 4 rows sharing a slice's x loads (ops_matmul.rs
// `gemv_x8`; those variants were removed).

const ROWS: u32 = 8u;

@group(0) @binding(0) var<uniform> p: MatmulParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let row0 = (wg.x + wg.y * nwg.x) * ROWS;
    for (var rr = sg; rr < ROWS; rr += nsg) {
        let row = row0 + rr;
        if (row >= p.n) { break; }
        let v = gemv_x8_row(row, lane, sgs);
        if (lane == 0u) { out[p.out_off + row] = v; }
    }
}
