//! The Medusa heads under training (candle autograd, Adam with decoupled weight decay) and
//! the frozen parts of the target they train through.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use specgate_strategies::MedusaHeads;

use crate::heads::draft_vocab::DraftVocab;
use crate::heads::training::{HeadsData, TrainError};

/// The frozen target parts training reads: the LM head's rows of the draft vocabulary
/// [draft vocab, hidden] — the tokens the drafter can propose (`draft_vocab`), so training
/// spends nothing on logits drafting never computes; labels become their columns — and the
/// embedding table the token-conditioned heads read: the LM head's first `embed_vocab` rows
/// and a zero row for every later token, as the drafter sees it (`EMBED_VOCAB`).
pub struct FrozenHead {
    pub lm: Tensor,
    emb: Tensor,
    embed_vocab: usize,
    /// Token id → column of `lm` (`u32::MAX`: not draftable).
    columns: Vec<u32>,
}

impl FrozenHead {
    pub fn new(lm: Tensor, embed_vocab: usize, draft: &DraftVocab) -> Result<Self, TrainError> {
        let (vocab, dim) = lm.dims2()?;
        let embed_vocab = embed_vocab.min(vocab);
        let zero = Tensor::zeros((1, dim), DType::F32, lm.device())?;
        let emb = Tensor::cat(&[&lm.narrow(0, 0, embed_vocab)?, &zero], 0)?;
        let ids = Tensor::from_slice(draft.ids(), draft.len(), lm.device())?;
        Ok(Self {
            lm: lm.index_select(&ids, 0)?.contiguous()?,
            emb,
            embed_vocab,
            columns: draft.columns(vocab),
        })
    }

    /// How many token ids the heads can draft: a label's column past this is not learnable.
    pub fn draft_vocab(&self) -> usize {
        self.lm.dims()[0]
    }

    /// Token `id`'s column among the draft logits (`u32::MAX` when it cannot be drafted):
    /// what a label is scored against.
    pub fn column(&self, id: u32) -> u32 {
        self.columns.get(id as usize).copied().unwrap_or(u32::MAX)
    }

    /// Embeddings of the pending tokens: [n, hidden].
    pub fn embed(&self, pending: &[u32]) -> Result<Tensor, TrainError> {
        let cut = self.embed_vocab as u32;
        let ids: Vec<u32> = pending.iter().map(|&t| t.min(cut)).collect();
        let ids = Tensor::from_vec(ids, pending.len(), self.emb.device())?;
        Ok(self.emb.index_select(&ids, 0)?)
    }
}

/// The LM head as f32 [vocab, hidden] (dequantized once; frozen during training).
pub fn lm_head_f32(path: &Path) -> Result<Tensor, TrainError> {
    let (t, _) = crate::model::lm_head_tensor(path)?;
    Ok(t.dequantize(&Device::Cpu)?)
}

/// The frozen LM head the served heads train and calibrate against: the model's LM head
/// over the drafter's embedding vocabulary (`heads::bundle`) and the draft vocabulary `draft`.
pub fn frozen_head(path: &Path, draft: &DraftVocab) -> Result<FrozenHead, TrainError> {
    FrozenHead::new(lm_head_f32(path)?, crate::heads::bundle::EMBED_VOCAB, draft)
}

/// Mean cross-entropy of `logits` [n, vocab] against `labels` [n] over the rows whose label
/// lies inside the vocabulary (a label the drafter cannot propose teaches nothing); zero
/// when no row counts.
pub fn masked_cross_entropy(logits: &Tensor, labels: &[u32]) -> Result<Tensor, TrainError> {
    let (n, vocab) = logits.dims2()?;
    let dev = logits.device();
    let inside: Vec<f32> = labels
        .iter()
        .map(|&y| f32::from(u8::from((y as usize) < vocab)))
        .collect();
    let clamped: Vec<u32> = labels.iter().map(|&y| y.min(vocab as u32 - 1)).collect();
    let count = inside.iter().sum::<f32>().max(1.0);
    let mask = Tensor::from_vec(inside, n, dev)?;
    let idx = Tensor::from_vec(clamped, (n, 1), dev)?;
    let log_p = candle_nn::ops::log_softmax(logits, 1)?
        .gather(&idx, 1)?
        .squeeze(1)?;
    Ok(((log_p * mask)?.sum_all()? * (-1.0 / f64::from(count)))?)
}

