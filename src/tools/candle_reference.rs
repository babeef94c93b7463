//! candle-transformers' own quantized models, the reference our forward is checked and
//! timed against: `quantized_llama`, `quantized_qwen2`, `quantized_qwen3` or
//! `quantized_gemma3`, whichever the file's architecture is.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{
    quantized_gemma3, quantized_llama, quantized_qwen2, quantized_qwen3,
};
use specgate_strategies::TokenId;

use crate::model::arch::Arch;
use crate::model::config::architecture;

pub enum CandleReference {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    Gemma3(quantized_gemma3::ModelWeights),
}

impl CandleReference {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let mut reader = BufReader::new(File::open(path)?);
        let content = gguf_file::Content::read(&mut reader)?;
        let dev = &Device::Cpu;
        Ok(match architecture(&content.metadata)? {
            Arch::Llama => Self::Llama(quantized_llama::ModelWeights::from_gguf(
                content,
                &mut reader,
                dev,
            )?),
            Arch::Qwen2 => Self::Qwen2(quantized_qwen2::ModelWeights::from_gguf(
                content,
                &mut reader,
                dev,
            )?),
            Arch::Qwen3 => Self::Qwen3(quantized_qwen3::ModelWeights::from_gguf(
                content,
                &mut reader,
                dev,
            )?),
            Arch::Gemma3 => Self::Gemma3(quantized_gemma3::ModelWeights::from_gguf(
                content,
                &mut reader,
                dev,
            )?),
        })
    }

    /// Logits of the last of `ids`, fed at position `pos` onward ([vocab]). Position 0
    /// starts a new sequence.
    pub fn forward(&mut self, ids: &[TokenId], pos: usize) -> anyhow::Result<Vec<f32>> {
        let x = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
        let y = match self {
            Self::Llama(m) => {
                if pos == 0 {
                    m.clear_kv_cache();
                }
                m.forward(&x, pos)?
            }
            Self::Qwen2(m) => {
                if pos == 0 {
                    m.clear_kv_cache();
                }
                m.forward(&x, pos)?
            }
            Self::Qwen3(m) => {
                if pos == 0 {
                    m.clear_kv_cache();
                }
                m.forward(&x, pos)?
            }
            // Its caches restart at position 0 by themselves.
            Self::Gemma3(m) => m.forward(&x, pos)?,
        };
        // Some return [1, vocab], others [1, seq, vocab]: the last row either way.
        let all = y.flatten_all()?.to_vec1::<f32>()?;
        let vocab = *y.dims().last().unwrap_or(&0);
        Ok(all[all.len().saturating_sub(vocab)..].to_vec())
    }
}
