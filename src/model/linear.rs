//! A linear layer over quantized GGUF weights: `y = x · Wᵀ` for a batch of rows.
//!
//! Rows are plain `f32` slices so the forward never depends on how the product is computed;
//! today candle's `QMatMul` computes it.

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::ModelError;

pub struct Linear {
    inner: QMatMul,
    in_dim: usize,
    out_dim: usize,
}

impl Linear {
    /// `weight`: a GGUF tensor of shape [out_dim, in_dim].
    pub fn new(weight: QTensor) -> Result<Self, ModelError> {
        let (out_dim, in_dim) = weight.shape().dims2()?;
        Ok(Self { inner: QMatMul::from_qtensor(weight)?, in_dim, out_dim })
    }

    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// `xs`: [rows, in_dim] → [rows, out_dim].
    pub fn forward(&self, xs: &[f32]) -> Result<Vec<f32>, ModelError> {
        let rows = xs.len() / self.in_dim;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let x = Tensor::from_slice(xs, (rows, self.in_dim), &Device::Cpu)?;
        Ok(self.inner.forward(&x)?.flatten_all()?.to_vec1::<f32>()?)
    }
}
