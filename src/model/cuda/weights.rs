//! The model's weights in device memory. Q4_0, Q4_1 and Q8_0 matrices are uploaded as their
//! GGUF bytes and run on the quantized mat-vec kernels (the same integer products as the
//! CPU's); the other types the engine serves (Q5_0, the K-quants, F16, BF16, F32) are
//! dequantized once to f32 (4 bytes a weight) and run on the f32 mat-vec over activations
//! rounded as the CPU rounds them for that type ([`ActQuant`]), so both devices multiply the
//! same values. Other types are refused, as on the CPU.

use std::path::Path;

use candle_core::quantized::{GgmlDType, QTensor};
use cudarc::driver::CudaSlice;

use super::gpu::Gpu;
use super::CudaError;
use crate::model::config::ModelConfig;
use crate::model::cpu::SUPPORTED_TYPES;
use crate::model::gguf::{self, dequantize, LayerTensors};
use crate::model::{GgufMetadata, ModelError};

/// How a matrix's weights are stored on the device.
pub enum Matrix {
    /// GGUF blocks of 32 weights; `kernel` is the mat-vec that reads them.
    Quant {
        kernel: &'static str,
        bytes: CudaSlice<u8>,
    },
    F32 {
        w: CudaSlice<f32>,
        act: ActQuant,
    },
}

/// How the CPU rounds the activations a weight type multiplies (kernels/src/quantize.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActQuant {
    /// Unrounded f32 (F32, F16, BF16 weights on candle's float matmul).
    None,
    /// Per 32 values, d = amax / 127 through f16 (Q5_0 against q8_0 activations).
    Q8Block32,
    /// Per 256 values, ggml's q8_K (the K-quants).
    Q8K,
}

/// One matrix, [out, in].
pub struct Part {
    pub matrix: Matrix,
    pub in_dim: usize,
    pub out_dim: usize,
}

/// Matrices over the same input, outputs side by side (Q, K, V; gate, up; or one).
pub struct Linear {
    pub parts: Vec<Part>,
    pub in_dim: usize,
    pub out_dim: usize,
}

impl Linear {
    pub fn any_quant(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p.matrix, Matrix::Quant { .. }))
    }
}

pub struct Layer {
    pub attn_norm: CudaSlice<f32>,
    pub qkv: Linear,
    pub qkv_bias: Option<CudaSlice<f32>>,
    pub q_norm: Option<CudaSlice<f32>>,
    pub k_norm: Option<CudaSlice<f32>>,
    pub wo: Linear,
    pub post_attn_norm: Option<CudaSlice<f32>>,
    pub ffn_norm: CudaSlice<f32>,
    pub gate_up: Linear,
    pub down: Linear,
    pub post_ffn_norm: Option<CudaSlice<f32>>,
}

pub struct Weights {
    pub embeddings: CudaSlice<f32>, // [vocab, hidden]
    pub layers: Vec<Layer>,
    pub output_norm: CudaSlice<f32>,
    pub lm_head: Linear,
    pub rope_freqs: Option<Vec<f32>>,
    /// Bytes of device memory the weights hold.
    pub bytes: usize,
}

pub struct Loaded {
    pub config: ModelConfig,
    pub metadata: GgufMetadata,
    pub weights: Weights,
}

