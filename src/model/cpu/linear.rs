//! A linear layer over quantized GGUF weights: `y = x · Wᵀ` for a batch of rows.
//!
//! Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K weights run on specgate-kernels' quantized matmul
//! (each weight group read once for all rows of a call); F16/F32 weights, or every format
//! with [`MatmulBackend::Candle`], run on candle's `QMatMul`, which stays as the reference.
//! Other quantized types are refused at load.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use specgate_kernels::{Q8Batch, QuantFormat, QuantMatrix};

use crate::model::ModelError;

enum Backend {
    Kernel(QuantMatrix),
    Candle(QMatMul),
}

/// The weight types the engine serves, named when a file holds another.
pub const SUPPORTED_TYPES: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K";

pub struct Linear {
    backend: Backend,
    in_dim: usize,
    out_dim: usize,
}

/// Which quantized matmul the linear layers use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MatmulBackend {
    /// specgate-kernels where it supports the format, candle elsewhere.
    #[default]
    Kernels,
    /// candle's `QMatMul` everywhere (the reference in tests and benchmarks).
    Candle,
}

impl Linear {
    /// `weight`: a GGUF tensor of shape [out_dim, in_dim]. A quantized type our kernels do
    /// not run is refused (candle's fallback was slower and further from llama.cpp); F16 and
    /// F32 matrices run on candle.
    pub fn new(weight: QTensor, backend: MatmulBackend) -> Result<Self, ModelError> {
        let (out_dim, in_dim) = weight.shape().dims2()?;
        let dtype = weight.dtype();
        let format = match dtype {
            GgmlDType::Q4_0 => Some(QuantFormat::Q4_0),
            GgmlDType::Q4_1 => Some(QuantFormat::Q4_1),
            GgmlDType::Q5_0 => Some(QuantFormat::Q5_0),
            GgmlDType::Q8_0 => Some(QuantFormat::Q8_0),
            GgmlDType::Q4K => Some(QuantFormat::Q4K),
            GgmlDType::Q5K => Some(QuantFormat::Q5K),
            GgmlDType::Q6K => Some(QuantFormat::Q6K),
            _ => None,
        };
        let float = matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
        if backend == MatmulBackend::Kernels && format.is_none() && !float {
            return Err(ModelError::Unsupported(format!(
                "weights of type {dtype:?} (supported: {SUPPORTED_TYPES})"
            )));
        }
        let backend = match format {
            Some(f) if backend == MatmulBackend::Kernels && in_dim % f.block_weights() == 0 => {
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

    /// [`Linear::forward`] into `out` (resized to [rows, out_dim]) with the quantized
    /// activations in `acts`: on our kernel nothing is allocated once both have grown.
    pub fn forward_into(
        &self,
        xs: &[f32],
        acts: &mut Q8Batch,
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        out.resize(xs.len() / self.in_dim * self.out_dim, 0.0);
        match &self.backend {
            Backend::Kernel(m) => m.matmul_into(xs, acts, out),
            Backend::Candle(_) => {
                let y = self.forward(xs)?;
                out.copy_from_slice(&y);
            }
        }
        Ok(())
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

/// Several linear layers over the same input (Q/K/V, or gate/up). When all use our kernel
/// they run as one stacked matrix: one quantization of the input, one thread dispatch.
pub struct LinearGroup {
    fused: Option<Linear>,
    parts: Vec<Linear>,
    dims: Vec<usize>,
}

impl LinearGroup {
    pub fn new(weights: Vec<QTensor>, backend: MatmulBackend) -> Result<Self, ModelError> {
        let parts = weights
            .into_iter()
            .map(|w| Linear::new(w, backend))
            .collect::<Result<Vec<_>, _>>()?;
        let dims: Vec<usize> = parts.iter().map(|p| p.out_dim).collect();
        let matrices: Option<Vec<&QuantMatrix>> = parts
            .iter()
            .map(|p| match &p.backend {
                Backend::Kernel(m) => Some(m),
                Backend::Candle(_) => None,
            })
            .collect();
        match matrices.and_then(|ms| QuantMatrix::concat(&ms)) {
            Some(m) => {
                let (in_dim, out_dim) = (m.in_dim(), m.out_dim());
                let fused = Linear {
                    backend: Backend::Kernel(m),
                    in_dim,
                    out_dim,
                };
                Ok(Self {
                    fused: Some(fused),
                    parts: Vec::new(),
                    dims,
                })
            }
            None => Ok(Self {
                fused: None,
                parts,
                dims,
            }),
        }
    }

    /// `xs`: [rows, in_dim] → `out`: [rows, Σ dims] (resized), each row the parts' outputs
    /// side by side; `acts` holds the quantized input. On our kernel nothing is allocated
    /// once the buffers have grown.
    pub fn forward_into(
        &self,
        xs: &[f32],
        acts: &mut Q8Batch,
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        if let Some(fused) = &self.fused {
            return fused.forward_into(xs, acts, out);
        }
        let parts = self
            .parts
            .iter()
            .map(|p| p.forward(xs))
            .collect::<Result<Vec<_>, _>>()?;
        let total: usize = self.dims.iter().sum();
        let rows = parts.first().map_or(0, |p| p.len() / self.dims[0].max(1));
        out.clear();
        for r in 0..rows {
            for (p, &d) in parts.iter().zip(&self.dims) {
                out.extend_from_slice(&p[r * d..(r + 1) * d]);
            }
        }
        debug_assert_eq!(out.len(), rows * total);
        Ok(())
    }
}
