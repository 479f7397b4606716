//! The one TOML configuration file (`--config`), DESIGN.md §5, and its command-line overrides.
//!
//! ```toml
//! [sparse]
//! enabled = false           # --sparse on|off
//! streaming_ratio = 0.5     # fraction of KV heads that stream (needs a head pattern)
//! head_pattern = "smollm2.toml"   # lserve calibrate output or DuoAttention full_attention_heads.tsv
//! sink_tokens = 128
//! local_tokens = 256
//! token_budget = 4096       # retrieval heads: tokens read per decode step
//! selector_interval = 4     # re-select every C decode steps
//! dense_below = 4096        # contexts up to this length skip page selection
//! dense_layers = []         # layers kept fully dense
//! pin_sink_page = false     # always select the first page (the attention sink)
//! prefill_budget = 0        # block-sparse prefill: tokens each query block of a retrieval head
//!                           # reads besides page 0 and its tail (0 = off, dense prefill)
//! prefill_dense_below = 32768  # query blocks starting before this position attend densely
//! prefill_estimate = "antidiagonal"  # antidiagonal | mean_bound: how a block's pages are ranked
//! page_rank = "max"         # max | head_norm: how page_select ranks pages
//! bound_shrink = 0.0        # 0..1: logical pages' min/max boxes shrunk toward their centres
//!                           # before scoring (0 = the Quest bound; docs/sparse-attention.md)
//! select_unit = "physical"  # physical | logical: decode selects (and reads) whole physical
//!                           # pages, or logical pages inside them (docs/sparse-attention.md)
//! [cache]
//! physical_page = 64
//! logical_page = 16
//! kv_dtype = "auto"         # auto (the backend's first choice) | f32 | f16 | bf16 | int8 | fp8 (e4m3)
//! kv_memory = "2GiB"        # a size (2GiB, 512MiB; plain = bytes) or a share of device memory ("50%");
//!                           # default: what the request needs
//! ```
//! Unknown keys are errors (a typo must not silently fall back to a default).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::backend::DType;
use crate::error::{Error, Result};

/// Most tokens `sink_tokens + local_tokens` and `token_budget` may name: the model config's
/// `MAX_POSITIONS` (which this layer does not import; model::config's tests check they agree).
pub const MAX_TOKENS: usize = 1 << 24;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SparseConfig {
    pub enabled: bool,
    pub streaming_ratio: f32,
    pub head_pattern: Option<PathBuf>,
    pub sink_tokens: usize,
    pub local_tokens: usize,
    pub token_budget: usize,
    pub selector_interval: usize,
    pub dense_below: usize,
    pub dense_layers: Vec<usize>,
    /// A head pattern already in memory (a shipped one, found by model identity); used when
    /// `head_pattern` names no file. Not a TOML key.
    #[serde(skip)]
    pub pattern: Option<crate::sparse::HeadPattern>,
    /// Always select each retrieval head's first page (the attention sink) at decode, as one of
    /// the budget's pages (`PageSelectParams::pin_first`; docs/sparse-attention.md, measured there).
    pub pin_sink_page: bool,
    /// Block-sparse prefill (docs/sparse-attention.md): each 128-row query block of a retrieval
    /// head at or past `prefill_dense_below` reads page 0, the `prefill_budget / physical_page`
    /// pages `prefill_estimate` ranks best, and its tail. 0 = off.
    pub prefill_budget: usize,
    pub prefill_dense_below: usize,
    /// How block-sparse prefill ranks a block's candidate pages.
    pub prefill_estimate: PrefillEstimate,
    /// How `page_select` ranks pages (docs/sparse-attention.md "Page selection").
    pub page_rank: PageRank,
    /// In [0, 1]: each logical page's min/max box shrinks toward its centre by this fraction
    /// before decode selection scores it (`PageSelectParams::bound_shrink`; 0 = the Quest
    /// bound; block-sparse prefill keeps the bound, as it keeps `page_rank` max).
    pub bound_shrink: f32,
    /// What decode page selection keeps and attention reads: whole physical pages, or logical
    /// pages (`PageSelectParams::sel_unit`); the budget counts tokens either way.
    pub select_unit: SelectUnit,
}

