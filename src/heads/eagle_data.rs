//! The EAGLE layer's training data: the target's greedy continuations of a prompt file, each
//! generated token with the final normed hidden state of the row that produced it, and (as
//! the Medusa heads' data) more continuations of the training prompts whose first few tokens
//! were sampled before decoding turned greedy. Drafting starts at the first generated token
//! (the prompt's last row produced it), so the data does too; saved once (safetensors) so
//! training can be rerun without regenerating it.

use std::path::Path;

use candle_core::{Device, Tensor};
use specgate_strategies::TokenId;

use crate::heads::training::{self, TrainError, Variants};
use crate::model::loaded::LoadedModel;

/// One continuation: `hidden[j]` ([hidden] each, flat) produced `tokens[j]`; the tokens
/// before `greedy_from` were sampled, not the target's greedy choice (no label for a draft).
#[derive(Debug, Clone)]
pub struct EagleSequence {
    pub prompt: usize,
    pub tokens: Vec<TokenId>,
    pub hidden: Vec<f32>,
    pub greedy_from: usize,
}

/// Greedy continuations of every prompt, up to `max_new` tokens each, plus the sampled-prefix
/// ones `variants` asks for (none for held-out prompts: every `holdout_every`-th).
pub fn generate(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
    variants: Variants,
    holdout_every: usize,
) -> Result<Vec<EagleSequence>, TrainError> {
    let all = training::continuations(lm, prompts, max_new, 32, variants, holdout_every)?;
    Ok(all
        .into_iter()
        .map(|c| EagleSequence {
            prompt: c.prompt,
            tokens: c.tokens,
            hidden: c.hidden.concat(),
            greedy_from: c.greedy_from,
        })
        .collect())
}

/// Each position's label, the token after it (None where that token was sampled: not the
/// target's greedy choice, so no draft should learn it); the last token has none.
pub fn labels(s: &EagleSequence) -> Vec<Option<TokenId>> {
    (1..s.tokens.len())
        .map(|j| (j >= s.greedy_from).then_some(s.tokens[j]))
        .collect()
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
    let greedy_from: Vec<u32> = seqs.iter().map(|s| s.greedy_from as u32).collect();
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
    map.insert(
        "greedy_from".to_string(),
        Tensor::from_vec(greedy_from, seqs.len(), dev)?,
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
    // Files written before sampled prefixes hold greedy continuations only.
    let greedy_from: Vec<u32> = match t.get("greedy_from") {
        Some(g) => g.to_vec1()?,
        None => vec![0; lens.len()],
    };
    if greedy_from.len() != lens.len() {
        return Err(TrainError::Data(format!("{}: greedy_from", path.display())));
    }
    let mut at = 0;
    let mut out = Vec::with_capacity(lens.len());
    for ((&len, &prompt), &from) in lens.iter().zip(&prompts).zip(&greedy_from) {
        let len = len as usize;
        if at + len > tokens.len() {
            return Err(TrainError::Data(format!("{}: truncated", path.display())));
        }
        out.push(EagleSequence {
            prompt: prompt as usize,
            tokens: tokens[at..at + len].to_vec(),
            hidden: hidden[at * dim..(at + len) * dim].to_vec(),
            greedy_from: from as usize,
        });
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_tokens_are_no_labels_and_greedy_ones_are() {
        let seq = |greedy_from| EagleSequence {
            prompt: 1,
            tokens: vec![10, 11, 12, 13],
            hidden: vec![0.0; 4],
            greedy_from,
        };
        assert_eq!(labels(&seq(0)), vec![Some(11), Some(12), Some(13)]);
        // Tokens 0 and 1 sampled: position 0's label (token 1) is none, position 1's is 12.
        assert_eq!(labels(&seq(2)), vec![None, Some(12), Some(13)]);
    }

    #[test]
    fn saved_data_loads_back_whole() {
        let dir = std::env::temp_dir().join(format!("eagle-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("data.safetensors");
        let seqs = vec![
            EagleSequence {
                prompt: 3,
                tokens: vec![5, 6],
                hidden: vec![0.5, 1.0, 1.5, 2.0],
                greedy_from: 0,
            },
            EagleSequence {
                prompt: 4,
                tokens: vec![7, 8, 9],
                hidden: vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
                greedy_from: 2,
            },
        ];
        save(&path, &seqs).expect("save");
        let back = load(&path).expect("load");
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(back.len(), 2);
        for (a, b) in seqs.iter().zip(&back) {
            assert_eq!(
                (a.prompt, &a.tokens, &a.hidden, a.greedy_from),
                (b.prompt, &b.tokens, &b.hidden, b.greedy_from)
            );
        }
    }
}
