//! `specgate check-kernels`: compile every CUDA kernel source with NVRTC for the given
//! architectures, without a GPU; exit non-zero on any error.

use anyhow::{bail, Result};
use clap::Args;
use specgate::model::cuda::kernels::{arch, compile, SOURCES};

#[derive(Args)]
pub struct CheckKernelsArgs {
    /// Architectures to compile for, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "sm_80,sm_90")]
    arch: Vec<String>,
}

pub fn run(args: CheckKernelsArgs) -> Result<()> {
    let mut failed = 0;
    for a in &args.arch {
        let a = arch(a)?;
        for src in SOURCES {
            match compile(src, a) {
                Ok(ptx) => println!(
                    "ok {a} {}: {} kernels, {} bytes of PTX",
                    src.name,
                    src.functions.len(),
                    ptx.len()
                ),
                Err(e @ specgate::model::cuda::kernels::KernelCompileError::Compile { .. }) => {
                    eprintln!("FAILED {e}");
                    failed += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if failed > 0 {
        bail!("{failed} kernel source(s) failed to compile");
    }
    Ok(())
}