/// The unit of decode page selection (docs/sparse-attention.md "Selection unit").
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SelectUnit {
    /// Physical pages, ranked by the max of their logical pages (LServe's hierarchical paging).
    #[default]
    Physical,
    /// Logical pages: each scored and kept on its own, attention reading only those tokens of
    /// their physical pages.
    Logical,
}

impl SelectUnit {
    pub fn name(self) -> &'static str {
        match self {
            SelectUnit::Physical => "physical",
            SelectUnit::Logical => "logical",
        }
    }

    /// The unit in tokens for a cache of these pages.
    pub fn tokens(self, cache: &CacheConfig) -> usize {
        match self {
            SelectUnit::Physical => cache.physical_page,
            SelectUnit::Logical => cache.logical_page,
        }
    }
}

/// How `page_select` ranks physical pages from their logical pages' Quest bounds.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PageRank {
    /// Max over the GQA group's query heads and the page's logical pages.
    #[default]
    Max,
    /// Per query head a softmax over the candidate pages of `scale * max_l bound`, summed over
    /// the group: every head's estimate counts equally, whatever its score scale.
    HeadNorm,
}

/// Block-sparse prefill's block-importance estimate (docs/sparse-attention.md, "Block-sparse
/// prefill": picked by measurement).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PrefillEstimate {
    /// XAttention's antidiagonal scoring at stride 8 (`antidiagonal_score` + `page_top_k`).
    #[default]
    Antidiagonal,
    /// The Quest bound of the block's mean query (`mean_rows` + `page_select`).
    MeanBound,
}

impl PrefillEstimate {
    pub fn name(self) -> &'static str {
        match self {
            PrefillEstimate::Antidiagonal => "antidiagonal",
            PrefillEstimate::MeanBound => "mean_bound",
        }
    }
}

impl PageRank {
    /// The `PageSelectParams::rank` code.
    pub fn code(self) -> u32 {
        match self {
            PageRank::Max => crate::backend::PAGE_RANK_MAX,
            PageRank::HeadNorm => crate::backend::PAGE_RANK_HEAD_NORM,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PageRank::Max => "max",
            PageRank::HeadNorm => "head_norm",
        }
    }
}

