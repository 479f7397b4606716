//! The import rules of docs/architecture.md ("Layers"), checked over the library's source.
//!
//! Every `crate::` and `super::` path in `src/` (comments stripped, `{}` groups expanded) is
//! resolved to the module file it names (the longest module prefix that is a file). Two rules:
//! 1. Layers: a file of top-level module `m` may only name modules in `ALLOWED[m]` (and itself).
//!    The backend is the bottom: it names nothing but `error`.
//! 2. No file cycles: the graph of file -> named file has no cycle. A `mod.rs` naming its own
//!    children through relative paths (`pub use alloc::PageAllocator`) is the module tree, not an
//!    import, and is not scanned; everything else is.
//!
//! The binary (`src/main.rs`, `src/cli/`) is the top and reaches the library through `lserve::`
//! paths; it is not checked. The checker itself is tested on small snippets below, so a broken
//! scanner (one that finds nothing) fails rather than passes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules it may name. Keep in sync with docs/architecture.md.
const ALLOWED: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("backend", &["error"]),
    ("kv", &["backend", "error"]),
    ("sparse", &["kv", "backend", "error"]),
    ("model", &["sparse", "kv", "backend", "error"]),
    ("chat", &["error"]),
    ("tokenizer", &["error"]),
    ("loader", &["model", "sparse", "chat", "tokenizer", "backend", "error"]),
    ("sampling", &["backend", "error"]),
    ("fetch", &["error"]),
    ("plot", &["error"]),
    ("engine", &["model", "sparse", "kv", "backend", "sampling", "error"]),
    ("sched", &["error"]),
    ("serving", &["engine", "sched", "model", "sparse", "kv", "backend", "sampling", "tokenizer", "error"]),
    ("server", &["serving", "engine", "sched", "chat", "tokenizer", "sampling", "backend", "error"]),
    ("eval", &["engine", "model", "sparse", "kv", "backend", "sampling", "tokenizer", "chat", "plot", "error"]),
    ("bench", &["eval", "engine", "model", "sparse", "kv", "backend", "sampling", "plot", "error"]),
];

/// Source text with `//` comments (and so doc comments) removed and the contents of string and
/// char literals blanked (so braces and paths inside them are not read).
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '"' => {
                let raw = i > 0 && c[i - 1] == 'r';
                out.push('"');
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' && !raw {
                        i += 1;
                    } else if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                out.push('"');
                i += 1;
            }
            '\'' if c.get(i + 2) == Some(&'\'') || (c.get(i + 1) == Some(&'\\') && c.get(i + 3) == Some(&'\'')) => {
                // A char literal ('x' or '\x'); a lifetime has no closing quote.
                out.push_str("' '");
                i += if c[i + 1] == '\\' { 4 } else { 3 };
            }
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if c.get(i + 1) == Some(&'*') => {
                while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            x => {
                out.push(x);
                i += 1;
            }
        }
    }
    out
}

/// Byte ranges of the inline modules (`mod tests { ... }`) of stripped text: inside one, the
/// first `super` names the file's own module.
fn inline_modules(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = vec![];
    for (i, _) in text.match_indices("mod ") {
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            continue;
        }
        let mut j = i + 4;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b' ') {
            j += 1;
        }
        if b.get(j) != Some(&b'{') {
            continue; // `mod x;`
        }
        let mut depth = 0;
        for (k, &ch) in b.iter().enumerate().skip(j) {
            match ch {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((j, k));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Expand the path tree starting at `s` (just after `crate::` or the `super::` chain) into full
/// paths of identifiers: `a::{b, c::d}` -> [a::b, a::c::d]. Returns the paths.
fn expand(s: &str) -> Vec<Vec<String>> {
    fn tree(s: &[char], i: &mut usize) -> Vec<Vec<String>> {
        skip_ws(s, i);
        if *i < s.len() && s[*i] == '{' {
            *i += 1;
            let mut out = vec![];
            loop {
                skip_ws(s, i);
                if *i >= s.len() {
                    return out;
                }
                if s[*i] == '}' {
                    *i += 1;
                    return out;
                }
                if s[*i] == ',' {
                    *i += 1;
                    continue;
                }
                let before = *i;
                out.extend(tree(s, i));
                if *i == before {
                    *i += 1; // not a path (e.g. `*`): skip it
                }
            }
        }
        let start = *i;
        while *i < s.len() && (s[*i].is_alphanumeric() || s[*i] == '_') {
            *i += 1;
        }
        if *i == start {
            return vec![vec![]];
        }
        let ident: String = s[start..*i].iter().collect();
        if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
            *i += 2;
            let subs = tree(s, i);
            return subs
                .into_iter()
                .map(|mut p| {
                    p.insert(0, ident.clone());
                    p
                })
                .collect();
        }
        // `X as Y`: the path ends at X.
        vec![vec![ident]]
    }
    fn skip_ws(s: &[char], i: &mut usize) {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
    }
    let chars: Vec<char> = s.chars().collect();
    tree(&chars, &mut 0)
}

/// Every module path a file's text names: `crate::` paths as they are, `super::` paths made
/// absolute from `here` (the file's module path).
fn named_paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let text = strip(text);
    let inline = inline_modules(&text);
    let mut out = vec![];
    let bytes = text.as_bytes();
    let word_start =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b'$');
    for (i, _) in text.match_indices("crate::") {
        if word_start(i) {
            out.extend(expand(&text[i + 7..]));
        }
    }
    for (i, _) in text.match_indices("super::") {
        if !word_start(i) || (i >= 7 && text[..i].ends_with("super::")) {
            continue; // counted from the first `super::` of a chain
        }
        let mut rest = &text[i..];
        // `super` is the parent of the module the text is in: the file's (a mod.rs is its
        // directory's module), or one of its inline modules (whose parent is the file).
        let depth = inline.iter().filter(|&&(a, b)| a < i && i < b).count();
        let mut base: Vec<String> = here.to_vec();
        base.extend((0..depth).map(|d| format!("<inline {d}>")));
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        for p in expand(rest) {
            let mut full = base.clone();
            full.extend(p);
            out.push(full);
        }
    }
    out
}

