//! One GPU: its context and stream, and the kernels compiled for it. Compiled PTX is cached
//! on disk by a hash of the source and the architecture, so a restart skips NVRTC.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchArgs, LaunchConfig};
use cudarc::nvrtc::Ptx;
use sha2::{Digest, Sha256};

use super::kernels::{self, KernelSource, SOURCES};
use super::CudaError;

pub struct Gpu {
    pub stream: Arc<CudaStream>,
    /// The device in words: `cuda:0 (NVIDIA H100 80GB HBM3, sm_90)`.
    pub name: String,
    functions: HashMap<&'static str, CudaFunction>,
    ctx: Arc<CudaContext>,
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(e.to_string())
    }
}

/// Check the driver can be loaded before cudarc touches it (it panics when it cannot).
pub fn driver_present() -> bool {
    // SAFETY: only asks the dynamic loader whether libcuda can be opened.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// CUDA devices this machine has (0 without a driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

impl Gpu {
    /// Open device `ordinal` and load every kernel, compiled for its architecture.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        let count = device_count();
        if ordinal >= count {
            return Err(CudaError::NoDevice(ordinal, count));
        }
        let ctx = CudaContext::new(ordinal)?;
        // SAFETY: the target uses one stream for every copy and launch, in order, so the
        // per-buffer events cudarc records to order several streams are not needed (and cost
        // two driver calls per buffer per launch, ~300 launches a step).
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability()?;
        let arch = kernels::arch_for(major, minor)?;
        let name = format!("cuda:{ordinal} ({}, {arch})", ctx.name()?);
        let mut functions = HashMap::new();
        for src in SOURCES {
            let module = ctx.load_module(Ptx::from_src(cached_ptx(src, arch)?))?;
            for &f in src.functions {
                functions.insert(f, module.load_function(f)?);
            }
        }
        Ok(Self {
            stream: ctx.default_stream(),
            name,
            functions,
            ctx,
        })
    }

    /// A launch of kernel `name` (every promised kernel was loaded at open).
    pub fn launch(&self, name: &str) -> Result<LaunchArgs<'_>, CudaError> {
        let f = self
            .functions
            .get(name)
            .ok_or_else(|| CudaError::Driver(format!("kernel {name} was not loaded")))?;
        Ok(self.stream.launch_builder(f))
    }

    /// (free, total) bytes of device memory.
    pub fn memory(&self) -> Result<(usize, usize), CudaError> {
        Ok(self.ctx.mem_get_info()?)
    }
}

/// Launch a built kernel call on `grid` × `block`.
pub fn go(
    mut args: LaunchArgs<'_>,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
) -> Result<(), CudaError> {
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    };
    // SAFETY: every call site passes the arguments its kernel declares, in order, with
    // buffers sized for the grid (see each kernel's header comment).
    unsafe { args.launch(cfg) }?;
    Ok(())
}

/// PTX for `src` on `arch`, from the disk cache or NVRTC.
fn cached_ptx(src: &KernelSource, arch: &'static str) -> Result<String, CudaError> {
    let key = hex(&Sha256::digest(format!("{arch}\n{}", src.unit())));
    let path = cache_dir().map(|d| d.join(format!("{}-{arch}-{}.ptx", src.name, &key[..16])));
    if let Some(text) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        return Ok(text);
    }
    let ptx = kernels::compile(src, arch)?;
    if let Some(p) = &path {
        // A cache that cannot be written only costs the next start-up a compile.
        let _ = p.parent().map(std::fs::create_dir_all);
        let _ = std::fs::write(p, &ptx);
    }
    Ok(ptx)
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SPECGATE_PTX_CACHE") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("specgate").join("ptx"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
