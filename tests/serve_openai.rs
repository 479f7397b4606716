//! End to end with the real `openai` Python client: starts `lserve serve` on the default model
//! (CPU backend, a free port, an API key), runs scripts/openai_client_test.py against it (chat
//! and completions, streamed and not, errors, 32 concurrent streams equal to sequential greedy
//! outputs), and kills the server afterwards, also when the test fails.
//!
//! The client is installed from PyPI into a virtual environment under target/ on first use
//! (.ci/run installs python3-venv on machines that lack it).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server when dropped (on success, failure or panic).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with `openai` installed (created once under target/).
fn python_with_openai() -> PathBuf {
    let venv = root().join("target/openai-venv");
    let py = venv.join("bin/python");
    let has = |py: &Path| Command::new(py).args(["-c", "import openai"]).status().is_ok_and(|s| s.success());
    if py.exists() && has(&py) {
        return py;
    }
    let st = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().expect("python3 runs");
    assert!(st.success(), "python3 -m venv failed (Debian: apt-get install python3-venv)");
    let st = Command::new(&py)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai>=1.40,<3"])
        .status()
        .expect("pip runs");
    assert!(st.success() && has(&py), "pip install openai failed");
    py
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

#[test]
fn openai_python_client_end_to_end() {
    let py = python_with_openai();
    let model = common::model_path();
    let port = free_port();
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_lserve"))
            .args(["serve", "--device", "cpu", "--served-model-name", "smollm2-135m", "--api-key", "test-key"])
            .args(["--max-num-seqs", "32", "--kv-memory", "512MiB", "--port", &port.to_string(), "--model"])
            .arg(&model)
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("lserve starts"),
    );
    let t = Instant::now();
    while !healthy(port) {
        assert!(server.0.try_wait().unwrap().is_none(), "lserve serve exited");
        assert!(t.elapsed() < Duration::from_secs(180), "lserve serve did not become healthy");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = Command::new(&py)
        .arg(root().join("scripts/openai_client_test.py"))
        .args([&format!("http://127.0.0.1:{port}/v1"), "smollm2-135m", "test-key", "32"])
        .output()
        .expect("python runs");
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the openai client test failed");
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK"));
    drop(server);
}
