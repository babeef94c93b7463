//! The EAGLE draft layer under training (candle autograd), on whole generated sequences.
//!
//! Two unrolled steps per position (EAGLE-3's "training-time test", cut to two):
//! - step 1 reads the target's true features: position j gets (h_j, t_j) and learns t_{j+1},
//!   with causal attention over the sequence's earlier positions;
//! - step 2 reads what drafting reads one place further: position j gets the layer's own
//!   step-1 output at j − 1 (its guess at h_j) with the true t_j, attends to the true
//!   positions before j and to itself, and learns t_{j+1} too.
//!
//! Without step 2 the layer never sees its own outputs as input, and every draft after the
//! first would read features unlike any it was trained on. Initialised from the target's last
//! layer with O and DOWN zeroed and FC = [I, 0], it starts as a pass-through of h_j (so its
//! first guess is the target's own next token given h_j, the hidden state's argmax).

use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor, Var, D};
use specgate_strategies::eagle::{rope_angles, EagleShape, EagleWeights};

use crate::heads::eagle_data::EagleSequence;
use crate::heads::trainer::{masked_cross_entropy, FrozenHead};
use crate::heads::training::TrainError;

/// The layer's variables, in the order of [`EagleShape::tensors`].
pub struct EagleTrainee {
    pub shape: EagleShape,
    vars: Vec<Var>,
}

/// One sequence's inputs: true features [n, hidden], token embeddings [n, hidden], labels'
/// columns [n] (label j is t_{j+1}).
pub struct SeqInputs {
    h: Tensor,
    e: Tensor,
    labels: Vec<u32>,
}

fn rms(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor, TrainError> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    Ok(x.broadcast_div(&(ms + eps)?.sqrt()?)?.broadcast_mul(w)?)
}

/// Rotate x [heads, n, head_dim] by the tables cos/sin [n, head_dim / 2] (adjacent pairs).
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor, TrainError> {
    let (h, n, hd) = x.dims3()?;
    let x = x.reshape((h, n, hd / 2, 2))?;
    let a = x.narrow(3, 0, 1)?.squeeze(3)?;
    let b = x.narrow(3, 1, 1)?.squeeze(3)?;
    let ra = (a.broadcast_mul(cos)? - b.broadcast_mul(sin)?)?;
    let rb = (a.broadcast_mul(sin)? + b.broadcast_mul(cos)?)?;
    Ok(Tensor::stack(&[ra, rb], 3)?.reshape((h, n, hd))?)
}

