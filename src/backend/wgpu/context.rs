//! wgpu plumbing: adapter and device, the pipeline cache, the parameter arena, command
//! recording and read-back.
//!
//! Invariants: every op records into one open command encoder (one compute pass per dispatch);
//! nothing is submitted until a read-back, `sync`, or the arena filling up, so a decode step is
//! a handful of submissions with no CPU round trip between ops. Each dispatch's parameters get
//! their own 256-byte slot of the uniform arena, written with `queue.write_buffer` (applied at the
//! next submit, before its commands), and slots are reused only after a submit.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::DType;
use crate::error::{Error, Result};

use super::shaders;

pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::Backend { backend: "wgpu", msg: msg.into() }
}

const ARENA_SLOTS: u64 = 512;

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    slot_size: u64,
    arena: wgpu::Buffer,
    state: RefCell<State>,
}

struct State {
    encoder: Option<wgpu::CommandEncoder>,
    next_slot: u64,
    pipelines: HashMap<String, Arc<wgpu::ComputePipeline>>,
}

/// One storage binding of a dispatch.
pub struct Bind<'a>(pub &'a wgpu::Buffer);

impl Gpu {
    /// Open adapter `index` (in enumeration order) or the first one.
    pub fn open(index: Option<usize>) -> Result<Gpu> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        if adapters.is_empty() {
            return Err(err(
                "no wgpu adapter found (install a Vulkan, Metal or DX12 driver; Mesa's lavapipe works on any CPU)",
            ));
        }
        let i = index.unwrap_or(0);
        let adapter = adapters
            .into_iter()
            .nth(i)
            .ok_or_else(|| err(format!("adapter {i} does not exist (see `lserve devices`)")))?;
        let wanted = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        let features = adapter.features() & wanted;
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("lserve"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) =
            pollster::block_on(adapter.request_device(&desc)).map_err(|e| err(format!("request_device: {e}")))?;
        let slot_size = (limits.min_uniform_buffer_offset_alignment as u64).max(256);
        let arena = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params arena"),
            size: slot_size * ARENA_SLOTS,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(Gpu {
            device,
            queue,
            info: adapter.get_info(),
            limits,
            features,
            slot_size,
            arena,
            state: RefCell::new(State { encoder: None, next_slot: 0, pipelines: HashMap::new() }),
        })
    }

    pub fn create_buffer(&self, bytes: u64, label: &str) -> Result<wgpu::Buffer> {
        let size = bytes.max(4).div_ceil(4) * 4;
        if size > self.limits.max_storage_buffer_binding_size || size > self.limits.max_buffer_size {
            return Err(err(format!(
                "a {label} buffer of {size} bytes exceeds this adapter's storage binding limit of {} bytes",
                self.limits.max_storage_buffer_binding_size
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    fn pipeline(&self, op: &str, weights: Option<DType>) -> Result<Arc<wgpu::ComputePipeline>> {
        let name = shaders::module_name(op, weights);
        if let Some(p) = self.state.borrow().pipelines.get(&name) {
            return Ok(p.clone());
        }
        let src = shaders::assemble(op, weights).ok_or_else(|| err(format!("no shader for {name}")))?;
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&name),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let p = Arc::new(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        }));
        self.state.borrow_mut().pipelines.insert(name, p.clone());
        Ok(p)
    }

    /// Record one dispatch of `op` with `params` at binding 0 and `binds` at 1, 2, ...
    pub fn dispatch(
        &self,
        op: &str,
        weights: Option<DType>,
        params: &[u8],
        binds: &[Bind],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        if groups.0 == 0 || groups.1 == 0 || groups.2 == 0 {
            return Ok(());
        }
        let max = self.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max || groups.2 > max {
            return Err(err(format!("{op}: {groups:?} workgroups exceed the adapter's {max} per dimension")));
        }
        let pipeline = self.pipeline(op, weights)?;
        if self.state.borrow().next_slot == ARENA_SLOTS {
            self.submit();
        }
        let offset = {
            let mut st = self.state.borrow_mut();
            let o = st.next_slot * self.slot_size;
            st.next_slot += 1;
            o
        };
        self.queue.write_buffer(&self.arena, offset, params);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.arena,
                offset,
                size: wgpu::BufferSize::new(params.len() as u64),
            }),
        }];
        for (i, b) in binds.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.0.as_entire_binding() });
        }
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(op),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut st = self.state.borrow_mut();
        let enc = st.encoder.get_or_insert_with(|| self.device.create_command_encoder(&Default::default()));
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(op), timestamp_writes: None });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        Ok(())
    }

    /// Submit whatever has been recorded.
    pub fn submit(&self) {
        let mut st = self.state.borrow_mut();
        if let Some(enc) = st.encoder.take() {
            self.queue.submit([enc.finish()]);
        }
        st.next_slot = 0;
    }

    /// Record a buffer-to-buffer copy.
    pub fn copy(&self, src: &wgpu::Buffer, src_off: u64, dst: &wgpu::Buffer, dst_off: u64, bytes: u64) {
        let mut st = self.state.borrow_mut();
        let enc = st.encoder.get_or_insert_with(|| self.device.create_command_encoder(&Default::default()));
        enc.copy_buffer_to_buffer(src, src_off, dst, dst_off, bytes);
    }

    /// Submit, wait, and read `bytes` bytes of `src` from `offset` (both multiples of 4).
    pub fn read(&self, src: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<Vec<u8>> {
        let size = bytes.max(4).div_ceil(4) * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.copy(src, offset, &staging, 0, size);
        self.submit();
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv().map_err(|_| err("map callback lost"))?.map_err(|e| err(format!("map_async: {e}")))?;
        let data = staging.get_mapped_range(..).map_err(|e| err(format!("mapped range: {e}")))?.to_vec();
        staging.unmap();
        Ok(data[..bytes as usize].to_vec())
    }

    pub fn wait(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| err(format!("poll: {e}")))?;
        Ok(())
    }
}
