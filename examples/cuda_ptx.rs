//! Prints the PTX NVRTC makes of one kernel module, for reading it or for `ptxas -v` (registers,
//! spills, shared memory) on a machine without a GPU:
//! `cargo run --release --example cuda_ptx -- prefill_attention compute_90a > /tmp/p.ptx`
//! then `ptxas -v --gpu-name sm_90a /tmp/p.ptx -o /dev/null` (compute_90a is what an sm_90 device
//! gets; plain compute_90 leaves the wgmma kernels empty). Needs libnvrtc on LD_LIBRARY_PATH.

use lserve::backend::cuda::kernels;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(stem), arch) = (args.first(), args.get(1).map(String::as_str).unwrap_or("compute_90a")) else {
        eprintln!("usage: cuda_ptx <module stem, e.g. prefill_attention> [compute_80|compute_90|compute_90a]");
        std::process::exit(2);
    };
    let arch: &'static str = Box::leak(arch.to_string().into_boxed_str());
    match kernels::nvrtc_version().and_then(|_| kernels::compile_one(stem, arch)) {
        Ok(ptx) => print!("{ptx}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