/// [rows, cols]: 0 where column c may be seen from row r (c ≤ r), −∞ elsewhere.
fn causal_mask(rows: usize, cols: usize) -> Result<Tensor, TrainError> {
    let mask: Vec<f32> = (0..rows * cols)
        .map(|i| {
            if i % cols > i / cols {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Ok(Tensor::from_vec(mask, (rows, cols), &Device::Cpu)?)
}

/// cos/sin tables [n, head_dim / 2] for positions from..from + n.
fn rope_tables(shape: &EagleShape, from: usize, n: usize) -> Result<(Tensor, Tensor), TrainError> {
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for p in from..from + n {
        let (cp, sp) = rope_angles(p, shape.head_dim, shape.rope_base);
        c.extend(cp);
        s.extend(sp);
    }
    let dev = &Device::Cpu;
    let pairs = shape.head_dim / 2;
    Ok((
        Tensor::from_vec(c, (n, pairs), dev)?,
        Tensor::from_vec(s, (n, pairs), dev)?,
    ))
}

/// Per step: (normed output [n, hidden], keys and values [kv heads, n, head_dim]).
struct StepOut {
    f: Tensor,
    k: Tensor,
    v: Tensor,
}

impl EagleTrainee {
    /// Initialised from layer `layer` of the target GGUF (see the module's doc).
    pub fn from_target(path: &Path, shape: EagleShape, layer: usize) -> Result<Self, TrainError> {
        let mut r = std::fs::File::open(path).map_err(|e| TrainError::Data(e.to_string()))?;
        let c = gguf_file::Content::read(&mut r)?;
        let dev = &Device::Cpu;
        let d = shape.hidden;
        let mut deq = |name: &str| -> Result<Tensor, TrainError> {
            let t = c.tensor(&mut r, &format!("blk.{layer}.{name}.weight"), dev)?;
            Ok(t.dequantize(dev)?)
        };
        let ones = Tensor::ones(d, DType::F32, dev)?;
        let fc = Tensor::cat(
            &[
                &Tensor::eye(d, DType::F32, dev)?,
                &Tensor::zeros((d, d), DType::F32, dev)?,
            ],
            1,
        )?;
        let mut vars = Vec::new();
        for (name, [rows, cols]) in shape.tensors() {
            let t = match name {
                "fc" => fc.clone(),
                "norm_h" | "norm_e" | "out_norm" => ones.clone(),
                // The layer's own norms: its Q/K/V and gate/up read activations so scaled.
                "attn_norm" => deq("attn_norm")?,
                "ffn_norm" => deq("ffn_norm")?,
                "q" => deq("attn_q")?,
                "k" => deq("attn_k")?,
                "v" => deq("attn_v")?,
                "gate" => deq("ffn_gate")?,
                "up" => deq("ffn_up")?,
                _ => Tensor::zeros((rows, cols), DType::F32, dev)?, // o, down
            };
            let t = if cols == 1 { t.reshape(rows)? } else { t };
            if t.elem_count() != rows * cols {
                return Err(TrainError::Data(format!(
                    "layer {layer}'s {name} is {:?}, the draft layer needs {rows} x {cols}",
                    t.dims()
                )));
            }
            vars.push(Var::from_tensor(&t.to_dtype(DType::F32)?)?);
        }
        Ok(Self { shape, vars })
    }

    /// A layer to train further (or to check) from saved weights.
    pub fn from_weights(w: &EagleWeights) -> Result<Self, TrainError> {
        let vars = w
            .shape
            .tensors()
            .iter()
            .zip(&w.tensors)
            .map(|((_, [r, c]), t)| {
                let t = Tensor::from_slice(t, (*r, *c), &Device::Cpu)?;
                Var::from_tensor(&if *c == 1 { t.reshape(*r)? } else { t })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            shape: w.shape,
            vars,
        })
    }

    /// Both steps' output features for true features `h` and token embeddings `e` ([n,
    /// hidden] each): ([n, hidden], [n − 1, hidden]).
    pub fn features(&self, h: &Tensor, e: &Tensor) -> Result<(Tensor, Tensor), TrainError> {
        let one = self.step1(h, e)?;
        let two = self.step2(&one, e)?;
        Ok((one.f, two))
    }

    pub fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }

    fn w(&self, name: &str) -> &Tensor {
        let i = self
            .shape
            .tensors()
            .iter()
            .position(|(n, _)| *n == name)
            .unwrap_or(0); // names are the shape's own
        self.vars[i].as_tensor()
    }

    /// The weights as plain f32, for saving.
    pub fn weights(&self) -> Result<EagleWeights, TrainError> {
        let tensors = self
            .vars
            .iter()
            .map(|v| v.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EagleWeights {
            shape: self.shape,
            tensors,
        })
    }

    /// x = FC·[RMS(h)·n_h ; RMS(e)·n_e] and its heads' q, k, v at positions from..from + n.
    fn qkv(
        &self,
        h: &Tensor,
        e: &Tensor,
        from: usize,
    ) -> Result<(Tensor, Tensor, Tensor, Tensor), TrainError> {
        let s = &self.shape;
        let eps = f64::from(s.rms_eps);
        let n = h.dims()[0];
        let x = Tensor::cat(
            &[
                rms(h, self.w("norm_h"), eps)?,
                rms(e, self.w("norm_e"), eps)?,
            ],
            1,
        )?
        .matmul(&self.w("fc").t()?)?;
        let a = rms(&x, self.w("attn_norm"), eps)?;
        let heads = |w: &str, count: usize| -> Result<Tensor, TrainError> {
            Ok(a.matmul(&self.w(w).t()?)?
                .reshape((n, count, s.head_dim))?
                .transpose(0, 1)?
                .contiguous()?)
        };
        let (cos, sin) = rope_tables(s, from, n)?;
        let q = (rope(&heads("q", s.heads)?, &cos, &sin)? * (1.0 / (s.head_dim as f64).sqrt()))?;
        let k = rope(&heads("k", s.kv_heads)?, &cos, &sin)?;
        let v = heads("v", s.kv_heads)?;
        Ok((x, q, k, v))
    }

    /// The rest of the layer after attention: residual, MLP, output norm.
    fn finish(&self, x: &Tensor, att: &Tensor) -> Result<Tensor, TrainError> {
        let s = &self.shape;
        let eps = f64::from(s.rms_eps);
        let n = x.dims()[0];
        let att = att.transpose(0, 1)?.contiguous()?.reshape((n, s.q_dim()))?;
        let x = (x + att.matmul(&self.w("o").t()?)?)?;
        let m = rms(&x, self.w("ffn_norm"), eps)?;
        let g = m.matmul(&self.w("gate").t()?)?.silu()?;
        let u = m.matmul(&self.w("up").t()?)?;
        let x = (x + (g * u)?.matmul(&self.w("down").t()?)?)?;
        rms(&x, self.w("out_norm"), eps)
    }

    /// Step 1: true features, causal attention.
    fn step1(&self, h: &Tensor, e: &Tensor) -> Result<StepOut, TrainError> {
        let s = &self.shape;
        let n = h.dims()[0];
        let (x, q, k, v) = self.qkv(h, e, 0)?;
        let rep = s.heads / s.kv_heads;
        let q = q.reshape((s.kv_heads, rep * n, s.head_dim))?;
        let scores = q
            .matmul(&k.transpose(1, 2)?.contiguous()?)?
            .reshape((s.kv_heads, rep, n, n))?;
        let p = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&causal_mask(n, n)?)?)?;
        let att = p
            .reshape((s.kv_heads, rep * n, n))?
            .matmul(&v)?
            .reshape((s.heads, n, s.head_dim))?;
        Ok(StepOut {
            f: self.finish(&x, &att)?,
            k,
            v,
        })
    }

    /// Step 2 at positions 1..n: the step-1 output at j − 1 as the feature, true tokens;
    /// attention over step 1's keys before j and the row's own key.
    fn step2(&self, one: &StepOut, e: &Tensor) -> Result<Tensor, TrainError> {
        let s = &self.shape;
        let n = e.dims()[0];
        let m = n - 1;
        let g = one.f.narrow(0, 0, m)?;
        let (x, q, k2, v2) = self.qkv(&g, &e.narrow(0, 1, m)?, 1)?;
        let rep = s.heads / s.kv_heads;
        let q = q.reshape((s.kv_heads, rep * m, s.head_dim))?;
        // Query i (position i + 1) sees step-1 keys 0..=i.
        let scores = q
            .matmul(&one.k.transpose(1, 2)?.contiguous()?)?
            .reshape((s.kv_heads, rep, m, n))?;
        let scores = scores.broadcast_add(&causal_mask(m, n)?)?;
        let own = (q
            .reshape((s.kv_heads, rep, m, s.head_dim))?
            .broadcast_mul(&k2.unsqueeze(1)?)?)
        .sum_keepdim(D::Minus1)?; // [kv, rep, m, 1]
        let p = candle_nn::ops::softmax_last_dim(&Tensor::cat(&[&scores, &own], 3)?)?;
        let p_past = p.narrow(3, 0, n)?.reshape((s.kv_heads, rep * m, n))?;
        let p_own = p.narrow(3, n, 1)?; // [kv, rep, m, 1]
        let att = (p_past
            .matmul(&one.v)?
            .reshape((s.kv_heads, rep, m, s.head_dim))?
            + p_own.broadcast_mul(&v2.unsqueeze(1)?)?)?
        .reshape((s.heads, m, s.head_dim))?;
        self.finish(&x, &att)
    }

    /// Logits of both steps: ([n, draft vocab], [n − 1, draft vocab]).
    pub fn logits(
        &self,
        x: &SeqInputs,
        frozen: &FrozenHead,
    ) -> Result<(Tensor, Tensor), TrainError> {
        let one = self.step1(&x.h, &x.e)?;
        let two = self.step2(&one, &x.e)?;
        let lm = frozen.lm.t()?;
        Ok((one.f.matmul(&lm)?, two.matmul(&lm)?))
    }

    /// The loss of one sequence: both steps' cross-entropy, equally weighted.
    pub fn loss(&self, x: &SeqInputs, frozen: &FrozenHead) -> Result<Tensor, TrainError> {
        let (l1, l2) = self.logits(x, frozen)?;
        let a = masked_cross_entropy(&l1, &x.labels)?;
        let b = masked_cross_entropy(&l2, &x.labels[1..])?;
        Ok((a + b)?)
    }
}

