// decode_key_list: the key list of a split-KV decode workgroup, shared by
// sparse_decode_attention.wgsl and sparse_decode_attention_kv16.wgsl (appended to both by
// shaders.rs; they bind p, kv_len, selected, page_indptr, page_table and ring_table and define
// NONE). A retrieval head's slots are its selected units below tail_start, then units
// tail_start.. of its pages, u = sel_unit slots each (0: page_size; unit j is positions j * u .. (j + 1) * u,
// in page j * u / page_size); a streaming head's are the Lambda window through its ring (the
// kernels' headers).

fn window_lo(pos: u32) -> u32 {
    if (p.window == 0u || pos + 1u <= p.window) { return 0u; }
    return pos + 1u - p.window;
}

// What a workgroup's key list is; every field is workgroup-uniform.
struct List {
    streaming: bool,
    hi: u32,
    s: u32,
    len: u32,
    wlo: u32,
    nsel: u32,      // retrieval: selected entries used, at sel_base
    sel_base: u32,
    tail0: u32,     // first tail unit (tail_start, clamped)
    n_units: u32,   // units of the sequence's pages
    unit: u32,      // tokens a unit
    a0: u32,        // streaming: sink range a0..a0+na, then b0..
    na: u32,
    b0: u32,
}

// The list of KV head map entry hm (streaming bit and pool head) of sequence s, whose first tail
// page is `tail` (tail_start[s]) and whose selection row is `ci` (seq_slot[s] * n_ret + head):
// every field but nsel (the kernel's count of selected entries below tail0) and the streaming
// ranges (list_slots).
fn list_begin(hm: u32, s: u32, tail: u32, ci: u32) -> List {
    var ls: List;
    ls.streaming = (hm & STREAMING_BIT) != 0u;
    ls.hi = hm & ~STREAMING_BIT;
    ls.s = s;
    ls.len = kv_len[s];
    ls.wlo = window_lo(max(ls.len, 1u) - 1u);
    ls.unit = select(p.sel_unit, p.page_size, p.sel_unit == 0u);
    ls.n_units = (ls.len + p.page_size - 1u) / p.page_size * (p.page_size / ls.unit);
    ls.tail0 = min(tail, ls.n_units);
    ls.sel_base = ci * p.sel_stride;
    return ls;
}

// The number of slots of a list whose nsel is set; for a streaming head it also sets the sink
// range a0 .. a0 + na and the window start b0.
fn list_slots(ls: ptr<function, List>) -> u32 {
    let len = (*ls).len;
    if (len == 0u) { return 0u; }
    let pos = len - 1u;
    if (!(*ls).streaming) {
        return ((*ls).nsel + (*ls).n_units - (*ls).tail0) * (*ls).unit;
    }
    (*ls).a0 = (*ls).wlo;
    let a1 = min(p.sink, pos + 1u);
    (*ls).na = select(0u, a1 - (*ls).a0, a1 > (*ls).a0);
    let recent = select(0u, pos + 1u - p.local, pos + 1u > p.local);
    (*ls).b0 = max(max(p.sink, (*ls).wlo), recent);
    return (*ls).na + select(0u, pos + 1u - (*ls).b0, pos + 1u > (*ls).b0);
}

fn slot_offset(ls: List, slot: u32) -> u32 {
    let ps = p.page_size;
    if (ls.streaming) {
        var pos = ls.a0 + slot;
        if (slot >= ls.na) { pos = ls.b0 + (slot - ls.na); }
        let r = ring_index(pos, p.sink, p.ring_tokens);
        let at = ls.s * (p.ring_tokens / ps) + r / ps;
        if (at >= arrayLength(&ring_table)) { return NONE; }
        let page = ring_table[at];
        if (page >= p.num_str_pages) { return NONE; }
        return ((page * p.n_str + ls.hi) * ps + r % ps) * p.head_dim;
    }
    let e = slot / ls.unit;
    var j = ls.tail0 + (e - ls.nsel);
    if (e < ls.nsel) { j = selected[ls.sel_base + e]; }
    if (j >= ls.n_units) { return NONE; }
    let pos = j * ls.unit + slot % ls.unit;
    let at = page_indptr[ls.s] + pos / ps;
    if (pos >= ls.len || pos < ls.wlo || at >= page_indptr[ls.s + 1u] || at >= arrayLength(&page_table)) { return NONE; }
    let page = page_table[at];
    if (page >= p.num_pages) { return NONE; }
    return ((page * p.n_ret + ls.hi) * ps + pos % ps) * p.head_dim;
}
