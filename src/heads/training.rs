//! `specgate train-heads`: Medusa heads by self-distillation on CPU. The target generates
//! greedy continuations of a prompt file (and, if asked, more that start with a few sampled
//! tokens); every generated position gives the hidden state h_j of the row that produced
//! token y_j, and head i learns y_{j+1+i} from h_j and y_j, through the frozen LM head (see
//! `heads::trainer`; seeded, checkpointed). Accuracy is reported on held-out sequences.

use std::path::Path;

use candle_core::{Device, Tensor};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use specgate_strategies::{argmax, SamplingParams, TokenId};

pub use crate::heads::trainer::{
    frozen_head, lm_head_f32, masked_cross_entropy, Accuracy, Batch, FrozenHead, Trainer,
};

use crate::model::loaded::LoadedModel;
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

    /// Pairs from one generated sequence: `hidden[j]` produced `tokens[j]`; positions before
    /// `from` are skipped (their labels would include sampled tokens).
    fn push_sequence(&mut self, hidden: &[Vec<f32>], tokens: &[TokenId], from: usize) {
        for j in from..tokens.len().saturating_sub(self.heads) {
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
            y.extend(
                self.labels[i * h..(i + 1) * h]
                    .iter()
                    .map(|&t| frozen.column(t)),
            );
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

/// Which continuations to generate: every prompt's greedy one, and for prompts that are not
/// held out, `extra` more whose first 1..=`max_prefix` tokens are sampled (temperature 1,
/// top-p 0.95, seeded) before decoding turns greedy. The sampled prefix puts the target in
/// states its greedy path never visits; the greedy rest keeps the labels what a greedy
/// request will be verified against.
#[derive(Debug, Clone, Copy)]
pub struct Variants {
    pub extra: usize,
    pub max_prefix: usize,
    pub seed: u64,
}

impl Variants {
    pub const NONE: Variants = Variants {
        extra: 0,
        max_prefix: 0,
        seed: 0,
    };
}

/// One generated continuation: `hidden[j]` produced `tokens[j]`; `tokens[greedy_from..]` are
/// the target's greedy choices given the prompt and everything before them.
#[derive(Debug, Clone)]
pub struct Continuation {
    pub prompt: usize,
    pub tokens: Vec<TokenId>,
    pub hidden: Vec<Vec<f32>>,
    pub greedy_from: usize,
}

/// The continuations `variants` asks for, `batch` sequences per ragged pass. Prompt p is held
/// out when p is a multiple of `holdout_every`.
pub fn continuations(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
    batch: usize,
    variants: Variants,
    holdout_every: usize,
) -> Result<Vec<Continuation>, TrainError> {
    let jobs = jobs(prompts.len(), variants, holdout_every);
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(batch.max(1)) {
        out.extend(continue_batch(lm, prompts, chunk, max_new, variants)?);
    }
    Ok(out)
}

fn held_out(prompt: usize, holdout_every: usize) -> bool {
    prompt.is_multiple_of(holdout_every.max(2))
}

/// (prompt, variant) pairs to generate, variant 0 being the greedy continuation.
fn jobs(prompts: usize, variants: Variants, holdout_every: usize) -> Vec<(usize, usize)> {
    (0..prompts)
        .flat_map(|p| {
            let extra = if held_out(p, holdout_every) {
                0
            } else {
                variants.extra
            };
            (0..=extra).map(move |v| (p, v))
        })
        .collect()
}

/// One ragged batch of (prompt, variant) jobs, decoded together to `max_new` tokens or EOS.
fn continue_batch(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    jobs: &[(usize, usize)],
    max_new: usize,
    variants: Variants,
) -> Result<Vec<Continuation>, TrainError> {
    let eos = lm.tokenizer.eos();
    let sampled = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 0.95,
        min_p: 0.0,
    };
    let opts = ForwardOptions {
        hidden: true,
        ..ForwardOptions::default()
    };
    let mut rngs: Vec<ChaCha8Rng> = jobs
        .iter()
        .map(|&(p, v)| ChaCha8Rng::seed_from_u64(variants.seed ^ ((p as u64) << 16 | v as u64)))
        .collect();
    let mut seqs: Vec<Continuation> = jobs
        .iter()
        .zip(&mut rngs)
        .map(|(&(p, v), rng)| Continuation {
            prompt: p,
            tokens: Vec::new(),
            hidden: Vec::new(),
            greedy_from: if v == 0 {
                0
            } else {
                rng.random_range(1..=variants.max_prefix.max(1))
            },
        })
        .collect();
    let ids: Vec<_> = jobs.iter().map(|_| lm.model.new_sequence()).collect();
    let mut inputs: Vec<Vec<TokenId>> = jobs.iter().map(|&(p, _)| prompts[p].clone()).collect();
    let mut live: Vec<usize> = (0..jobs.len()).collect();
    for _ in 0..max_new {
        if live.is_empty() {
            break;
        }
        let items: Vec<BatchItem<'_>> = live
            .iter()
            .map(|&s| BatchItem {
                tree: None,
                seq: ids[s],
                tokens: &inputs[s],
                logits: LogitRows::Last,
            })
            .collect();
        let out = lm.model.forward(&items, opts)?;
        let mut next_live = Vec::new();
        for (slot, &s) in live.iter().enumerate() {
            let c = &mut seqs[s];
            let y = if c.tokens.len() < c.greedy_from {
                sampled.sample(out.row(slot, 0), &mut rngs[s])
            } else {
                argmax(out.row(slot, 0))
            };
            c.hidden.push(out.item_hidden(slot).to_vec());
            c.tokens.push(y);
            inputs[s] = vec![y];
            if y != eos {
                next_live.push(s);
            }
        }
        live = next_live;
    }
    for id in ids {
        lm.model.release(id);
    }
    Ok(seqs)
}

/// Greedy continuations of `prompts` (already token ids), plus the sampled-prefix ones
/// `variants` asks for; returns (training pairs, held-out pairs) split by prompt.
pub fn collect(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
    heads: usize,
    variants: Variants,
    holdout_every: usize,
) -> Result<(HeadsData, HeadsData), TrainError> {
    let jobs = jobs(prompts.len(), variants, holdout_every);
    collect_jobs(lm, prompts, &jobs, max_new, heads, variants, holdout_every)
}

/// The held-out pairs `collect` would give, without generating the training ones: what a
/// report or a calibration of existing heads measures them on.
pub fn collect_held_out(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
    heads: usize,
    holdout_every: usize,
) -> Result<HeadsData, TrainError> {
    let jobs: Vec<_> = jobs(prompts.len(), Variants::NONE, holdout_every)
        .into_iter()
        .filter(|&(p, _)| held_out(p, holdout_every))
        .collect();
    let (_, held) = collect_jobs(
        lm,
        prompts,
        &jobs,
        max_new,
        heads,
        Variants::NONE,
        holdout_every,
    )?;
    Ok(held)
}

/// The target's greedy tokens continuing every `every`-th training prompt (held-out prompts
/// left out): what a draft vocabulary is ranked on without training heads.
pub fn training_tokens(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    max_new: usize,
    holdout_every: usize,
    every: usize,
) -> Result<Vec<TokenId>, TrainError> {
    let jobs: Vec<_> = (0..prompts.len())
        .filter(|&p| !held_out(p, holdout_every))
        .step_by(every.max(1))
        .map(|p| (p, 0))
        .collect();
    let mut tokens = Vec::new();
    for chunk in jobs.chunks(32) {
        for c in continue_batch(lm, prompts, chunk, max_new, Variants::NONE)? {
            tokens.extend_from_slice(&c.tokens[c.greedy_from.min(c.tokens.len())..]);
        }
    }
    Ok(tokens)
}

/// Every token a drafter had to guess in `data`, once each (head 0's labels).
pub fn label_tokens(data: &HeadsData) -> Vec<TokenId> {
    data.labels
        .iter()
        .step_by(data.heads.max(1))
        .copied()
        .collect()
}

fn collect_jobs(
    lm: &mut LoadedModel,
    prompts: &[Vec<TokenId>],
    jobs: &[(usize, usize)],
    max_new: usize,
    heads: usize,
    variants: Variants,
    holdout_every: usize,
) -> Result<(HeadsData, HeadsData), TrainError> {
    let empty = HeadsData {
        hidden: Vec::new(),
        pending: Vec::new(),
        labels: Vec::new(),
        dim: lm.model.config().hidden,
        heads,
    };
    let (mut train, mut held) = (empty.clone(), empty);
    // Batch by batch, so only one batch's hidden states are held twice.
    for chunk in jobs.chunks(32) {
        for c in continue_batch(lm, prompts, chunk, max_new, variants)? {
            let into = if held_out(c.prompt, holdout_every) {
                &mut held
            } else {
                &mut train
            };
            into.push_sequence(&c.hidden, &c.tokens, c.greedy_from.saturating_sub(1));
        }
    }
    Ok((train, held))
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
    /// The heads' fitted temperatures (see `heads_calibration`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::heads::calibration::Calibration>,
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
#[path = "training_tests.rs"]
mod tests;
