//! `specgate train-heads`: Medusa heads by self-distillation on CPU. The target generates
//! greedy continuations of a prompt file; every generated position gives the hidden state h_j
//! of the row that produced token y_j, and head i learns y_{j+1+i} from h_j and y_j, through
//! the frozen LM head (see `heads_trainer`; seeded, checkpointed). Accuracy is reported on
//! held-out sequences.

use std::path::Path;

use candle_core::{Device, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use specgate_strategies::{argmax, TokenId};

pub use crate::heads_trainer::{masked_cross_entropy, Accuracy, Batch, FrozenHead, Trainer};

use crate::loaded::LoadedModel;
use crate::model::{BatchItem, ForwardOptions, LogitRows};

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("model: {0}")]
    Model(#[from] crate::model::ModelError),
    #[error("{0}")]
    Data(String),
}

/// Training pairs: hidden states [n, hidden], the token each row produced ([n]: the pending
/// token when drafting) and the next `heads` tokens after it ([n, heads]).
#[derive(Debug, Clone)]
pub struct HeadsData {
    pub hidden: Vec<f32>,
    pub pending: Vec<u32>,
    pub labels: Vec<u32>,
    pub dim: usize,
    pub heads: usize,
}

impl HeadsData {
    pub fn len(&self) -> usize {
        self.labels.len() / self.heads.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pairs from one generated sequence: `hidden[j]` produced `tokens[j]`.
    fn push_sequence(&mut self, hidden: &[Vec<f32>], tokens: &[TokenId]) {
        for j in 0..tokens.len().saturating_sub(self.heads) {
            self.hidden.extend_from_slice(&hidden[j]);
            self.pending.push(tokens[j]);
            self.labels
                .extend((0..self.heads).map(|i| tokens[j + 1 + i]));
        }
    }

    /// The pairs `idx` as a batch.
    pub fn rows(&self, idx: &[usize], frozen: &FrozenHead) -> Result<Batch, TrainError> {
        let (d, h, dev) = (self.dim, self.heads, &Device::Cpu);
        let mut x = Vec::with_capacity(idx.len() * d);
        let mut y = Vec::with_capacity(idx.len() * h);
        let mut pending = Vec::with_capacity(idx.len());
        for &i in idx {
            x.extend_from_slice(&self.hidden[i * d..(i + 1) * d]);
            y.extend_from_slice(&self.labels[i * h..(i + 1) * h]);
            pending.push(self.pending[i]);
        }
        let e = frozen.embed(&pending)?;
        let mut prev = vec![e.clone()];
        for head in 1..h {
            let before: Vec<u32> = idx.iter().map(|&i| self.labels[i * h + head - 1]).collect();
            prev.push(frozen.embed(&before)?);
        }
        Ok(Batch {
            x: Tensor::from_vec(x, (idx.len(), d), dev)?,
            e,
            prev,
            y: Tensor::from_vec(y, (idx.len(), h), dev)?,
        })
    }
}

/// Greedy continuations of `prompts` (already token ids), `batch` sequences per ragged pass;
/// returns (training pairs, held-out pairs) split by sequence.
pub fn collect(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
    batch: usize,
    heads: usize,
    holdout_every: usize,
) -> Result<(HeadsData, HeadsData), TrainError> {
    let dim = lm.model.config().hidden;
    let eos = lm.tokenizer.eos();
    let empty = HeadsData {
        hidden: Vec::new(),
        pending: Vec::new(),
        labels: Vec::new(),
        dim,
        heads,
    };
    let (mut train, mut held) = (empty.clone(), empty);
    let opts = ForwardOptions {
        hidden: true,
        ..ForwardOptions::default()
    };
    for (c, chunk) in prompts.chunks(batch.max(1)).enumerate() {
        let seqs: Vec<_> = chunk.iter().map(|_| lm.model.new_sequence()).collect();
        let mut inputs: Vec<Vec<TokenId>> = chunk.to_vec();
        let mut hidden: Vec<Vec<Vec<f32>>> = vec![Vec::new(); chunk.len()];
        let mut tokens: Vec<Vec<TokenId>> = vec![Vec::new(); chunk.len()];
        let mut live: Vec<usize> = (0..chunk.len()).collect();
        for _ in 0..max_new {
            if live.is_empty() {
                break;
            }
            let items: Vec<BatchItem<'_>> = live
                .iter()
                .map(|&s| BatchItem {
                    tree: None,
                    seq: seqs[s],
                    tokens: &inputs[s],
                    logits: LogitRows::Last,
                })
                .collect();
            let out = lm.model.forward(&items, opts)?;
            let mut next_live = Vec::new();
            for (slot, &s) in live.iter().enumerate() {
                let y = argmax(out.row(slot, 0));
                hidden[s].push(out.item_hidden(slot).to_vec());
                tokens[s].push(y);
                inputs[s] = vec![y];
                if y != eos {
                    next_live.push(s);
                }
            }
            live = next_live;
        }
        for (s, seq) in seqs.into_iter().enumerate() {
            lm.model.release(seq);
            let into = if (c * batch + s).is_multiple_of(holdout_every.max(2)) {
                &mut held
            } else {
                &mut train
            };
            into.push_sequence(&hidden[s], &tokens[s]);
        }
    }
    Ok((train, held))
}

/// The LM head as f32 [vocab, hidden] (dequantized once; frozen during training).
pub fn lm_head_f32(path: &Path) -> Result<Tensor, TrainError> {
    let (t, _) = crate::model::lm_head_tensor(path)?;
    Ok(t.dequantize(&Device::Cpu)?)
}

/// What a training run reports.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    pub prompts: usize,
    pub train_pairs: usize,
    pub heldout_pairs: usize,
    pub steps: usize,
    pub batch: usize,
    pub lr: f64,
    pub seconds_data: f64,
    pub seconds_train: f64,
    pub final_loss: f32,
    /// Per head: (top-1, top-5) accuracy on held-out sequences.
    pub heldout_accuracy: Vec<(f64, f64)>,
    /// Mean number of leading heads right on held-out sequences (see `Accuracy`).
    pub heldout_chain_length: f64,
}