impl Default for SparseConfig {
    fn default() -> Self {
        SparseConfig {
            enabled: false,
            streaming_ratio: 0.5,
            head_pattern: None,
            sink_tokens: 128,
            local_tokens: 256,
            token_budget: 4096,
            selector_interval: 4,
            dense_below: 4096,
            dense_layers: vec![],
            pattern: None,
            pin_sink_page: false,
            prefill_budget: 0,
            prefill_dense_below: 32768,
            prefill_estimate: PrefillEstimate::Antidiagonal,
            page_rank: PageRank::Max,
            bound_shrink: 0.0,
            select_unit: SelectUnit::Physical,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub physical_page: usize,
    pub logical_page: usize,
    pub kv_dtype: String,
    pub kv_memory: Option<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { physical_page: 64, logical_page: 16, kv_dtype: "auto".into(), kv_memory: None }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub sparse: SparseConfig,
    pub cache: CacheConfig,
}

/// How much memory the KV cache may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvMemory {
    Bytes(u64),
    /// Fraction of the device's memory.
    Fraction(f64),
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let cfg: Config = toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        // Relative head-pattern paths are relative to the config file.
        let mut cfg = cfg;
        if let Some(p) = &cfg.sparse.head_pattern
            && p.is_relative()
            && let Some(dir) = path.parent()
        {
            cfg.sparse.head_pattern = Some(dir.join(p));
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        let s = &self.sparse;
        let bad = |m: String| Err(Error::Config(m));
        if !(0.0..=1.0).contains(&s.streaming_ratio) {
            return bad(format!("streaming_ratio {} must be between 0 and 1", s.streaming_ratio));
        }
        if !(0.0..=1.0).contains(&s.bound_shrink) {
            return bad(format!("bound_shrink {} must be between 0 and 1", s.bound_shrink));
        }
        if s.selector_interval == 0 {
            return bad("selector_interval must be at least 1".into());
        }
        if s.local_tokens == 0 {
            return bad("local_tokens must be at least 1".into());
        }
        // Streaming rings and selection lists are sized from these: no more than a context holds.
        if s.sink_tokens.checked_add(s.local_tokens).is_none_or(|t| t > MAX_TOKENS) {
            return bad(format!(
                "sink_tokens {} + local_tokens {} must not exceed {MAX_TOKENS} positions",
                s.sink_tokens, s.local_tokens
            ));
        }
        if s.token_budget > MAX_TOKENS {
            return bad(format!("token_budget {} must not exceed {MAX_TOKENS} positions", s.token_budget));
        }
        let c = &self.cache;
        if !(16..=1024).contains(&c.physical_page) {
            return bad(format!("physical_page {} must be between 16 and 1024", c.physical_page));
        }
        if c.logical_page == 0 || !c.physical_page.is_multiple_of(c.logical_page) {
            return bad(format!("logical_page {} must divide physical_page {}", c.logical_page, c.physical_page));
        }
        self.kv_dtype()?;
        self.kv_memory()?;
        // Below one physical page no page but the newest could ever be selected.
        if s.enabled && s.token_budget < c.physical_page {
            return bad(format!(
                "token_budget {} is below one physical page ({} tokens): retrieval heads would read nothing but the newest page",
                s.token_budget, c.physical_page
            ));
        }
        // The prefill kernels hold a block's list in shared memory (1024 entries).
        if s.prefill_budget > 0 && !(2 * c.physical_page..=1000 * c.physical_page).contains(&s.prefill_budget) {
            return bad(format!(
                "prefill_budget {} must be 0 (off) or between two and 1000 physical pages ({} and {} tokens)",
                s.prefill_budget,
                2 * c.physical_page,
                1000 * c.physical_page
            ));
        }
        let stride = crate::backend::ANTIDIAGONAL_STRIDE;
        if s.prefill_budget > 0
            && s.prefill_estimate == PrefillEstimate::Antidiagonal
            && !c.physical_page.is_multiple_of(stride)
        {
            return bad(format!(
                "prefill_estimate antidiagonal needs a physical_page that is a multiple of {stride} (it is {}); use mean_bound",
                c.physical_page
            ));
        }
        Ok(())
    }

    /// None = the backend's first choice.
    pub fn kv_dtype(&self) -> Result<Option<DType>> {
        Ok(Some(match self.cache.kv_dtype.as_str() {
            "auto" => return Ok(None),
            "f32" => DType::F32,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "int8" => DType::I8,
            "fp8" => DType::F8E4M3,
            other => {
                return Err(Error::Config(format!("kv_dtype `{other}`: expected auto, f32, f16, bf16, int8 or fp8")));
            }
        }))
    }

    pub fn kv_memory(&self) -> Result<Option<KvMemory>> {
        self.cache.kv_memory.as_deref().map(parse_memory).transpose()
    }
}

/// A kv_memory value: a size (see [`parse_size`]) or a share of device memory, "50%".
pub fn parse_memory(s: &str) -> Result<KvMemory> {
    parse_size(s, true).map_err(|e| Error::Config(format!("[cache] kv_memory `{s}`: {e}")))
}

/// How every size in lserve is written (flags and config alike): a number with a unit — `B`,
/// decimal `KB`/`MB`/`GB`/`TB` (also `K`/`M`/`G`/`T`), binary `KiB`/`MiB`/`GiB`/`TiB`, any case —
/// where a plain number is a count of bytes (so `1` is one byte and must be whole), and, where
/// `share` allows it, a percentage of device memory (`50%`, above 0 and at most 100). The error
/// (no flag name: the caller adds it) says what was expected.
pub fn parse_size(s: &str, share: bool) -> std::result::Result<KvMemory, String> {
    let t = s.trim();
    let expected = if share {
        "expected a size such as 2GiB, 512MiB or 1000000 (bytes), or a share of device memory such as 50%"
    } else {
        "expected a size such as 4MiB, 64KiB or 1000000 (bytes)"
    };
    if t.starts_with('-') {
        return Err("must not be negative".into());
    }
    if let Some(p) = t.strip_suffix('%') {
        if !share {
            return Err(format!("a percentage is not a size here; {expected}"));
        }
        let v: f64 = p.trim().parse().map_err(|_| expected.to_string())?;
        if !(v.is_finite() && v > 0.0 && v <= 100.0) {
            return Err(format!("a share of device memory must be above 0% and at most 100%, got {p}%"));
        }
        return Ok(KvMemory::Fraction(v / 100.0));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return Err(expected.to_string());
    }
    let v: f64 = num.parse().map_err(|_| expected.to_string())?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => (1u64 << 10) as f64,
        "mib" => (1u64 << 20) as f64,
        "gib" => (1u64 << 30) as f64,
        "tib" => (1u64 << 40) as f64,
        _ => return Err(format!("unknown unit `{}`; {expected}", unit.trim())),
    };
    if mult == 1.0 && num.contains('.') {
        let hint = if share { " or a share of device memory as a percentage (50%)" } else { "" };
        return Err(format!("a plain number counts bytes and must be whole; add a unit (e.g. {num}GiB){hint}"));
    }
    let bytes = v * mult;
    if bytes < 1.0 {
        return Err("must be at least 1 byte".into());
    }
    if bytes >= u64::MAX as f64 {
        return Err("too large".into());
    }
    Ok(KvMemory::Bytes(bytes as u64))
}