impl SeqInputs {
    /// A sequence's inputs (None when it is too short to teach step 2).
    pub fn of(s: &EagleSequence, frozen: &FrozenHead) -> Result<Option<Self>, TrainError> {
        let n = s.tokens.len().saturating_sub(1);
        if n < 2 {
            return Ok(None);
        }
        let d = s.hidden.len() / s.tokens.len();
        let h = Tensor::from_slice(&s.hidden[..n * d], (n, d), &Device::Cpu)?;
        let e = frozen.embed(&s.tokens[..n])?;
        let labels = s.tokens[1..=n].iter().map(|&t| frozen.column(t)).collect();
        Ok(Some(Self { h, e, labels }))
    }

    pub fn labels(&self) -> &[u32] {
        &self.labels
    }
}

/// Held-out top-1 accuracy of both steps: (step 1, step 2, both right at a position).
pub fn accuracy(
    t: &EagleTrainee,
    seqs: &[SeqInputs],
    frozen: &FrozenHead,
) -> Result<(f64, f64, f64), TrainError> {
    let (mut one, mut two, mut both, mut count) = (0usize, 0usize, 0usize, 0usize);
    for x in seqs {
        let (l1, l2) = t.logits(x, frozen)?;
        let a1: Vec<u32> = l1.argmax(1)?.to_vec1()?;
        let a2: Vec<u32> = l2.argmax(1)?.to_vec1()?;
        // Position j's step-1 guess is t_{j+1}; a chain of two is right when step 1 at j and
        // step 2 at j + 1 (reading step 1's output) both are.
        for j in 0..a2.len() {
            count += 1;
            let r1 = a1[j] == x.labels[j];
            let r2 = a2[j] == x.labels[j + 1];
            one += usize::from(r1);
            two += usize::from(r2);
            both += usize::from(r1 && r2);
        }
    }
    let c = count.max(1) as f64;
    Ok((one as f64 / c, two as f64 / c, both as f64 / c))
}

#[cfg(test)]
#[path = "eagle_trainer_tests.rs"]
mod tests;