/// A batch of training pairs: hidden states x [n, hidden], pending-token embeddings
/// e [n, hidden], per head the embedding of the token before its target (`prev[0]` is e;
/// later heads read the true token there, as a draft accepted so far has it) and the labels'
/// columns in the draft vocabulary [n, heads] (`u32::MAX`: not draftable).
pub struct Batch {
    pub x: Tensor,
    pub e: Tensor,
    pub prev: Vec<Tensor>,
    pub y: Tensor,
}

/// Held-out accuracy: per head (top-1, top-5), and the mean number of leading heads whose
/// top-1 is right — the draft tokens a greedy chain of every head gets accepted per round
/// (before the target's own token). Chained heads read the true previous token in training,
/// which is exactly what they read in a chain accepted so far, so this holds for them too.
#[derive(Debug, Clone, PartialEq)]
pub struct Accuracy {
    pub per_head: Vec<(f64, f64)>,
    pub chain_length: f64,
}

/// Heads being trained, with Adam's moments.
pub struct Trainer {
    pub w: Var, // [heads, hidden, hidden]
    pub u: Var, // [heads, hidden, hidden]: the pending token's embedding
    pub v: Var, // [heads, hidden, hidden]: the embedding of the token before the target
    pub b: Var, // [heads, hidden]
    moments: [Tensor; 8],
    pub step: usize,
}

const BETAS: (f64, f64) = (0.9, 0.999);

impl Trainer {
    /// Zero heads (each starts as the identity residual).
    pub fn new(heads: usize, dim: usize) -> Result<Self, TrainError> {
        let dev = Device::Cpu;
        let w = Var::zeros((heads, dim, dim), DType::F32, &dev)?;
        let u = Var::zeros((heads, dim, dim), DType::F32, &dev)?;
        let v = Var::zeros((heads, dim, dim), DType::F32, &dev)?;
        let b = Var::zeros((heads, dim), DType::F32, &dev)?;
        let moments = [
            w.zeros_like()?,
            w.zeros_like()?,
            u.zeros_like()?,
            u.zeros_like()?,
            v.zeros_like()?,
            v.zeros_like()?,
            b.zeros_like()?,
            b.zeros_like()?,
        ];
        Ok(Self {
            w,
            u,
            v,
            b,
            moments,
            step: 0,
        })
    }

    /// A trainer holding `heads` (absent U or V, or a V folded into U, read as zeros): to
    /// measure or calibrate heads already trained. Adam starts afresh.
    pub fn from_heads(heads: &MedusaHeads) -> Result<Self, TrainError> {
        let (n, d) = (heads.num_heads(), heads.hidden);
        let stack = |m: &[Vec<f32>], len: usize| -> Result<Tensor, TrainError> {
            let mut flat = vec![0.0f32; n * len];
            for (i, w) in m.iter().enumerate().take(n) {
                if w.len() == len {
                    flat[i * len..(i + 1) * len].copy_from_slice(w);
                }
            }
            Ok(Tensor::from_vec(flat, n * len, &Device::Cpu)?)
        };
        let t = Self::new(n, d)?;
        t.w.set(&stack(&heads.w, d * d)?.reshape((n, d, d))?)?;
        t.u.set(&stack(&heads.u, d * d)?.reshape((n, d, d))?)?;
        t.v.set(&stack(&heads.v, d * d)?.reshape((n, d, d))?)?;
        t.b.set(&stack(&heads.b, d)?.reshape((n, d))?)?;
        Ok(t)
    }

    /// Logits of every head for a batch: [heads] × [n, vocab].
    pub fn logits(&self, batch: &Batch, lm: &Tensor) -> Result<Vec<Tensor>, TrainError> {
        let (x, e) = (&batch.x, &batch.e);
        let heads = self.w.dims()[0];
        let mut out = Vec::with_capacity(heads);
        for (i, prev) in batch.prev.iter().enumerate().take(heads) {
            let z = x.matmul(&self.w.get(i)?.t()?)?;
            let z = (z + e.matmul(&self.u.get(i)?.t()?)?)?;
            let z = (z + prev.matmul(&self.v.get(i)?.t()?)?)?;
            let z = z.broadcast_add(&self.b.get(i)?)?;
            let s = (x + z.silu()?)?;
            out.push(s.matmul(&lm.t()?)?);
        }
        Ok(out)
    }