/// The run's shape: its total steps (the learning-rate schedule spans them), batch size,
/// peak learning rate and seed.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub steps: usize,
    pub batch: usize,
    pub lr: f64,
    pub seed: u64,
}

/// Train on shuffled batches (seeded) up to step `until` of the schedule, checkpointing every
/// `every` steps; a resumed run takes exactly the steps an uninterrupted one would.
pub fn train(
    trainer: &mut Trainer,
    data: &HeadsData,
    frozen: &FrozenHead,
    s: Schedule,
    until: usize,
    checkpoint: Option<(&Path, usize)>,
    log: &mut dyn std::io::Write,
) -> Result<f32, TrainError> {
    if data.is_empty() {
        return Err(TrainError::Data("no training pairs".into()));
    }
    // The order depends on the seed and the epoch only.
    let mut order: Vec<usize> = Vec::new();
    let mut last = f32::NAN;
    let mut epoch = usize::MAX;
    while trainer.step < until.min(s.steps) {
        let at = trainer.step * s.batch;
        if at / data.len() != epoch {
            epoch = at / data.len();
            order = (0..data.len()).collect();
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(s.seed ^ epoch as u64));
        }
        let start = at % data.len();
        let idx: Vec<usize> = (0..s.batch)
            .map(|i| order[(start + i) % data.len()])
            .collect();
        let batch = data.rows(&idx, frozen)?;
        // Cosine decay to 10% of the peak.
        let progress = trainer.step as f64 / s.steps as f64;
        let rate = s.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()));
        last = trainer.step(&batch, frozen, rate, 0.0)?;
        if trainer.step.is_multiple_of(50) {
            let _ = writeln!(log, "step {} loss {last:.4}", trainer.step);
        }
        if let Some((path, every)) = checkpoint {
            if trainer.step.is_multiple_of(every.max(1)) {
                trainer.save_checkpoint(path)?;
            }
        }
    }
    Ok(last)
}

#[cfg(test)]
#[path = "train_heads_tests.rs"]
mod tests;
