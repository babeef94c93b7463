//! `specgate train-heads`: Medusa heads by self-distillation on CPU. The target generates
//! greedy continuations of a prompt file; every generated position gives the hidden state h_j
//! of the row that produced token y_j, and head i learns y_{j+1+i} from h_j, through the
//! frozen LM head (candle autograd, Adam with decoupled weight decay, seeded, checkpointed).
//! Accuracy is reported on held-out sequences.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use specgate_strategies::{argmax, MedusaHeads, TokenId};

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

/// Training pairs: hidden states [n, hidden] and, per row, the next `heads` tokens after the
/// one it produced ([n, heads]).
#[derive(Debug, Clone)]
pub struct HeadsData {
    pub hidden: Vec<f32>,
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
            self.labels
                .extend((0..self.heads).map(|i| tokens[j + 1 + i]));
        }
    }

    fn rows(&self, idx: &[usize], dev: &Device) -> Result<(Tensor, Tensor), TrainError> {
        let (d, h) = (self.dim, self.heads);
        let mut x = Vec::with_capacity(idx.len() * d);
        let mut y = Vec::with_capacity(idx.len() * h);
        for &i in idx {
            x.extend_from_slice(&self.hidden[i * d..(i + 1) * d]);
            y.extend_from_slice(&self.labels[i * h..(i + 1) * h]);
        }
        Ok((
            Tensor::from_vec(x, (idx.len(), d), dev)?,
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

/// Heads being trained, with Adam's moments.
pub struct Trainer {
    pub w: Var, // [heads, hidden, hidden]
    pub b: Var, // [heads, hidden]
    moments: [Tensor; 4],
    pub step: usize,
}

const BETAS: (f64, f64) = (0.9, 0.999);

impl Trainer {
    /// Zero heads (each starts as the identity residual).
    pub fn new(heads: usize, dim: usize) -> Result<Self, TrainError> {
        let dev = Device::Cpu;
        let w = Var::zeros((heads, dim, dim), DType::F32, &dev)?;
        let b = Var::zeros((heads, dim), DType::F32, &dev)?;
        let moments = [
            w.zeros_like()?,
            w.zeros_like()?,
            b.zeros_like()?,
            b.zeros_like()?,
        ];
        Ok(Self {
            w,
            b,
            moments,
            step: 0,
        })
    }

    /// Logits of every head for hidden states x [n, hidden]: [heads] × [n, vocab].
    fn logits(&self, x: &Tensor, lm: &Tensor) -> Result<Vec<Tensor>, TrainError> {
        let heads = self.w.dims()[0];
        let mut out = Vec::with_capacity(heads);
        for i in 0..heads {
            let w = self.w.get(i)?; // [hidden, hidden]
            let z = x.matmul(&w.t()?)?.broadcast_add(&self.b.get(i)?)?;
            let s = (x + z.silu()?)?;
            out.push(s.matmul(&lm.t()?)?);
        }
        Ok(out)
    }

    /// One optimisation step on a batch; returns the mean loss over heads.
    pub fn step(
        &mut self,
        x: &Tensor,
        y: &Tensor,
        lm: &Tensor,
        lr: f64,
        weight_decay: f64,
    ) -> Result<f32, TrainError> {
        let logits = self.logits(x, lm)?;
        let mut loss = Tensor::zeros((), DType::F32, x.device())?;
        for (i, l) in logits.iter().enumerate() {
            let target = y.narrow(1, i, 1)?.squeeze(1)?.contiguous()?;
            loss = (loss + candle_nn::loss::cross_entropy(l, &target)?)?;
        }
        let loss = (loss / logits.len() as f64)?;
        let grads = loss.backward()?;
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = BETAS;
        let params = [(&self.w, 0usize), (&self.b, 2usize)];
        for (var, m) in params {
            let Some(g) = grads.get(var) else {
                continue;
            };
            let mt = ((&self.moments[m] * b1)? + (g * (1.0 - b1))?)?;
            let vt = ((&self.moments[m + 1] * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let m_hat = (&mt / (1.0 - b1.powi(t)))?;
            let v_hat = (&vt / (1.0 - b2.powi(t)))?;
            let update = (m_hat / (v_hat.sqrt()? + 1e-8)?)?;
            let decayed = (var.as_tensor() * (1.0 - lr * weight_decay))?;
            var.set(&(decayed - (update * lr)?)?)?;
            self.moments[m] = mt;
            self.moments[m + 1] = vt;
        }
        Ok(loss.to_scalar::<f32>()?)
    }

    /// Top-1 and top-5 accuracy per head on `data`.
    pub fn accuracy(&self, data: &HeadsData, lm: &Tensor) -> Result<Vec<(f64, f64)>, TrainError> {
        let heads = data.heads;
        let mut hits = vec![(0usize, 0usize); heads];
        let idx: Vec<usize> = (0..data.len()).collect();
        for chunk in idx.chunks(128) {
            let (x, _) = data.rows(chunk, &Device::Cpu)?;
            for (i, l) in self.logits(&x, lm)?.iter().enumerate() {
                for (r, row) in l.to_vec2::<f32>()?.iter().enumerate() {
                    let label = data.labels[chunk[r] * heads + i] as usize;
                    let above = row.iter().filter(|&&v| v > row[label]).count();
                    hits[i].0 += usize::from(above == 0);
                    hits[i].1 += usize::from(above < 5);
                }
            }
        }
        let n = data.len().max(1) as f64;
        Ok(hits
            .into_iter()
            .map(|(a, b)| (a as f64 / n, b as f64 / n))
            .collect())
    }

    pub fn heads(&self) -> Result<MedusaHeads, TrainError> {
        let (heads, dim) = (self.w.dims()[0], self.w.dims()[1]);
        let mut out = MedusaHeads::zeros(0, dim);
        for i in 0..heads {
            out.w.push(self.w.get(i)?.flatten_all()?.to_vec1::<f32>()?);
            out.b.push(self.b.get(i)?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// Everything needed to resume: weights, Adam moments, step.
    pub fn save_checkpoint(&self, path: &Path) -> Result<(), TrainError> {
        let mut map: HashMap<String, Tensor> = HashMap::new();
        map.insert("w".into(), self.w.as_tensor().clone());
        map.insert("b".into(), self.b.as_tensor().clone());
        for (i, m) in self.moments.iter().enumerate() {
            map.insert(format!("moment{i}"), m.clone());
        }
        map.insert(
            "step".into(),
            Tensor::new(&[self.step as u32], &Device::Cpu)?,
        );
        candle_core::safetensors::save(&map, path)?;
        Ok(())
    }

    pub fn load_checkpoint(path: &Path) -> Result<Self, TrainError> {
        let mut t = candle_core::safetensors::load(path, &Device::Cpu)?;
        let mut take = |name: &str| {
            t.remove(name)
                .ok_or_else(|| TrainError::Data(format!("checkpoint lacks {name}")))
        };
        let w = Var::from_tensor(&take("w")?)?;
        let b = Var::from_tensor(&take("b")?)?;
        let moments = [
            take("moment0")?,
            take("moment1")?,
            take("moment2")?,
            take("moment3")?,
        ];
        let step = take("step")?.to_vec1::<u32>()?[0] as usize;
        Ok(Self {
            w,
            b,
            moments,
            step,
        })
    }
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
    lm: &Tensor,
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
        let (x, y) = data.rows(&idx, &Device::Cpu)?;
        // Cosine decay to 10% of the peak.
        let progress = trainer.step as f64 / s.steps as f64;
        let rate = s.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()));
        last = trainer.step(&x, &y, lm, rate, 0.0)?;
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
    fn mean_loss(trainer: &Trainer, data: &HeadsData, lm: &Tensor) -> Result<f32, TrainError> {
        let idx: Vec<usize> = (0..data.len().min(256)).collect();
        let (x, y) = data.rows(&idx, &Device::Cpu)?;
        let logits = trainer.logits(&x, lm)?;
        let mut total = 0.0;
        for (i, l) in logits.iter().enumerate() {
            let target = y.narrow(1, i, 1)?.squeeze(1)?.contiguous()?;
            total += candle_nn::loss::cross_entropy(l, &target)?.to_scalar::<f32>()?;
        }
        Ok(total / logits.len() as f32)
    }

    /// Hidden states in 8 dimensions, a vocabulary of 16, and labels that a residual head can
    /// learn: head i's label is the argmax of a fixed projection of h.
    fn synthetic(n: usize, heads: usize) -> (HeadsData, Tensor) {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (d, v) = (8, 16);
        let lm: Vec<f32> = (0..v * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let proj: Vec<Vec<f32>> = (0..heads)
            .map(|_| (0..v * d).map(|_| rng.random_range(-1.0..1.0)).collect())
            .collect();
        let mut data = HeadsData {
            hidden: Vec::new(),
            labels: Vec::new(),
            dim: d,
            heads,
        };
        for _ in 0..n {
            let h: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
            for p in &proj {
                let scores: Vec<f32> = p
                    .chunks(d)
                    .map(|row| row.iter().zip(&h).map(|(a, b)| a * b).sum())
                    .collect();
                data.labels.push(argmax(&scores));
            }
            data.hidden.extend(h);
        }
        let lm = Tensor::from_vec(lm, (v, d), &Device::Cpu).unwrap();
        (data, lm)
    }

    #[test]
    fn training_lowers_the_loss_and_raises_accuracy() {
        let (data, lm) = synthetic(512, 2);
        let mut t = Trainer::new(2, 8).unwrap();
        let before = mean_loss(&t, &data, &lm).unwrap();
        let acc_before = t.accuracy(&data, &lm).unwrap();
        let s = Schedule {
            steps: 300,
            batch: 32,
            lr: 3e-2,
            seed: 0,
        };
        train(&mut t, &data, &lm, s, 300, None, &mut std::io::sink()).unwrap();
        let after = mean_loss(&t, &data, &lm).unwrap();
        let acc_after = t.accuracy(&data, &lm).unwrap();
        assert!(after < before * 0.7, "loss {before} → {after}");
        for (b, a) in acc_before.iter().zip(&acc_after) {
            assert!(a.0 > b.0 + 0.15, "top-1 {:?} → {:?}", acc_before, acc_after);
            assert!(a.1 >= a.0);
        }
        // What the drafter runs computes what training computed.
        let heads = t.heads().unwrap();
        let (x, _) = data.rows(&[0], &Device::Cpu).unwrap();
        let logits = t.logits(&x, &lm).unwrap();
        let states = heads.states(&data.hidden[..8], 2);
        let lm_rows = lm.to_vec2::<f32>().unwrap();
        for i in 0..2 {
            let want = logits[i].to_vec2::<f32>().unwrap()[0].clone();
            let s = &states[i * 8..(i + 1) * 8];
            for (v, row) in lm_rows.iter().enumerate() {
                let got: f32 = row.iter().zip(s).map(|(a, b)| a * b).sum();
                assert!((got - want[v]).abs() < 1e-4, "head {i} token {v}");
            }
        }
    }

    #[test]
    fn a_resumed_run_matches_an_uninterrupted_one() {
        let (data, lm) = synthetic(200, 2);
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
        train(&mut whole, &data, &lm, s, 30, None, sink).unwrap();
        let mut first = Trainer::new(2, 8).unwrap();
        train(&mut first, &data, &lm, s, 20, Some((&ckpt, 10)), sink).unwrap();
        let mut restarted = Trainer::load_checkpoint(&ckpt).unwrap();
        assert_eq!(restarted.step, 20);
        train(&mut restarted, &data, &lm, s, 30, None, sink).unwrap();
        let (a, b) = (whole.heads().unwrap(), restarted.heads().unwrap());
        let diff = a.w[0]
            .iter()
            .zip(&b.w[0])
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-6, "resumed weights differ by {diff}");
    }
}