    /// One optimisation step on a batch; returns the mean loss over heads.
    pub fn step(
        &mut self,
        batch: &Batch,
        frozen: &FrozenHead,
        lr: f64,
        weight_decay: f64,
    ) -> Result<f32, TrainError> {
        let logits = self.logits(batch, &frozen.lm)?;
        let labels = batch.y.to_vec2::<u32>()?;
        let mut loss = Tensor::zeros((), DType::F32, batch.x.device())?;
        for (i, l) in logits.iter().enumerate() {
            let target: Vec<u32> = labels.iter().map(|row| row[i]).collect();
            loss = (loss + masked_cross_entropy(l, &target)?)?;
        }
        let loss = (loss / logits.len() as f64)?;
        let grads = loss.backward()?;
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = BETAS;
        for (var, m) in [(&self.w, 0usize), (&self.u, 2), (&self.v, 4), (&self.b, 6)] {
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

    /// Held-out accuracy on `data`, as the drafter sees it: ranked among the draft
    /// vocabulary, a label outside it a miss.
    pub fn accuracy(&self, data: &HeadsData, frozen: &FrozenHead) -> Result<Accuracy, TrainError> {
        let heads = data.heads;
        let mut hits = vec![(0usize, 0usize); heads];
        let mut chain = 0usize;
        let idx: Vec<usize> = (0..data.len()).collect();
        for chunk in idx.chunks(128) {
            let batch = data.rows(chunk, frozen)?;
            let mut right = vec![vec![false; heads]; chunk.len()];
            for (i, l) in self.logits(&batch, &frozen.lm)?.iter().enumerate() {
                for (r, row) in l.to_vec2::<f32>()?.iter().enumerate() {
                    let label = frozen.column(data.labels[chunk[r] * heads + i]) as usize;
                    if label >= row.len() {
                        continue;
                    }
                    let above = row.iter().filter(|&&v| v > row[label]).count();
                    right[r][i] = above == 0;
                    hits[i].0 += usize::from(above == 0);
                    hits[i].1 += usize::from(above < 5);
                }
            }
            chain += right
                .iter()
                .map(|r| r.iter().take_while(|&&ok| ok).count())
                .sum::<usize>();
        }
        let n = data.len().max(1) as f64;
        Ok(Accuracy {
            per_head: hits
                .into_iter()
                .map(|(a, b)| (a as f64 / n, b as f64 / n))
                .collect(),
            chain_length: chain as f64 / n,
        })
    }

    pub fn heads(&self) -> Result<MedusaHeads, TrainError> {
        let (heads, dim) = (self.w.dims()[0], self.w.dims()[1]);
        let mut out = MedusaHeads::zeros(0, dim);
        for i in 0..heads {
            out.w.push(self.w.get(i)?.flatten_all()?.to_vec1::<f32>()?);
            out.u.push(self.u.get(i)?.flatten_all()?.to_vec1::<f32>()?);
            out.v.push(self.v.get(i)?.flatten_all()?.to_vec1::<f32>()?);
            out.b.push(self.b.get(i)?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// Everything needed to resume: weights, Adam moments, step.
    pub fn save_checkpoint(&self, path: &Path) -> Result<(), TrainError> {
        let mut map: HashMap<String, Tensor> = HashMap::new();
        map.insert("w".into(), self.w.as_tensor().clone());
        map.insert("u".into(), self.u.as_tensor().clone());
        map.insert("v".into(), self.v.as_tensor().clone());
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
        let v = t.remove("v");
        let mut take = |name: &str| {
            t.remove(name).ok_or_else(|| {
                TrainError::Data(format!(
                    "checkpoint {} lacks {name} (written by an older specgate? start over \
                     with --fresh)",
                    path.display()
                ))
            })
        };
        let w = Var::from_tensor(&take("w")?)?;
        let u = Var::from_tensor(&take("u")?)?;
        let b = Var::from_tensor(&take("b")?)?;
        let mut moments = Vec::with_capacity(8);
        for i in 0..6 {
            moments.push(take(&format!("moment{i}"))?);
        }
        // A checkpoint from before the heads chained (moments of w, u, b) resumes with V = 0:
        // the same heads.
        let v = match v {
            Some(v) => {
                // Saved in order: w, u, v, b.
                moments.extend([take("moment6")?, take("moment7")?]);
                v
            }
            None => {
                let zero = u.as_tensor().zeros_like()?;
                moments.splice(4..4, [zero.clone(), zero.clone()]);
                zero
            }
        };
        let v = Var::from_tensor(&v)?;
        let moments: [Tensor; 8] = moments
            .try_into()
            .map_err(|_| TrainError::Data("checkpoint moments".into()))?;
        let step = take("step")?.to_vec1::<u32>()?;
        let step = step
            .first()
            .copied()
            .ok_or_else(|| TrainError::Data("checkpoint step is empty".into()))?
            as usize;
        Ok(Self {
            w,
            u,
            v,
            b,
            moments,
            step,
        })
    }
}
