//! `--tensor-parallel-size`, `--tp-comm` and `--tp-devices` (docs/tensor-parallel.md): the ranks'
//! backends and collectives for the device a command names, and a model's shards loaded onto
//! them, one thread per rank. One rank (the default) is exactly the path without the flags: one
//! backend, the whole model, no collective.

use anyhow::{Context, Result, bail};
use lserve::backend::Backend;
use lserve::backend::collective::{Collective, HostCollective};
use lserve::engine::Shards;
use lserve::model::config::ModelConfig;
use lserve::model::llama::Llama;
use lserve::model::weights::{LoadOptions, WeightSource};

use super::{TpArgs, TpComm};

/// The ranks' backends in rank order and their collectives (none for one rank).
pub struct Ranks<B: Backend> {
    pub backends: Vec<B>,
    pub comms: Vec<Box<dyn Collective<B>>>,
}

impl<B: Backend> Ranks<B> {
    /// Rank 0's device, with the rank count and the collective's kind under tensor parallelism.
    pub fn describe(&self) -> String {
        let dev = self.backends[0].caps().device.clone();
        match self.comms.first() {
            Some(c) => format!("{dev}; tensor parallel x{} over {}", self.backends.len(), c.kind()),
            None => dev,
        }
    }

    /// What carries the collectives: none, host or nccl.
    pub fn comm_kind(&self) -> &'static str {
        self.comms.first().map_or("none", |c| c.kind())
    }
}

impl TpArgs {
    /// The device index of each rank: `--tp-devices`, else consecutive from `first` (one rank
    /// without `--tp-devices` keeps `first` as given, None included: the backend's default).
    fn devices(&self, first: Option<usize>) -> Result<Vec<Option<usize>>> {
        let n = self.tensor_parallel_size;
        if n == 0 {
            bail!("--tensor-parallel-size 0: must be at least 1");
        }
        match &self.tp_devices {
            Some(d) if d.len() != n => {
                bail!("--tp-devices names {} device(s) for --tensor-parallel-size {n}", d.len())
            }
            Some(d) => Ok(d.iter().map(|&i| Some(i)).collect()),
            None if n == 1 => Ok(vec![first]),
            None => Ok((0..n).map(|r| Some(first.unwrap_or(0) + r)).collect()),
        }
    }
}

fn host_group<B: Backend>(n: usize) -> Vec<Box<dyn Collective<B>>> {
    HostCollective::group(n).into_iter().map(|c| Box::new(c) as Box<dyn Collective<B>>).collect()
}

/// Ranks on backends `open`ed per device index, joined by the host collective (CPU, wgpu).
pub fn host_ranks<B: Backend>(
    a: &TpArgs,
    first: Option<usize>,
    open: impl Fn(Option<usize>) -> Result<B>,
) -> Result<Ranks<B>> {
    if a.tp_comm == TpComm::Nccl {
        bail!("--tp-comm nccl needs --device cuda (NCCL joins CUDA GPUs)");
    }
    let devices = a.devices(first)?;
    let n = devices.len();
    let hint = if a.tp_devices.is_none() && n > 1 {
        format!(" (ranks take consecutive devices; --tp-devices {} puts them all on one)", vec!["0"; n].join(","))
    } else {
        String::new()
    };
    let backends = devices
        .into_iter()
        .enumerate()
        .map(|(r, d)| open(d).with_context(|| format!("tensor-parallel rank {r}{hint}")))
        .collect::<Result<Vec<B>>>()?;
    let comms = if backends.len() > 1 { host_group(backends.len()) } else { vec![] };
    Ok(Ranks { backends, comms })
}

/// CPU ranks (no device index to choose).
pub fn cpu_ranks(a: &TpArgs) -> Result<Ranks<lserve::backend::cpu::CpuBackend>> {
    if a.tp_devices.is_some() {
        bail!("--tp-devices: CPU ranks have no device index (each is a CPU backend of its own)");
    }
    host_ranks(a, None, |_| Ok(lserve::backend::cpu::CpuBackend::new()))
}

