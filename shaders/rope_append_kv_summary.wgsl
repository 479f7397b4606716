// rope_append_kv, pass 2 of 2: refresh the min/max summary of every logical page this call wrote
// (after pass 1, so the keys are in the pool; threads of one dispatch cannot order their writes).
//
// Retrieval pool k `[page][n_ret][page_size][head_dim]`; summary
// `[page][n_ret][page_size / logical_page][2][head_dim]` (0 = min, 1 = max). Token t wrote slot
// `slots[t] = page * ps + off`, in logical page l = off / logical_page. The summary of (page, l)
// becomes the min/max over offsets l * logical_page ..= last, last = the largest offset this call
// wrote in (page, l) (positions are appended in order, so that is every token it holds).
//
// One workgroup per token t (wg.x + wg.y * num_workgroups.x). Workgroup t owns (page, l) iff no
// other token of the call wrote (page, l) at a larger offset, or at the same offset with a larger
// t; exactly one workgroup owns each touched logical page, so no two write the same summary.
// Fast path: if token t+1 wrote (page, l) at a larger offset, t does not own it (the usual case of
// a sequence's contiguous tokens); otherwise the workgroup scans all slots to decide. The owner's
// threads then each reduce channels (r, c) of the n_ret heads over the logical page's tokens.
@group(0) @binding(0) var<uniform> p: RopeAppendKvParams;
@group(0) @binding(1) var<storage, read> slots: array<u32>;
// kv_k_pool (any KV dtype, dequantized for 8-bit) comes from the KV snippet (shaders.rs).
@group(0) @binding(2) var<storage, read> k_pool: array<KV_EL>;
@group(0) @binding(3) var<storage, read_write> summary: array<f32>;

var<workgroup> beaten: atomic<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = wg.x + wg.y * nwg.x;
    if (t >= p.n_tokens) { return; }
    let ps = p.page_size;
    let lp = p.logical_page;
    let hd = p.head_dim;
    let slot = slots[t];
    if (slot >= p.num_pages * ps) { return; }
    let page = slot / ps;
    let off = slot % ps;
    let l = off / lp;
    if (t + 1u < p.n_tokens) {
        let nx = slots[t + 1u];
        if (nx / ps == page && (nx % ps) / lp == l && nx % ps > off) { return; }
    }

    if (lid.x == 0u) { atomicStore(&beaten, 0u); }
    workgroupBarrier();
    for (var u = lid.x; u < p.n_tokens; u = u + 256u) {
        let o = slots[u];
        if (u != t && o < p.num_pages * ps && o / ps == page && (o % ps) / lp == l) {
            let oo = o % ps;
            if (oo > off || (oo == off && u > t)) { atomicOr(&beaten, 1u); }
        }
    }
    workgroupBarrier();
    if (atomicLoad(&beaten) != 0u) { return; }

    let lpp = ps / lp;
    let first = l * lp;
    for (var i = lid.x; i < p.n_ret * hd; i = i + 256u) {
        let r = i / hd;
        let c = i % hd;
        let base = (page * p.n_ret + r) * ps * hd + c;
        var mn = kv_k_pool(base + first * hd);
        var mx = mn;
        for (var o = first + 1u; o <= off; o = o + 1u) {
            let x = kv_k_pool(base + o * hd);
            mn = min(mn, x);
            mx = max(mx, x);
        }
        let at = ((page * p.n_ret + r) * lpp + l) * 2u * hd + c;
        summary[at] = mn;
        summary[at + hd] = mx;
    }
}