/// A size in bytes for the flag `--{flag}` (no percentage), the error naming the flag.
pub fn parse_flag_bytes(flag: &str, s: &str) -> Result<u64> {
    match parse_size(s, false) {
        Ok(KvMemory::Bytes(b)) => Ok(b),
        Ok(KvMemory::Fraction(_)) => Err(Error::InvalidArgument(format!("--{flag} {s}: not a size"))),
        Err(e) => Err(Error::InvalidArgument(format!("--{flag} {s}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_parsing() {
        let c: Config =
            toml::from_str("[sparse]\nenabled = true\nstreaming_ratio = 0.0\ntoken_budget = 512\n").unwrap();
        assert_eq!(c.sparse.token_budget, 512);
        assert_eq!(c.sparse.sink_tokens, 128);
        assert_eq!(c.cache.physical_page, 64);
        c.validate().unwrap();
        assert!(toml::from_str::<Config>("[sparse]\ntoken_budgte = 5\n").is_err(), "typos are errors");
        assert_eq!(c.sparse.page_rank, PageRank::Max);
        let c: Config = toml::from_str("[sparse]\npage_rank = \"head_norm\"\n").unwrap();
        assert_eq!(c.sparse.page_rank, PageRank::HeadNorm);
        let e = toml::from_str::<Config>("[sparse]\npage_rank = \"lse\"\n").unwrap_err().to_string();
        assert!(e.contains("head_norm"), "{e}");
        assert_eq!(c.sparse.prefill_estimate, PrefillEstimate::Antidiagonal);
        let c: Config = toml::from_str("[sparse]\nprefill_estimate = \"mean_bound\"\n").unwrap();
        assert_eq!(c.sparse.prefill_estimate, PrefillEstimate::MeanBound);
        let e = toml::from_str::<Config>("[sparse]\nprefill_estimate = \"quest\"\n").unwrap_err().to_string();
        assert!(e.contains("antidiagonal"), "{e}");
        // The antidiagonal's key groups of 8 must not straddle pages.
        let t = "[sparse]\nenabled = true\nprefill_budget = 80\n[cache]\nphysical_page = 20\nlogical_page = 4\n";
        let e = toml::from_str::<Config>(t).unwrap().validate().unwrap_err().to_string();
        assert!(e.contains("multiple of 8"), "{e}");
    }

    #[test]
    fn select_unit_names_physical_or_logical_pages() {
        let c = Config::default();
        assert_eq!(c.sparse.select_unit, SelectUnit::Physical, "LServe's physical pages by default");
        assert_eq!(c.sparse.select_unit.tokens(&c.cache), 64);
        let t = "[sparse]\nselect_unit = \"logical\"\n[cache]\nlogical_page = 8\n";
        let c: Config = toml::from_str(t).unwrap();
        c.validate().unwrap();
        assert_eq!((c.sparse.select_unit, c.sparse.select_unit.tokens(&c.cache)), (SelectUnit::Logical, 8));
        let e = toml::from_str::<Config>("[sparse]\nselect_unit = \"token\"\n").unwrap_err().to_string();
        assert!(e.contains("logical"), "{e}");
    }

    #[test]
    fn bound_shrink_lies_in_zero_to_one() {
        assert_eq!(Config::default().sparse.bound_shrink, 0.0, "the Quest bound by default");
        let c: Config = toml::from_str("[sparse]\nbound_shrink = 0.75\n").unwrap();
        assert_eq!(c.sparse.bound_shrink, 0.75);
        c.validate().unwrap();
        for bad in ["-0.1", "1.5", "nan", "inf"] {
            let c: Config = toml::from_str(&format!("[sparse]\nbound_shrink = {bad}\n")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("bound_shrink"), "{bad}: {e}");
        }
    }

    #[test]
    fn token_budget_must_hold_a_page_when_sparse() {
        let c: Config = toml::from_str("[sparse]\nenabled = true\ntoken_budget = 0\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("token_budget 0"));
        let c: Config = toml::from_str("[sparse]\nenabled = true\ntoken_budget = 64\n").unwrap();
        c.validate().unwrap();
        let c: Config = toml::from_str("[sparse]\nenabled = false\ntoken_budget = 0\n").unwrap();
        c.validate().unwrap();
    }

    #[test]
    fn bad_cache_geometry() {
        let c: Config = toml::from_str("[cache]\nphysical_page = 64\nlogical_page = 24\n").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("[cache]\nphysical_page = 8\n").unwrap();
        assert!(c.validate().is_err());
    }

    #[test]
    fn kv_dtypes() {
        for (name, want) in [("int8", Some(DType::I8)), ("fp8", Some(DType::F8E4M3)), ("bf16", Some(DType::BF16))] {
            let c: Config = toml::from_str(&format!("[cache]\nkv_dtype = \"{name}\"\n")).unwrap();
            assert_eq!(c.kv_dtype().unwrap(), want);
            assert_eq!(want.unwrap().kv_name(), name);
        }
        let c: Config = toml::from_str("[cache]\nkv_dtype = \"int4\"\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("int8 or fp8"));
    }

    #[test]
    fn memory_strings() {
        assert_eq!(parse_memory("2GiB").unwrap(), KvMemory::Bytes(2 << 30));
        assert_eq!(parse_memory("512 MiB").unwrap(), KvMemory::Bytes(512 << 20));
        assert_eq!(parse_memory("1.5gb").unwrap(), KvMemory::Bytes(1_500_000_000));
        assert_eq!(parse_memory("25%").unwrap(), KvMemory::Fraction(0.25));
        assert_eq!(parse_memory("100%").unwrap(), KvMemory::Fraction(1.0));
        assert_eq!(parse_memory("1000").unwrap(), KvMemory::Bytes(1000));
        // One byte is one byte, not "all of memory"; a bare fraction is refused with a hint.
        assert_eq!(parse_memory("1").unwrap(), KvMemory::Bytes(1));
        let e = parse_memory("1.5").unwrap_err().to_string();
        assert!(e.contains("must be whole") && e.contains("50%") && e.contains("kv_memory"), "{e}");
        assert!(parse_memory("-1").unwrap_err().to_string().contains("negative"));
        for bad in ["lots", "3TiBs", "0", "0%", "101%", "", "GiB", ".5GiB", "1e3", "nan", "1..2MiB", "99999999999TiB"] {
            assert!(parse_memory(bad).is_err(), "{bad:?} parsed");
        }
        let e = parse_flag_bytes("max-body", "50%").unwrap_err().to_string();
        assert!(e.contains("--max-body") && !e.contains("kv"), "{e}");
        assert_eq!(parse_flag_bytes("swap-space", "4GiB").unwrap(), 4 << 30);
    }
}
