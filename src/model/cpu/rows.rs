//! Rows of GGUF matrices: a prefix or a selection of rows (draft vocabularies' LM heads),
//! and single rows dequantized on demand (embedding lookups of vocabularies too large to
//! keep in f32).

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use half::f16;

use crate::model::ModelError;

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
        let mut out = Vec::with_capacity(self.in_dim);
        Ok(self.push_row(i, &mut out)?.then_some(out))
    }

    /// Append row `i`, dequantized, to `out` ([in_dim] more values); false past the last
    /// row. Q8_0 rows (Gemma's embedding) are decoded in place: no allocation per lookup.
    pub fn push_row(&self, i: usize, out: &mut Vec<f32>) -> Result<bool, ModelError> {
        if i >= self.rows {
            return Ok(false);
        }
        let len = row_bytes(self.dtype, self.in_dim);
        let row = self
            .bytes
            .get(i * len..(i + 1) * len)
            .ok_or_else(|| ModelError::Format(format!("row {i} lies past the matrix's bytes")))?;
        if self.dtype == GgmlDType::Q8_0 {
            // ggml's dequantize_row_q8_0 (d · q per weight), without a tensor per lookup.
            for blk in row.chunks_exact(34) {
                let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                out.extend(blk[2..].iter().map(|&q| d * (q as i8) as f32));
            }
            return Ok(true);
        }
        let q = candle_core::quantized::ggml_file::qtensor_from_ggml(
            self.dtype,
            row,
            vec![1, self.in_dim],
            &Device::Cpu,
        )?;
        out.extend(
            q.dequantize(&Device::Cpu)?
                .flatten_all()?
                .to_vec1::<f32>()?,
        );
        Ok(true)
    }
}