/// Module path of every library file (`src/a/b.rs` -> [a, b], `src/a/mod.rs` -> [a]).
fn library_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = vec![];
    walk(src, &mut files);
    let mut map = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let last = parts.pop().unwrap();
        if parts.first().is_some_and(|p| p == "cli") || last == "main.rs" {
            continue; // the binary
        }
        match last.as_str() {
            "mod.rs" | "lib.rs" => {}
            _ => parts.push(last.trim_end_matches(".rs").to_string()),
        }
        map.insert(parts, f);
    }
    map
}

/// The module file a path names: its longest prefix that is a file.
fn resolve<'a>(files: &'a BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<&'a Vec<String>> {
    (1..=path.len()).rev().find_map(|n| files.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// (file module, named file module) edges of the library.
fn edges(files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<(Vec<String>, Vec<String>)> {
    let mut out = BTreeSet::new();
    for (module, path) in files {
        let text = std::fs::read_to_string(path).unwrap();
        for p in named_paths(&text, module) {
            if let Some(to) = resolve(files, &p)
                && to != module
            {
                out.insert((module.clone(), to.clone()));
            }
        }
    }
    out
}

fn show(m: &[String]) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// A cycle of the directed graph, if any (depth-first search).
fn find_cycle(edges: &BTreeSet<(Vec<String>, Vec<String>)>) -> Option<Vec<Vec<String>>> {
    let mut adj: BTreeMap<&Vec<String>, Vec<&Vec<String>>> = BTreeMap::new();
    for (a, b) in edges {
        adj.entry(a).or_default().push(b);
    }
    fn dfs<'a>(
        n: &'a Vec<String>,
        adj: &BTreeMap<&'a Vec<String>, Vec<&'a Vec<String>>>,
        state: &mut BTreeMap<&'a Vec<String>, u8>,
        stack: &mut Vec<&'a Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(n, 1);
        stack.push(n);
        for &m in adj.get(n).map(|v| v.as_slice()).unwrap_or(&[]) {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| *x == m).unwrap();
                    return Some(stack[at..].iter().map(|x| (*x).clone()).chain([m.clone()]).collect());
                }
                0 => {
                    if let Some(c) = dfs(m, adj, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for &n in adj.keys() {
        if state.get(n).copied().unwrap_or(0) == 0
            && let Some(c) = dfs(n, &adj, &mut state, &mut vec![])
        {
            return Some(c);
        }
    }
    None
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let files = library_files(&src_dir());
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let e = edges(&files);
    assert!(e.len() > 100, "the scanner found only {} imports; it is broken", e.len());
    let mut bad = vec![];
    for (from, to) in &e {
        let (Some(a), Some(b)) = (from.first(), to.first()) else { continue };
        if a == b {
            continue;
        }
        match allowed.get(a.as_str()) {
            None => bad.push(format!("module `{a}` has no row in ALLOWED (tests/layers.rs, docs/architecture.md)")),
            Some(ok) if !ok.contains(&b.as_str()) => bad.push(format!("{} imports {}", show(from), show(to))),
            _ => {}
        }
    }
    // Every top-level module of the library has a row.
    for m in files.keys().filter_map(|m| m.first()) {
        if !allowed.contains_key(m.as_str()) {
            bad.push(format!("module `{m}` has no row in ALLOWED"));
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "layer violations:\n  {}", bad.join("\n  "));
}

#[test]
fn no_file_imports_form_a_cycle() {
    let files = library_files(&src_dir());
    if let Some(c) = find_cycle(&edges(&files)) {
        let names: Vec<String> = c.iter().map(|m| show(m)).collect();
        panic!("import cycle: {}", names.join(" -> "));
    }
}

#[test]
fn the_scanner_reads_groups_super_chains_and_skips_comments() {
    let here: Vec<String> = vec!["model".into(), "llama".into()];
    let text = "use crate::backend::{Backend, reference::{rope::X, sample}};\n\
                // use crate::engine::Engine;\n\
                /// see [`crate::sched::Plan`]\n\
                let s = \"crate::server\";\n\
                use super::step::StepMeta;\n\
                fn f() { super::super::kv::ring_index(1, 2, 3); $crate::x::y }\n\
                let c = '{'; let l: &'static str = r\"a\\\";\n\
                #[cfg(test)] mod tests { use super::*; use super::super::pool::P; }\n";
    let got: BTreeSet<String> = named_paths(text, &here).iter().map(|p| p.join("::")).collect();
    let want: BTreeSet<String> = [
        "backend::Backend",
        "backend::reference::rope::X",
        "backend::reference::sample",
        "model::step::StepMeta",
        "kv::ring_index",
        "model::llama",
        "model::pool::P",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
    let mut edges = BTreeSet::new();
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    edges.insert((m("model::llama"), m("model::step")));
    assert!(find_cycle(&edges).is_none());
    edges.insert((m("model::step"), m("model::batch")));
    edges.insert((m("model::batch"), m("model::llama")));
    assert_eq!(find_cycle(&edges).map(|c| c.len()), Some(4));
}
