//! Loading a llama-architecture GGUF file into the weights the forward pass uses.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Content};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::linear::{Linear, LinearGroup, MatmulBackend};
use crate::model::config::ModelConfig;
use crate::model::ModelError;

pub struct LayerWeights {
    pub attn_norm: Vec<f32>, // [hidden]
    pub qkv: LinearGroup,    // Q, K, V
    pub wo: Linear,
    pub ffn_norm: Vec<f32>,   // [hidden]
    pub gate_up: LinearGroup, // gate, up
    pub down: Linear,
}

pub struct Weights {
    pub embeddings: Vec<f32>, // [vocab, hidden], dequantized once for row lookups
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // [hidden]
    pub lm_head: Linear,
    /// Quant type of each layer's attention Q weight, for reports.
    pub dtype: GgmlDType,
}

pub struct LoadedGguf {
    pub content: Content,
    pub config: ModelConfig,
    pub weights: Weights,
}

/// Parse the header and metadata only (tokenizer and config), without reading tensors.
pub fn read_header(path: &Path) -> Result<(Content, BufReader<File>), ModelError> {
    let file = File::open(path)
        .map_err(|e| ModelError::Io(format!("cannot open model {}: {e}", path.display())))?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(|e| {
        ModelError::Format(format!(
            "{} is not a readable GGUF file: {e}",
            path.display()
        ))
    })?;
    Ok((content, reader))
}

