//! A linear layer over quantized GGUF weights: `y = x · Wᵀ` for a batch of rows.
//!
//! Q4_1 and Q8_0 weights run on specgate-kernels' quantized matmul (ggml's arithmetic, each
//! weight row read once for all rows of a call); other formats, or every format when
//! `SPECGATE_MATMUL=candle`, run on candle's `QMatMul`, which stays as the reference.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use specgate_kernels::{QuantFormat, QuantMatrix};

use super::ModelError;

enum Backend {
    Kernel(QuantMatrix),
    Candle(QMatMul),
}

pub struct Linear {
    backend: Backend,
    in_dim: usize,
    out_dim: usize,
}

/// Whether to route every layer through candle's matmul (for comparisons).
fn candle_only() -> bool {
    std::env::var("SPECGATE_MATMUL").is_ok_and(|v| v == "candle")
}

impl Linear {
    /// `weight`: a GGUF tensor of shape [out_dim, in_dim].
    pub fn new(weight: QTensor) -> Result<Self, ModelError> {
        let (out_dim, in_dim) = weight.shape().dims2()?;
        let format = match weight.dtype() {
            GgmlDType::Q4_1 => Some(QuantFormat::Q4_1),
            GgmlDType::Q8_0 => Some(QuantFormat::Q8_0),
            _ => None,
        };
        let backend = match format {
            Some(f) if !candle_only() && in_dim % 32 == 0 => {
                let bytes = weight.data()?;
                let m = QuantMatrix::from_ggml_bytes(f, out_dim, in_dim, &bytes)
                    .map_err(|e| ModelError::Format(e.to_string()))?;
                Backend::Kernel(m)
            }
            _ => Backend::Candle(QMatMul::from_qtensor(weight)?),
        };
        Ok(Self {
            backend,
            in_dim,
            out_dim,
        })
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
        match &self.backend {
            Backend::Kernel(m) => Ok(m.matmul(xs)),
            Backend::Candle(q) => {
                let x = Tensor::from_slice(xs, (rows, self.in_dim), &Device::Cpu)?;
                Ok(q.forward(&x)?.flatten_all()?.to_vec1::<f32>()?)
            }
        }
    }
}