/// CUDA ranks on their GPUs, joined by NCCL (distinct GPUs, `--tp-comm auto|nccl`) or the host
/// collective (`--tp-comm host`, or `auto` where NCCL is missing or ranks share a GPU).
#[cfg(feature = "cuda")]
pub fn cuda_ranks(a: &TpArgs, first: usize) -> Result<Ranks<lserve::backend::cuda::CudaBackend>> {
    use lserve::backend::cuda::nccl::{NcclCollective, nccl_present};
    use lserve::backend::cuda::{CudaBackend, CudaOptions};
    let devices: Vec<usize> = a.devices(Some(first))?.into_iter().map(|d| d.unwrap_or(first)).collect();
    let n = devices.len();
    let count = lserve::backend::probe::cuda_device_count();
    if n > 1
        && let Some(d) = devices.iter().find(|&&d| d >= count)
    {
        bail!(
            "--tensor-parallel-size {n}: a rank on GPU {d}, but this machine has {count} CUDA device(s) (--tp-devices 0,0 --tp-comm host runs two ranks on GPU 0)"
        );
    }
    let opts = CudaOptions { kernel_cache: Some(lserve::fetch::cache_dir().join("cuda")), ..Default::default() };
    let backends =
        devices.iter().map(|&d| CudaBackend::with_options(d, opts.clone())).collect::<lserve::Result<Vec<_>>>()?;
    if n == 1 {
        return Ok(Ranks { backends, comms: vec![] });
    }
    let distinct = devices.iter().all(|d| devices.iter().filter(|&e| e == d).count() == 1);
    let nccl = match a.tp_comm {
        TpComm::Host => false,
        TpComm::Nccl => true,
        TpComm::Auto if distinct && nccl_present() => true,
        TpComm::Auto => {
            let why = if distinct { "NCCL (libnccl.so) was not found" } else { "ranks share a GPU" };
            eprintln!("note: {why}; the ranks exchange results through host memory (--tp-comm host)");
            false
        }
    };
    let comms = if nccl {
        let refs: Vec<&CudaBackend> = backends.iter().collect();
        NcclCollective::group(&refs)?.into_iter().map(|c| Box::new(c) as Box<dyn Collective<CudaBackend>>).collect()
    } else {
        host_group(n)
    };
    Ok(Ranks { backends, comms })
}

/// Run `$body` with `$ranks` bound to the [`Ranks`] of the backend `$dev` names with the
/// tensor-parallel flags `$tp` (the body is instantiated per backend).
macro_rules! on_ranks {
    ($dev:expr, $tp:expr, $ranks:ident => $body:expr) => {
        match $dev {
            $crate::cli::run::Device::Cpu => {
                let $ranks = $crate::cli::tp::cpu_ranks($tp)?;
                $body
            }
            #[cfg(feature = "wgpu")]
            $crate::cli::run::Device::Wgpu(i) => {
                let $ranks = $crate::cli::tp::host_ranks($tp, i, |d| Ok(lserve::backend::wgpu::WgpuBackend::new(d)?))?;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::cli::run::Device::Cuda(i) => {
                let $ranks = $crate::cli::tp::cuda_ranks($tp, i)?;
                $body
            }
        }
    };
}
pub(crate) use on_ranks;

/// Each rank's model, rank order: one rank loads the whole model (`Llama::load_with`), more load
/// their shards (`Llama::load_shard`) on one thread each; `progress` sees rank 0's layers.
pub fn load<B: Backend>(
    ranks: Ranks<B>,
    cfg: &ModelConfig,
    src: &dyn WeightSource,
    opts: &LoadOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Shards<B>> {
    build(ranks, |be, comm| match comm {
        None => Llama::load_with(be, cfg, src, opts, progress),
        Some(c) => {
            let rank = c.rank();
            Llama::load_shard(be, cfg, src, opts, c, |i, n| {
                if rank == 0 {
                    progress(i, n)
                }
            })
        }
    })
}

/// Each rank's synthetic model (`Llama::synthetic`, or its shard under tensor parallelism).
pub fn synthetic<B: Backend>(
    ranks: Ranks<B>,
    cfg: &ModelConfig,
    dtype: Option<lserve::backend::DType>,
    seed: u32,
) -> Result<Shards<B>> {
    build(ranks, |be, comm| match comm {
        None => Llama::synthetic(be, cfg, dtype, seed),
        Some(c) => Llama::synthetic_shard(be, cfg, dtype, seed, c),
    })
}

/// `make` on every rank's thread with its device current.
fn build<B: Backend>(
    ranks: Ranks<B>,
    make: impl Fn(&B, Option<Box<dyn Collective<B>>>) -> lserve::Result<Llama<B>> + Sync,
) -> Result<Shards<B>> {
    let Ranks { backends, comms } = ranks;
    if comms.is_empty() {
        let be = backends.into_iter().next().expect("at least one rank");
        let model = make(&be, None)?;
        return Ok(vec![(be, model)]);
    }
    let make = &make;
    let out: Vec<lserve::Result<(B, Llama<B>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = backends
            .into_iter()
            .zip(comms)
            .map(|(be, comm)| {
                s.spawn(move || {
                    be.bind_thread()?;
                    let model = make(&be, Some(comm))?;
                    Ok((be, model))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("a rank's loading thread panicked")).collect()
    });
    let shards = out.into_iter().collect::<lserve::Result<Vec<_>>>()?;
    // The calling thread runs rank 0's steps: its device current here.
    shards[0].0.bind_thread()?;
    Ok(shards)
}