fn dequantize(t: &QTensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.dequantize(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

/// Load the weights; `max_layers` keeps only the first L blocks (an early-exit draft model:
/// the target's first layers, then its final norm and LM head).
pub fn load(
    path: &Path,
    backend: MatmulBackend,
    max_layers: Option<usize>,
) -> Result<LoadedGguf, ModelError> {
    let (content, mut reader) = read_header(path)?;
    let mut config = ModelConfig::from_metadata(&content.metadata)?;
    if let Some(l) = max_layers {
        if l == 0 || l > config.n_layers {
            return Err(ModelError::Invalid(format!(
                "exit layer {l} outside 1..={}",
                config.n_layers
            )));
        }
        config.n_layers = l;
    }
    let mut tensor = |name: &str| {
        content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(|e| ModelError::Format(format!("tensor {name} in {}: {e}", path.display())))
    };
    let embd = tensor("token_embd.weight")?;
    let embeddings = dequantize(&embd)?;
    let mut layers = Vec::with_capacity(config.n_layers);
    let mut dtype = GgmlDType::F32;
    for l in 0..config.n_layers {
        let mut t = |suffix: &str| tensor(&format!("blk.{l}.{suffix}"));
        let wq = t("attn_q.weight")?;
        dtype = wq.dtype();
        layers.push(LayerWeights {
            attn_norm: dequantize(&t("attn_norm.weight")?)?,
            qkv: LinearGroup::new(vec![wq, t("attn_k.weight")?, t("attn_v.weight")?], backend)?,
            wo: Linear::new(t("attn_output.weight")?, backend)?,
            ffn_norm: dequantize(&t("ffn_norm.weight")?)?,
            gate_up: LinearGroup::new(vec![t("ffn_gate.weight")?, t("ffn_up.weight")?], backend)?,
            down: Linear::new(t("ffn_down.weight")?, backend)?,
        });
    }
    let output_norm = dequantize(&tensor("output_norm.weight")?)?;
    // Tied embeddings: models without `output.weight` reuse the token embedding as LM head.
    let lm_head = match content.tensor_infos.contains_key("output.weight") {
        true => Linear::new(tensor("output.weight")?, backend)?,
        false => Linear::new(embd, backend)?,
    };
    if embeddings.len() != config.vocab_size * config.hidden {
        return Err(ModelError::Format(format!(
            "token_embd has {} values, expected vocab {} x hidden {}",
            embeddings.len(),
            config.vocab_size,
            config.hidden
        )));
    }
    let weights = Weights {
        embeddings,
        layers,
        output_norm,
        lm_head,
        dtype,
    };
    Ok(LoadedGguf {
        content,
        config,
        weights,
    })
}

/// The GGUF tensor the LM head is: `output.weight`, or the tied token embedding.
pub fn lm_head_tensor(path: &Path) -> Result<(QTensor, ModelConfig), ModelError> {
    let (content, mut reader) = read_header(path)?;
    let config = ModelConfig::from_metadata(&content.metadata)?;
    let name = if content.tensor_infos.contains_key("output.weight") {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    let t = content
        .tensor(&mut reader, name, &Device::Cpu)
        .map_err(|e| ModelError::Format(format!("tensor {name} in {}: {e}", path.display())))?;
    Ok((t, config))
}

/// Bytes of one row of `in_dim` weights (whole blocks) of a quantized matrix.
fn row_bytes(dtype: GgmlDType, in_dim: usize) -> usize {
    in_dim / dtype.block_size() * dtype.type_size()
}

/// The first `rows` rows of a GGUF matrix ([out, in] → [rows, in]): whole rows of blocks, so
/// the bytes are a prefix.
pub fn first_rows(t: &QTensor, rows: usize) -> Result<QTensor, ModelError> {
    let (out_dim, in_dim) = t.shape().dims2()?;
    let rows = rows.min(out_dim);
    let dtype = t.dtype();
    let bytes = t.data()?;
    let prefix = bytes
        .get(..rows * row_bytes(dtype, in_dim))
        .ok_or_else(|| {
            ModelError::Format(format!(
                "a {out_dim}x{in_dim} {dtype:?} matrix holds only {} bytes",
                bytes.len()
            ))
        })?;
    Ok(candle_core::quantized::ggml_file::qtensor_from_ggml(
        dtype,
        prefix,
        vec![rows, in_dim],
        &Device::Cpu,
    )?)
}

/// Rows `ids` of a GGUF matrix, in that order ([out, in] → [ids.len(), in]): a draft
/// vocabulary's rows of the LM head. An id past the matrix is an error.
pub fn select_rows(t: &QTensor, ids: &[u32]) -> Result<QTensor, ModelError> {
    let (out_dim, in_dim) = t.shape().dims2()?;
    let dtype = t.dtype();
    let len = row_bytes(dtype, in_dim);
    let bytes = t.data()?;
    let mut picked = Vec::with_capacity(ids.len() * len);
    for &id in ids {
        let i = id as usize;
        let row = bytes
            .get(i * len..(i + 1) * len)
            .filter(|_| i < out_dim)
            .ok_or_else(|| {
                ModelError::Format(format!("row {id} lies past a {out_dim}x{in_dim} matrix"))
            })?;
        picked.extend_from_slice(row);
    }
    Ok(candle_core::quantized::ggml_file::qtensor_from_ggml(
        dtype,
        &picked,
        vec![ids.len(), in_dim],
        &Device::Cpu,
    )?)
}

/// A quantized matrix's bytes kept to dequantize single rows (an embedding lookup).
pub struct QuantRows {
    dtype: GgmlDType,
    rows: usize,
    in_dim: usize,
    bytes: Vec<u8>,
}

impl QuantRows {
    pub fn new(t: &QTensor) -> Result<Self, ModelError> {
        let (rows, in_dim) = t.shape().dims2()?;
        Ok(Self {
            dtype: t.dtype(),
            rows,
            in_dim,
            bytes: t.data()?.to_vec(),
        })
    }

    /// Row `i`, dequantized; None past the last row.
    pub fn row(&self, i: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if i >= self.rows {
            return Ok(None);
        }
        let len = row_bytes(self.dtype, self.in_dim);
        let row = self
            .bytes
            .get(i * len..(i + 1) * len)
            .ok_or_else(|| ModelError::Format(format!("row {i} lies past the matrix's bytes")))?;
        let q = candle_core::quantized::ggml_file::qtensor_from_ggml(
            self.dtype,
            row,
            vec![1, self.in_dim],
            &Device::Cpu,
        )?;
        Ok(Some(q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?))
    }
}
