//! `y = x · Wᵀ` on the GPU for every matrix kind of [`super::weights`]: quantized blocks on
//! the mat-vec kernels over 8-bit activations, f32 weights over activations rounded as the
//! CPU rounds them for that weight type. Each launch carries at most MAX_ROWS rows; longer
//! passes run in chunks, every row computed the same way whatever its chunk.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, PushKernelArg};

use super::gpu::go;
use super::model::CudaModel;
use super::plan::MAX_ROWS;
use super::weights::{ActQuant, Linear, Matrix};
use super::CudaError;

/// Warps (output features) per block of the mat-vec kernels.
const WARPS: u32 = 4;

/// A pass's rounded activations: 8-bit blocks (xq, xds) and the f32 values an f32 matrix
/// multiplies (xhat).
pub(super) struct Scratch {
    xq: CudaSlice<i8>,    // [rows, widest input]
    xds: CudaSlice<f32>,  // [rows, widest input / 32, 2]: d, s
    xhat: CudaSlice<f32>, // [rows, widest input]
}

impl Scratch {
    pub fn new(s: &Arc<CudaStream>, rows: usize, widest: usize) -> Result<Self, CudaError> {
        Ok(Self {
            xq: s.alloc_zeros(rows * widest)?,
            xds: s.alloc_zeros(rows * widest / 32 * 2 + 2)?,
            xhat: s.alloc_zeros(rows * widest)?,
        })
    }
}

impl CudaModel {
    /// `y[:, offset..offset + out] = x · Wᵀ` for each part of `lin`, side by side in rows of
    /// `y_stride`. The input is rounded once per rule its parts need.
    pub(super) fn matmul(
        &self,
        lin: &Linear,
        x: &CudaSlice<f32>,
        rows: usize,
        sc: &mut Scratch,
        y: &mut CudaSlice<f32>,
        y_stride: usize,
    ) -> Result<(), CudaError> {
        let in_dim = lin.in_dim;
        let needs = |want: ActQuant| {
            lin.parts.iter().any(|p| match &p.matrix {
                Matrix::Quant { .. } => want == ActQuant::Q8Block32,
                Matrix::F32 { act, .. } => *act == want,
            })
        };
        if needs(ActQuant::Q8Block32) {
            let cols = in_dim as i32;
            let mut b = self.gpu.launch("quantize_q8_1")?;
            b.arg(x).arg(&mut sc.xq).arg(&mut sc.xds).arg(&cols);
            go(b, (rows as u32, (in_dim / 32) as u32, 1), (32, 1, 1))?;
        }
        let mut offset = 0;
        let mut rounded = None; // the rule xhat holds
        for part in &lin.parts {
            if let Matrix::F32 { act, .. } = &part.matrix {
                if *act != ActQuant::None && rounded != Some(*act) {
                    self.round_acts(*act, x, rows, in_dim, sc)?;
                    rounded = Some(*act);
                }
            }
            for start in (0..rows).step_by(MAX_ROWS) {
                let n = (rows - start).min(MAX_ROWS);
                let mut yv = y.slice_mut(start * y_stride..);
                let (ind, outd, n, ys, yo) = (
                    in_dim as i32,
                    part.out_dim as i32,
                    n as i32,
                    y_stride as i32,
                    offset as i32,
                );
                let grid = ((part.out_dim as u32).div_ceil(WARPS), 1, 1);
                match &part.matrix {
                    Matrix::Quant { kernel, bytes } => {
                        let q = sc.xq.slice(start * in_dim..);
                        let ds = sc.xds.slice(start * in_dim / 32 * 2..);
                        let mut b = self.gpu.launch(kernel)?;
                        b.arg(bytes).arg(&q).arg(&ds).arg(&mut yv);
                        b.arg(&ind).arg(&outd).arg(&n).arg(&ys).arg(&yo);
                        go(b, grid, (32, WARPS, 1))?;
                    }
                    Matrix::F32 { w, act } => {
                        let src = if *act == ActQuant::None { x } else { &sc.xhat };
                        let xv = src.slice(start * in_dim..);
                        let mut b = self.gpu.launch("mv_f32")?;
                        b.arg(w).arg(&xv).arg(&mut yv);
                        b.arg(&ind).arg(&outd).arg(&n).arg(&ys).arg(&yo);
                        go(b, grid, (32, WARPS, 1))?;
                    }
                }
            }
            offset += part.out_dim;
        }
        Ok(())
    }

    /// `sc.xhat` = `x` rounded by `rule`, as f32 values.
    fn round_acts(
        &self,
        rule: ActQuant,
        x: &CudaSlice<f32>,
        rows: usize,
        in_dim: usize,
        sc: &mut Scratch,
    ) -> Result<(), CudaError> {
        let cols = in_dim as i32;
        match rule {
            ActQuant::None => Ok(()),
            ActQuant::Q8K => {
                let mut b = self.gpu.launch("quantize_q8_k_f32")?;
                b.arg(x).arg(&mut sc.xhat).arg(&cols);
                go(b, (rows as u32, (in_dim / 256) as u32, 1), (256, 1, 1))
            }
            ActQuant::Q8Block32 => {
                // quantize_q8_1 already ran for this input (matmul's first step).
                let mut b = self.gpu.launch("q8_to_f32")?;
                b.arg(&sc.xq).arg(&sc.xds).arg(&mut sc.xhat).arg(&cols);
                go(b, (rows as u32, (in_dim / 32) as u32, 1), (32, 1, 1))
            }
        }
    }
}
