//! The CUDA target's kernels: CUDA C sources in `kernels/cuda/` (a shared prelude and one file
//! per concern), compiled at start-up with NVRTC for the device's architecture, so a build
//! needs no CUDA toolkit and the PTX matches the driver it runs under (PTX from a newer nvcc
//! would not load on an older driver). `specgate check-kernels` compiles every source for the
//! architectures the GPU machines have and fails on any error; CI runs it with libnvrtc from
//! the `nvidia-cuda-nvrtc` wheel, which loads without a GPU.
//!
//! The sources are plain text here in every build; compiling them needs the `cuda` feature.

/// Types, warp reductions and f16 conversions every source uses.
pub const PRELUDE: &str = include_str!("../../../kernels/cuda/prelude.cuh");

/// A kernel source and the `extern "C"` functions it must define.
pub struct KernelSource {
    pub name: &'static str,
    pub text: &'static str,
    pub functions: &'static [&'static str],
}

pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "quantize",
        text: include_str!("../../../kernels/cuda/quantize.cu"),
        functions: &["quantize_q8_1", "quantize_q8_k_f32", "q8_to_f32"],
    },
    KernelSource {
        name: "qmatvec",
        text: include_str!("../../../kernels/cuda/qmatvec.cu"),
        functions: &["mmvq_q4_0", "mmvq_q4_1", "mmvq_q8_0", "mv_f32"],
    },
    KernelSource {
        name: "norm",
        text: include_str!("../../../kernels/cuda/norm.cu"),
        functions: &["rms_norm", "head_rms_norm"],
    },
    KernelSource {
        name: "rope",
        text: include_str!("../../../kernels/cuda/rope.cu"),
        functions: &["rope"],
    },
    KernelSource {
        name: "elementwise",
        text: include_str!("../../../kernels/cuda/elementwise.cu"),
        functions: &[
            "embed_rows",
            "gather_rows",
            "add_in_place",
            "add_bias",
            "gated",
        ],
    },
    KernelSource {
        name: "attention",
        text: include_str!("../../../kernels/cuda/attention.cu"),
        functions: &["attention", "kv_append", "kv_keep"],
    },
    KernelSource {
        name: "argmax",
        text: include_str!("../../../kernels/cuda/argmax.cu"),
        functions: &["argmax_rows"],
    },
];

/// Architectures the kernels are built for (NVRTC takes them as `--gpu-architecture`):
/// Turing to Blackwell. The GPU machines lent to this project are H100/H200 (sm_90).
pub const ARCHES: &[&str] = &[
    "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
];

impl KernelSource {
    /// The translation unit NVRTC compiles: the prelude, then the source.
    pub fn unit(&self) -> String {
        format!("{PRELUDE}\n{}", self.text)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KernelCompileError {
    #[error("this specgate was built without CUDA (cargo build --release --features cuda)")]
    NotBuilt,
    #[error(
        "libnvrtc was not found: install it (pip install nvidia-cuda-nvrtc==13.0.88) and put \
         the folder holding libnvrtc.so.13 on LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    #[error("unknown architecture {0:?} (known: {known})", known = ARCHES.join(", "))]
    Arch(String),
    #[error("{source_name} for {arch}: {log}")]
    Compile {
        source_name: &'static str,
        arch: &'static str,
        log: String,
    },
    #[error("{source_name} for {arch}: the PTX lacks kernel {function}")]
    Missing {
        source_name: &'static str,
        arch: &'static str,
        function: &'static str,
    },
}

/// The known architecture named `arch`.
pub fn arch(arch: &str) -> Result<&'static str, KernelCompileError> {
    ARCHES
        .iter()
        .copied()
        .find(|a| *a == arch)
        .ok_or_else(|| KernelCompileError::Arch(arch.to_string()))
}

/// The architecture of a device of compute capability `major.minor`.
pub fn arch_for(major: i32, minor: i32) -> Result<&'static str, KernelCompileError> {
    arch(&format!("sm_{major}{minor}"))
}

/// Compile one source for `arch` and return its PTX, checked to define every function the
/// source promises. Exact arithmetic: no fast math (it changes expf, division and denormals)
/// and no contraction into FMAs.
#[cfg(feature = "cuda")]
pub fn compile(src: &KernelSource, arch: &'static str) -> Result<String, KernelCompileError> {
    use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};
    // SAFETY: only asks the dynamic loader whether the library can be opened; cudarc would
    // panic on first use without it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(KernelCompileError::NoNvrtc);
    }
    // No fused multiply-adds either: the CPU rounds each product (RoPE's a·c − b·s, the
    // norms' x·scale·w), and NVRTC fuses by default.
    let opts = CompileOptions {
        arch: Some(arch),
        use_fast_math: Some(false),
        fmad: Some(false),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(src.unit(), opts).map_err(|e| {
        let log = match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        };
        KernelCompileError::Compile {
            source_name: src.name,
            arch,
            log,
        }
    })?;
    let text = ptx.to_src();
    for &function in src.functions {
        if !text.contains(&format!(".entry {function}(")) {
            return Err(KernelCompileError::Missing {
                source_name: src.name,
                arch,
                function,
            });
        }
    }
    Ok(text)
}

/// Without the `cuda` feature nothing compiles.
#[cfg(not(feature = "cuda"))]
pub fn compile(_src: &KernelSource, _arch: &'static str) -> Result<String, KernelCompileError> {
    Err(KernelCompileError::NotBuilt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_promised_kernel_is_defined_in_its_source() {
        for src in SOURCES {
            for f in src.functions {
                assert!(
                    src.text.contains(&format!("void {f}("))
                        || src.text.contains(&format!("MMVQ({f},")),
                    "{} does not define {f}",
                    src.name
                );
            }
        }
        assert!(arch("sm_90").is_ok());
        assert_eq!(arch_for(9, 0).ok(), Some("sm_90"));
        assert_eq!(arch_for(8, 6).ok(), Some("sm_86"));
        assert!(matches!(arch("sm_1000"), Err(KernelCompileError::Arch(_))));
    }
}
