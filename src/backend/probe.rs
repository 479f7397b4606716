//! `lserve devices`: which backends this binary was built with and which adapters/GPUs each one
//! can see. Probing never panics: a missing Vulkan loader or CUDA driver is reported as such.

/// One line per backend: its name and what it found (or why it found nothing).
pub fn probe_all() -> Vec<(String, Vec<String>)> {
    let mut out = vec![("cpu".to_string(), vec![super::cpu::CpuBackend::new().caps_device()])];
    #[cfg(feature = "wgpu")]
    out.push(("wgpu".into(), probe_wgpu()));
    #[cfg(not(feature = "wgpu"))]
    out.push(("wgpu".into(), vec!["not compiled in (build with --features wgpu)".into()]));
    #[cfg(feature = "cuda")]
    out.push(("cuda".into(), probe_cuda()));
    #[cfg(not(feature = "cuda"))]
    out.push(("cuda".into(), vec!["not compiled in (build with --features cuda)".into()]));
    out
}

impl super::cpu::CpuBackend {
    fn caps_device(&self) -> String {
        use super::Backend;
        self.caps().device.clone()
    }
}

/// Keep the Vulkan loader's probing quiet on headless machines. wgpu enables every surface
/// extension the driver offers (VK_KHR_wayland_surface among them) even for compute; Mesa's
/// implicit `VK_LAYER_MESA_device_select` layer then connects to a Wayland display to find the
/// default GPU while adapters are enumerated, and libwayland prints `error: XDG_RUNTIME_DIR is
/// invalid or not set` when there is none. lserve enumerates and chooses adapters itself, so it
/// disables that layer the way its manifest provides (`NODEVICE_SELECT=1`, unless the user set
/// it). Call it before any thread starts (the binary does, first thing in `main`): changing the
/// environment is only sound while no other thread reads it.
pub fn quiet_vulkan_env() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: called at the start of `main`, before any other thread exists.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}

/// The wgpu instance every probe and backend uses (compute only: no display handle): one per
/// process, made on first use (from the environment's WGPU_* settings then). NVIDIA's Vulkan
/// driver stopped enumerating adapters after ~30 instances in one process (docs/backends.md).
#[cfg(feature = "wgpu")]
pub fn wgpu_instance() -> wgpu::Instance {
    static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
    INSTANCE
        .get_or_init(|| wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env()))
        .clone()
}

#[cfg(feature = "wgpu")]
fn probe_wgpu() -> Vec<String> {
    let instance = wgpu_instance();
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    if adapters.is_empty() {
        return vec!["no adapter found (is a Vulkan/Metal/DX12 driver installed?)".into()];
    }
    adapters
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let info = a.get_info();
            let lim = a.limits();
            let f = a.features();
            let mut feats = vec![];
            if f.contains(wgpu::Features::SHADER_F16) {
                feats.push("shader-f16");
            }
            if f.contains(wgpu::Features::SUBGROUP) {
                feats.push("subgroup");
            }
            if f.contains(wgpu::Features::TIMESTAMP_QUERY) {
                feats.push("timestamps");
            }
            // The cooperative-matrix configuration the matmul_coop GEMMs use (the backend also
            // needs subgroups of 32: src/backend/wgpu/context.rs coop_supported).
            let coop = f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
            if coop && crate::backend::wgpu::has_coop_f16_f32(&a.cooperative_matrix_properties()) {
                feats.push("coop-matrix f16xf16->f32 16x16x16");
            } else if coop {
                feats.push("coop-matrix (no 16x16x16 f16->f32: unused)");
            }
            format!(
                "wgpu:{i}  {} ({:?}, {:?}, driver {} {}), max storage binding {} MiB, features [{}]",
                info.name,
                info.backend,
                info.device_type,
                info.driver,
                info.driver_info,
                lim.max_storage_buffer_binding_size >> 20,
                feats.join(", ")
            )
        })
        .collect()
}

#[cfg(feature = "cuda")]
fn probe_cuda() -> Vec<String> {
    use cudarc::driver::{CudaContext, sys};
    // SAFETY: only checks whether the shared library can be loaded.
    if !unsafe { sys::is_culib_present() } {
        return vec!["no CUDA driver library (libcuda.so) found".into()];
    }
    let count = match CudaContext::device_count() {
        Ok(n) => n,
        Err(e) => return vec![format!("CUDA driver present but unusable: {e}")],
    };
    if count == 0 {
        return vec!["CUDA driver present, no GPU".into()];
    }
    (0..count as usize)
        .map(|i| match CudaContext::new(i) {
            Ok(ctx) => {
                let name = ctx.name().unwrap_or_default();
                let (ma, mi) = ctx.compute_capability().unwrap_or((0, 0));
                let mem = ctx.total_mem().unwrap_or(0) >> 20;
                format!("cuda:{i}  {name} (sm_{ma}{mi}, {mem} MiB)")
            }
            Err(e) => format!("cuda:{i}  error: {e}"),
        })
        .collect()
}

/// CUDA devices usable through the driver (0 without a driver; never panics).
#[cfg(feature = "cuda")]
pub fn cuda_device_count() -> usize {
    if !super::cuda::driver_present() {
        return 0;
    }
    cudarc::driver::CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// Index of the first wgpu adapter that is real hardware (not a CPU emulation), if any.
#[cfg(feature = "wgpu")]
pub fn first_gpu_adapter() -> Option<usize> {
    let instance = wgpu_instance();
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    adapters.iter().position(|a| a.get_info().device_type != wgpu::DeviceType::Cpu)
}