/// Read a model file and upload its weights to `gpu`.
pub fn load(gpu: &Gpu, path: &Path) -> Result<Loaded, CudaLoadError> {
    let mut bytes = 0usize;
    let mut up = Uploader {
        gpu,
        bytes: &mut bytes,
    };
    let t = gguf::read_model(path, None, |_, t| up.layer(t))?;
    let embeddings = up.vector(&dequantize(&t.embedding)?)?;
    let output_norm = up.vector(&t.output_norm)?;
    let lm_head = up.linear(vec![t.lm_head.unwrap_or(t.embedding)])?;
    let weights = Weights {
        embeddings,
        layers: t.layers,
        output_norm,
        lm_head,
        rope_freqs: t.rope_freqs,
        bytes,
    };
    Ok(Loaded {
        config: t.config,
        metadata: t.content.metadata,
        weights,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum CudaLoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Cuda(#[from] CudaError),
}

impl From<candle_core::Error> for CudaLoadError {
    fn from(e: candle_core::Error) -> Self {
        Self::Model(e.into())
    }
}

struct Uploader<'a> {
    gpu: &'a Gpu,
    bytes: &'a mut usize,
}

impl Uploader<'_> {
    fn vector(&mut self, v: &[f32]) -> Result<CudaSlice<f32>, CudaError> {
        *self.bytes += v.len() * 4;
        Ok(self.gpu.stream.clone_htod(v)?)
    }

    fn optional(&mut self, v: &Option<Vec<f32>>) -> Result<Option<CudaSlice<f32>>, CudaError> {
        v.as_deref().map(|v| self.vector(v)).transpose()
    }

    fn part(&mut self, t: &QTensor) -> Result<Part, CudaLoadError> {
        let (out_dim, in_dim) = t.shape().dims2()?;
        let dtype = t.dtype();
        let act = activation_rule(dtype, in_dim)?;
        let kernel = match dtype {
            GgmlDType::Q4_0 => Some("mmvq_q4_0"),
            GgmlDType::Q4_1 => Some("mmvq_q4_1"),
            GgmlDType::Q8_0 => Some("mmvq_q8_0"),
            _ => None,
        };
        let matrix = match kernel {
            Some(kernel) if in_dim.is_multiple_of(32) => {
                let data = t.data()?;
                *self.bytes += data.len();
                let bytes = self.gpu.stream.clone_htod(&data[..]);
                Matrix::Quant {
                    kernel,
                    bytes: bytes.map_err(CudaError::from)?,
                }
            }
            _ => Matrix::F32 {
                w: self.vector(&dequantize(t)?)?,
                act,
            },
        };
        Ok(Part {
            matrix,
            in_dim,
            out_dim,
        })
    }

    fn linear(&mut self, ts: Vec<QTensor>) -> Result<Linear, CudaLoadError> {
        let parts = ts
            .iter()
            .map(|t| self.part(t))
            .collect::<Result<Vec<_>, _>>()?;
        let in_dim = parts.first().map_or(0, |p| p.in_dim);
        if parts.iter().any(|p| p.in_dim != in_dim) {
            return Err(ModelError::Format("fused matrices of different widths".into()).into());
        }
        let out_dim = parts.iter().map(|p| p.out_dim).sum();
        Ok(Linear {
            parts,
            in_dim,
            out_dim,
        })
    }

    fn layer(&mut self, t: LayerTensors) -> Result<Layer, CudaLoadError> {
        Ok(Layer {
            attn_norm: self.vector(&t.attn_norm)?,
            qkv: self.linear(t.qkv)?,
            qkv_bias: self.optional(&t.qkv_bias)?,
            q_norm: self.optional(&t.q_norm)?,
            k_norm: self.optional(&t.k_norm)?,
            wo: self.linear(vec![t.wo])?,
            post_attn_norm: self.optional(&t.post_attn_norm)?,
            ffn_norm: self.vector(&t.ffn_norm)?,
            gate_up: self.linear(t.gate_up)?,
            down: self.linear(vec![t.down])?,
            post_ffn_norm: self.optional(&t.post_ffn_norm)?,
        })
    }
}

/// How the CPU rounds the activations a matrix of `dtype` multiplies (kernels/src/quantize.rs
/// and cpu/linear.rs: our kernels where the width is whole blocks, candle's float matmul for
/// F32, F16 and BF16); the types the CPU refuses are refused here too.
fn activation_rule(dtype: GgmlDType, in_dim: usize) -> Result<ActQuant, ModelError> {
    Ok(match dtype {
        GgmlDType::Q5_0 if in_dim.is_multiple_of(32) => ActQuant::Q8Block32,
        GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K if in_dim.is_multiple_of(256) => {
            ActQuant::Q8K
        }
        GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q8_0 | GgmlDType::Q5_0 => ActQuant::None,
        GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K => ActQuant::None,
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => ActQuant::None,
        other => {
            return Err(ModelError::Unsupported(format!(
                "weights of type {other:?} (supported: {SUPPORTED_TYPES})"
            )))
        }
    })
}
