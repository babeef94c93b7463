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

pub use crate::heads_trainer::{masked_cross_entropy, FrozenHead, Trainer};

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

    /// The pairs `idx` as tensors: hidden states, pending-token embeddings, labels.
    pub fn rows(
        &self,
        idx: &[usize],
        frozen: &FrozenHead,
    ) -> Result<(Tensor, Tensor, Tensor), TrainError> {
        let (d, h, dev) = (self.dim, self.heads, &Device::Cpu);
        let mut x = Vec::with_capacity(idx.len() * d);
        let mut y = Vec::with_capacity(idx.len() * h);
        let mut pending = Vec::with_capacity(idx.len());
        for &i in idx {
            x.extend_from_slice(&self.hidden[i * d..(i + 1) * d]);
            y.extend_from_slice(&self.labels[i * h..(i + 1) * h]);
            pending.push(self.pending[i]);
        }
        Ok((
            Tensor::from_vec(x, (idx.len(), d), dev)?,
            frozen.embed(&pending)?,
            Tensor::from_vec(y, (idx.len(), h), dev)?,
        ))
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
        last = trainer.step((&batch.0, &batch.1, &batch.2), frozen, rate, 0.0)?;
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
mod tests {
    use super::*;
    use rand::Rng;

    /// Mean loss over heads on the first 256 pairs.
    fn mean_loss(trainer: &Trainer, data: &HeadsData, frozen: &FrozenHead) -> f32 {
        let idx: Vec<usize> = (0..data.len().min(256)).collect();
        let (x, e, y) = data.rows(&idx, frozen).unwrap();
        let logits = trainer.logits(&x, &e, &frozen.lm).unwrap();
        let mut total = 0.0;
        for (i, l) in logits.iter().enumerate() {
            let target = y.narrow(1, i, 1).unwrap().squeeze(1).unwrap();
            let loss = candle_nn::loss::cross_entropy(l, &target.contiguous().unwrap());
            total += loss.unwrap().to_scalar::<f32>().unwrap();
        }
        total / logits.len() as f32
    }

    /// Hidden states in 8 dimensions, a vocabulary of 16 of which the first 12 have an
    /// embedding, random pending tokens, and labels that a residual head can learn: head i's
    /// label is the argmax of a fixed projection of h, or with `copy` head 0's label is the
    /// pending token (learnable from its embedding only).
    fn synthetic(n: usize, heads: usize, copy: bool) -> (HeadsData, FrozenHead) {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (d, v) = (8, 16);
        let lm: Vec<f32> = (0..v * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let proj: Vec<Vec<f32>> = (0..heads)
            .map(|_| (0..v * d).map(|_| rng.random_range(-1.0..1.0)).collect())
            .collect();
        let mut data = HeadsData {
            hidden: Vec::new(),
            pending: Vec::new(),
            labels: Vec::new(),
            dim: d,
            heads,
        };
        for _ in 0..n {
            let h: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
            let pending = rng.random_range(0..v as u32);
            for (i, p) in proj.iter().enumerate() {
                let scores: Vec<f32> = p
                    .chunks(d)
                    .map(|row| row.iter().zip(&h).map(|(a, b)| a * b).sum())
                    .collect();
                data.labels.push(if copy && i == 0 {
                    pending
                } else {
                    argmax(&scores)
                });
            }
            data.hidden.extend(h);
            data.pending.push(pending);
        }
        let lm = Tensor::from_vec(lm, (v, d), &Device::Cpu).unwrap();
        (data, FrozenHead::new(lm, 12, v).unwrap())
    }

    #[test]
    fn training_lowers_the_loss_and_raises_accuracy() {
        let (data, frozen) = synthetic(512, 2, false);
        let mut t = Trainer::new(2, 8).unwrap();
        let before = mean_loss(&t, &data, &frozen);
        let acc_before = t.accuracy(&data, &frozen).unwrap();
        let s = Schedule {
            steps: 300,
            batch: 32,
            lr: 3e-2,
            seed: 0,
        };
        train(&mut t, &data, &frozen, s, 300, None, &mut std::io::sink()).unwrap();
        let after = mean_loss(&t, &data, &frozen);
        let acc_after = t.accuracy(&data, &frozen).unwrap();
        assert!(after < before * 0.7, "loss {before} → {after}");
        for (b, a) in acc_before.iter().zip(&acc_after) {
            assert!(a.0 > b.0 + 0.15, "top-1 {:?} → {:?}", acc_before, acc_after);
            assert!(a.1 >= a.0);
        }
    }

    #[test]
    fn heads_learn_from_the_pending_token_and_draft_as_they_trained() {
        let (data, frozen) = synthetic(512, 2, true);
        let mut t = Trainer::new(2, 8).unwrap();
        let s = Schedule {
            steps: 400,
            batch: 32,
            lr: 3e-2,
            seed: 0,
        };
        train(&mut t, &data, &frozen, s, 400, None, &mut std::io::sink()).unwrap();
        // Head 0 copies the pending token: h says nothing of it, so only U can carry it; 12
        // of the 16 tokens have an embedding.
        let acc = t.accuracy(&data, &frozen).unwrap();
        assert!(acc[0].0 > 0.6, "copy head top-1 {:?}", acc[0]);
        // What the drafter runs computes what training computed, embedding included.
        let heads = t.heads().unwrap();
        let lm_rows = frozen.lm.to_vec2::<f32>().unwrap();
        for j in [0, 1, 2, 3] {
            let (x, e, _) = data.rows(&[j], &frozen).unwrap();
            let logits = t.logits(&x, &e, &frozen.lm).unwrap();
            let pending = data.pending[j] as usize;
            let row = (pending < 12).then(|| lm_rows[pending].clone());
            let states = heads.states(&data.hidden[j * 8..(j + 1) * 8], row.as_deref(), 2);
            for i in 0..2 {
                let want = logits[i].to_vec2::<f32>().unwrap()[0].clone();
                let s = &states[i * 8..(i + 1) * 8];
                for (v, row) in lm_rows.iter().enumerate() {
                    let got: f32 = row.iter().zip(s).map(|(a, b)| a * b).sum();
                    assert!((got - want[v]).abs() < 1e-4, "pair {j} head {i} token {v}");
                }
            }
        }
    }

    #[test]
    fn labels_the_drafter_cannot_propose_teach_nothing_and_count_as_misses() {
        let logits = Tensor::new(
            &[[0.5f32, 2.0, -1.0, 0.0], [3.0, 0.0, 0.0, 1.0]],
            &Device::Cpu,
        )
        .unwrap();
        let masked = masked_cross_entropy(&logits, &[1, 7]).unwrap();
        let first = logits.narrow(0, 0, 1).unwrap();
        let want =
            candle_nn::loss::cross_entropy(&first, &Tensor::new(&[1u32], &Device::Cpu).unwrap())
                .unwrap();
        let (m, w) = (
            masked.to_scalar::<f32>().unwrap(),
            want.to_scalar::<f32>().unwrap(),
        );
        assert!((m - w).abs() < 1e-6, "masked {m} vs first row alone {w}");
        let none = masked_cross_entropy(&logits, &[4, 9]).unwrap();
        assert_eq!(none.to_scalar::<f32>().unwrap(), 0.0);
        // Draft vocabulary 8 of 16: every label from 8 on is a miss, whatever the logits.
        let (mut data, full) = synthetic(64, 1, false);
        data.labels.iter_mut().for_each(|y| *y = 8 + *y % 8);
        let cut = FrozenHead::new(full.lm.clone(), 12, 8).unwrap();
        let t = Trainer::new(1, 8).unwrap();
        assert_eq!(cut.draft_vocab(), 8);
        assert_eq!(t.accuracy(&data, &cut).unwrap(), vec![(0.0, 0.0)]);
        assert!(t.accuracy(&data, &full).unwrap()[0].1 > 0.0);
    }

    #[test]
    fn a_resumed_run_matches_an_uninterrupted_one() {
        let (data, frozen) = synthetic(200, 2, true);
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("c.safetensors");
        let s = Schedule {
            steps: 30,
            batch: 16,
            lr: 1e-2,
            seed: 5,
        };
        let sink = &mut std::io::sink();
        let mut whole = Trainer::new(2, 8).unwrap();
        train(&mut whole, &data, &frozen, s, 30, None, sink).unwrap();
        let mut first = Trainer::new(2, 8).unwrap();
        train(&mut first, &data, &frozen, s, 20, Some((&ckpt, 10)), sink).unwrap();
        let mut restarted = Trainer::load_checkpoint(&ckpt).unwrap();
        assert_eq!(restarted.step, 20);
        train(&mut restarted, &data, &frozen, s, 30, None, sink).unwrap();
        let (a, b) = (whole.heads().unwrap(), restarted.heads().unwrap());
        for (x, y) in [(&a.w[0], &b.w[0]), (&a.u[0], &b.u[0])] {
            let diff = x
                .iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f32::max);
            assert!(diff < 1e-6, "resumed weights differ by {diff}");
        }
    }
}
