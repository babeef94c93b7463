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
        let nvrtc = versions()?;
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
            let module = ctx.load_module(Ptx::from_src(cached_ptx(src, arch, nvrtc)?))?;
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

/// NVRTC's version, checked against the driver's: PTX from an NVRTC newer than the driver
/// does not load (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so that is refused here, clearly.
fn versions() -> Result<(i32, i32), CudaError> {
    use cudarc::driver::sys::{cuDriverGetVersion, CUresult};
    use cudarc::nvrtc::sys::{nvrtcResult, nvrtcVersion};
    // SAFETY: only asks the dynamic loader whether libnvrtc can be opened.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(kernels::KernelCompileError::NoNvrtc.into());
    }
    let (mut major, mut minor, mut driver) = (0, 0, 0);
    // SAFETY: both libraries are present (checked above and in `open`); the calls only write
    // the integers they are given.
    let ok = unsafe {
        nvrtcVersion(&mut major, &mut minor) == nvrtcResult::NVRTC_SUCCESS
            && cuDriverGetVersion(&mut driver) == CUresult::CUDA_SUCCESS
    };
    if !ok {
        return Err(CudaError::Driver(
            "cannot read the NVRTC and driver versions".into(),
        ));
    }
    let (d_major, d_minor) = (driver / 1000, (driver % 1000) / 10);
    if (major, minor) > (d_major, d_minor) {
        return Err(CudaError::Driver(format!(
            "NVRTC {major}.{minor} is newer than the driver's CUDA {d_major}.{d_minor}, whose \
             loader would refuse its PTX: use NVRTC {d_major}.{d_minor} (e.g. pip install \
             nvidia-cuda-nvrtc=={d_major}.{d_minor}.*)"
        )));
    }
    Ok((major, minor))
}

/// PTX for `src` on `arch`, from the disk cache or NVRTC.
fn cached_ptx(
    src: &KernelSource,
    arch: &'static str,
    nvrtc: (i32, i32),
) -> Result<String, CudaError> {
    let key = hex(&Sha256::digest(format!(
        "{arch}\nnvrtc {}.{}\n{}",
        nvrtc.0,
        nvrtc.1,
        src.unit()
    )));
    let path = cache_dir().map(|d| d.join(format!("{}-{arch}-{}.ptx", src.name, &key[..16])));
    if let Some(text) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        return Ok(text);
    }
    let ptx = kernels::compile(src, arch)?;
    if let Some(p) = &path {
        // A cache that cannot be written only costs the next start-up a compile. Written
        // aside and renamed, so a server starting beside this one never reads half a file.
        let _ = p.parent().map(std::fs::create_dir_all);
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &ptx)
            .and_then(|_| std::fs::rename(&tmp, p))
            .is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
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
