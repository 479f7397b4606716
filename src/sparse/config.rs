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
//! [cache]
//! physical_page = 64
//! logical_page = 16
//! kv_dtype = "auto"         # auto (the backend's first choice) | f32 | f16 | bf16
//! kv_memory = "2GiB"        # bytes or a fraction of device memory ("0.5"); default: what the request needs
//! ```
//! Unknown keys are errors (a typo must not silently fall back to a default).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::backend::DType;
use crate::error::{Error, Result};

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
    /// Always select each retrieval head's first page (the attention sink) at decode, as one of
    /// the budget's pages (`Engine::pin_sink_page`; docs/sparse-attention.md, measured there).
    pub pin_sink_page: bool,
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
            pin_sink_page: false,
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
        if s.selector_interval == 0 {
            return bad("selector_interval must be at least 1".into());
        }
        if s.local_tokens == 0 {
            return bad("local_tokens must be at least 1".into());
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
        if s.enabled && s.streaming_ratio > 0.0 && s.head_pattern.is_none() {
            return bad(format!(
                "streaming_ratio {} needs a head pattern: run `lserve calibrate --out FILE` and pass --head-pattern FILE \
                 (or set --streaming-ratio 0)",
                s.streaming_ratio
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
            other => return Err(Error::Config(format!("kv_dtype `{other}`: expected auto, f32, f16 or bf16"))),
        }))
    }

    pub fn kv_memory(&self) -> Result<Option<KvMemory>> {
        self.cache.kv_memory.as_deref().map(parse_memory).transpose()
    }
}

/// "2GiB", "512MiB", "1.5GB", "1000000" (bytes) or a fraction "0.5".
pub fn parse_memory(s: &str) -> Result<KvMemory> {
    let t = s.trim();
    let bad = || Error::Config(format!("kv memory `{s}`: expected bytes like 2GiB / 512MiB or a fraction like 0.5"));
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v <= 0.0 {
        return Err(bad());
    }
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" if v <= 1.0 => return Ok(KvMemory::Fraction(v)),
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    Ok(KvMemory::Bytes((v * mult) as u64))
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
    }

    #[test]
    fn streaming_without_pattern_says_calibrate() {
        let c: Config = toml::from_str("[sparse]\nenabled = true\nstreaming_ratio = 0.5\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("lserve calibrate"));
    }

    #[test]
    fn bad_cache_geometry() {
        let c: Config = toml::from_str("[cache]\nphysical_page = 64\nlogical_page = 24\n").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("[cache]\nphysical_page = 8\n").unwrap();
        assert!(c.validate().is_err());
    }

    #[test]
    fn memory_strings() {
        assert_eq!(parse_memory("2GiB").unwrap(), KvMemory::Bytes(2 << 30));
        assert_eq!(parse_memory("512 MiB").unwrap(), KvMemory::Bytes(512 << 20));
        assert_eq!(parse_memory("0.25").unwrap(), KvMemory::Fraction(0.25));
        assert_eq!(parse_memory("1000").unwrap(), KvMemory::Bytes(1000));
        assert!(parse_memory("-1").is_err() && parse_memory("lots").is_err() && parse_memory("3TiBs").is_err());
    }
}
