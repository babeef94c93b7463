//! The EAGLE layer's training data: the target's greedy continuations of a prompt file, each
//! generated token with the final normed hidden state of the row that produced it. Drafting
//! starts at the first generated token (the prompt's last row produced it), so the data does
//! too; saved once (safetensors) so training can be rerun without regenerating it.

use std::path::Path;

use candle_core::{Device, Tensor};
use specgate_strategies::TokenId;

use crate::heads::training::{self, TrainError, Variants};
use crate::model::loaded::LoadedModel;

/// One continuation: `hidden[j]` ([hidden] each, flat) produced `tokens[j]`.
#[derive(Debug, Clone)]
pub struct EagleSequence {
    pub prompt: usize,
    pub tokens: Vec<TokenId>,
    pub hidden: Vec<f32>,
}

/// Greedy continuations of every prompt, up to `max_new` tokens each.
pub fn generate(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
) -> Result<Vec<EagleSequence>, TrainError> {
    let all = training::continuations(lm, prompts, max_new, 32, Variants::NONE, usize::MAX)?;
    Ok(all
        .into_iter()
        .map(|c| EagleSequence {
            prompt: c.prompt,
            tokens: c.tokens,
            hidden: c.hidden.concat(),
        })
        .collect())
}

/// Split by prompt: every `every`-th prompt is held out.
pub fn split(seqs: Vec<EagleSequence>, every: usize) -> (Vec<EagleSequence>, Vec<EagleSequence>) {
    seqs.into_iter()
        .partition(|s| !s.prompt.is_multiple_of(every.max(2)))
}

pub fn save(path: &Path, seqs: &[EagleSequence]) -> Result<(), TrainError> {
    let dev = &Device::Cpu;
    let dim = seqs
        .iter()
        .find(|s| !s.tokens.is_empty())
        .map_or(0, |s| s.hidden.len() / s.tokens.len());
    let tokens: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.clone()).collect();
    let hidden: Vec<f32> = seqs.iter().flat_map(|s| s.hidden.clone()).collect();
    let lens: Vec<u32> = seqs.iter().map(|s| s.tokens.len() as u32).collect();
    let prompts: Vec<u32> = seqs.iter().map(|s| s.prompt as u32).collect();
    let n = tokens.len();
    let mut map = std::collections::HashMap::new();
    map.insert("tokens".to_string(), Tensor::from_vec(tokens, n, dev)?);
    map.insert(
        "hidden".to_string(),
        Tensor::from_vec(hidden, (n, dim), dev)?,
    );
    map.insert("lens".to_string(), Tensor::from_vec(lens, seqs.len(), dev)?);
    map.insert(
        "prompts".to_string(),
        Tensor::from_vec(prompts, seqs.len(), dev)?,
    );
    candle_core::safetensors::save(&map, path)?;
    Ok(())
}

pub fn load(path: &Path) -> Result<Vec<EagleSequence>, TrainError> {
    let t = candle_core::safetensors::load(path, &Device::Cpu)?;
    let get = |name: &str| {
        t.get(name)
            .ok_or_else(|| TrainError::Data(format!("{}: no {name:?}", path.display())))
    };
    let dim = get("hidden")?.dims()[1];
    let tokens: Vec<u32> = get("tokens")?.to_vec1()?;
    let hidden: Vec<f32> = get("hidden")?.flatten_all()?.to_vec1()?;
    let lens: Vec<u32> = get("lens")?.to_vec1()?;
    let prompts: Vec<u32> = get("prompts")?.to_vec1()?;
    let mut at = 0;
    let mut out = Vec::with_capacity(lens.len());
    for (&len, &prompt) in lens.iter().zip(&prompts) {
        let len = len as usize;
        if at + len > tokens.len() {
            return Err(TrainError::Data(format!("{}: truncated", path.display())));
        }
        out.push(EagleSequence {
            prompt: prompt as usize,
            tokens: tokens[at..at + len].to_vec(),
            hidden: hidden[at * dim..(at + len) * dim].to_vec(),
        });
        at += len;
    }
    Ok(out)
}
