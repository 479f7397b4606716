// select_units: a row's selection candidates, shared by page_select.wgsl, page_select_norm.wgsl
// and page_select_topk.wgsl (appended to each by shaders.rs; they bind p (PageSelectParams) and
// kv_len). Candidates are units of p.sel_unit tokens, upp of them a page-table entry: with
// sel_unit 0 the pages themselves, every one but the newest; otherwise the units below the one
// holding position kv_len - 1 (and within the row's entries). That newest page or unit is
// always read, never selected.

// Selection units a page-table entry holds.
fn units_per_page() -> u32 {
    if (p.sel_unit == 0u) { return 1u; }
    return p.page_size / p.sel_unit;
}

// The candidates of row s, whose page-table entries number n_pages.
fn row_candidates(s: u32, n_pages: u32) -> u32 {
    var n = n_pages;
    if (p.sel_unit != 0u) { n = min(n_pages * units_per_page(), (kv_len[s] + p.sel_unit - 1u) / p.sel_unit); }
    return select(0u, n - 1u, n > 0u);
}
