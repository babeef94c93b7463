//! The EAGLE draft layer under training (candle autograd), on whole generated sequences.
//!
//! Unrolled steps per position (EAGLE-3's "training-time test"):
//! - step 1 reads the target's true features: position j gets (h_j, t_j) and learns t_{j+1},
//!   with causal attention over the sequence's earlier positions;
//! - step s ≥ 2 reads what drafting reads s − 1 places further: position j gets the layer's
//!   own step-(s − 1) output at j − 1 with the true t_j, attends to the true positions up to
//!   j − s + 1, to the path's drafted rows between and to itself, and learns t_{j+1} too.
//!
//! Without the later steps the layer never sees its own outputs as input, and every draft
//! after the first would read features unlike any it was trained on. Initialised from the
//! target's last layer with O and DOWN zeroed and FC = [I, 0], it starts as a pass-through of
//! h_j (so its first guess is the target's own next token given h_j, the hidden state's
//! argmax).

use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor, Var, D};
use specgate_strategies::eagle::{rope_angles, EagleShape, EagleWeights};

use crate::heads::eagle_data::{self, EagleSequence};
use crate::heads::eagle_loss::{self, LossWeights};
use crate::heads::trainer::FrozenHead;
use crate::heads::training::TrainError;

/// The layer's variables, in the order of [`EagleShape::tensors`].
pub struct EagleTrainee {
    pub shape: EagleShape,
    vars: Vec<Var>,
}

/// One sequence's inputs: true features [n, hidden], token embeddings [n, hidden], labels'
/// columns [n] (label j is t_{j+1}) and the features that produced them [n, hidden] (next j
/// is h_{j+1}, what step 1 at j guesses).
pub struct SeqInputs {
    h: Tensor,
    e: Tensor,
    labels: Vec<u32>,
    next: Tensor,
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

    /// Step s ≥ 2 (`prior` holds steps 1..s − 1) at positions s − 1..n: the previous step's
    /// output one place before as the feature, the true token; attention over step 1's keys
    /// up to the last true position, each later step's key on the path, and the row's own —
    /// what the drafter's depth-s row attends to in the tree.
    fn step_after(&self, prior: &[StepOut], e: &Tensor) -> Result<StepOut, TrainError> {
        let s = &self.shape;
        let n = e.dims()[0];
        let depth = prior.len(); // this step reads step `depth`'s output
        let m = n - depth;
        let one = &prior[0];
        let g = prior[depth - 1].f.narrow(0, 0, m)?;
        let (x, q, k_own, v_own) = self.qkv(&g, &e.narrow(0, depth, m)?, depth)?;
        let rep = s.heads / s.kv_heads;
        let q = q.reshape((s.kv_heads, rep * m, s.head_dim))?;
        // Row i (position i + depth) sees the true keys 0..=i.
        let scores = q
            .matmul(&one.k.transpose(1, 2)?.contiguous()?)?
            .reshape((s.kv_heads, rep, m, n))?
            .broadcast_add(&causal_mask(m, n)?)?;
        let q4 = q.reshape((s.kv_heads, rep, m, s.head_dim))?;
        // The path's drafted rows: step r's row i sits at position i + r − 1.
        let path: Vec<(Tensor, Tensor)> = prior[1..]
            .iter()
            .map(|p| Ok((p.k.narrow(1, 0, m)?, p.v.narrow(1, 0, m)?)))
            .chain(std::iter::once(Ok((k_own.clone(), v_own.clone()))))
            .collect::<Result<_, TrainError>>()?;
        let mut parts = vec![scores];
        for (k, _) in &path {
            parts.push(q4.broadcast_mul(&k.unsqueeze(1)?)?.sum_keepdim(D::Minus1)?);
        }
        let p = candle_nn::ops::softmax_last_dim(&Tensor::cat(&parts, 3)?)?;
        let p_true = p.narrow(3, 0, n)?.reshape((s.kv_heads, rep * m, n))?;
        let mut att = p_true
            .matmul(&one.v)?
            .reshape((s.kv_heads, rep, m, s.head_dim))?;
        for (i, (_, v)) in path.iter().enumerate() {
            att = (att + p.narrow(3, n + i, 1)?.broadcast_mul(&v.unsqueeze(1)?)?)?;
        }
        let att = att.reshape((s.heads, m, s.head_dim))?;
        Ok(StepOut {
            f: self.finish(&x, &att)?,
            k: k_own,
            v: v_own,
        })
    }

    /// Every step's output features, steps 1..=`steps` (step s has n − s + 1 rows).
    fn unrolled(&self, h: &Tensor, e: &Tensor, steps: usize) -> Result<Vec<StepOut>, TrainError> {
        let n = e.dims()[0];
        let mut out = vec![self.step1(h, e)?];
        while out.len() < steps.min(n) {
            let next = self.step_after(&out, e)?;
            out.push(next);
        }
        Ok(out)
    }

    /// Output features of steps 1..=`steps` for true features `h` and token embeddings `e`
    /// ([n, hidden] each): step s gives [n − s + 1, hidden].
    pub fn features(
        &self,
        h: &Tensor,
        e: &Tensor,
        steps: usize,
    ) -> Result<Vec<Tensor>, TrainError> {
        Ok(self
            .unrolled(h, e, steps)?
            .into_iter()
            .map(|s| s.f)
            .collect())
    }

    /// Logits of the first two steps: ([n, draft vocab], [n − 1, draft vocab]).
    pub fn logits(
        &self,
        x: &SeqInputs,
        frozen: &FrozenHead,
    ) -> Result<(Tensor, Tensor), TrainError> {
        let f = self.features(&x.h, &x.e, 2)?;
        let lm = frozen.lm.t()?;
        let two = f
            .get(1)
            .ok_or_else(|| TrainError::Data("a one-token sequence".into()))?;
        Ok((f[0].matmul(&lm)?, two.matmul(&lm)?))
    }

    /// The loss of one sequence over `steps` unrolled steps, equally weighted: cross-entropy on the target's
    /// tokens, plus (as `weights` say) the target's whole distribution there and its next
    /// hidden state (see [`crate::heads::eagle_loss`]).
    pub fn loss(
        &self,
        x: &SeqInputs,
        frozen: &FrozenHead,
        weights: LossWeights,
        steps: usize,
    ) -> Result<Tensor, TrainError> {
        let mut total = Tensor::zeros((), DType::F32, &Device::Cpu)?;
        for (skip, f) in self.features(&x.h, &x.e, steps)?.iter().enumerate() {
            let n = f.dims()[0];
            let target = x.next.narrow(0, skip, n)?;
            let part = eagle_loss::step_loss(f, &target, &x.labels[skip..], frozen, weights)?;
            total = (total + part)?;
        }
        Ok(total)
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
        let next = Tensor::from_slice(&s.hidden[d..(n + 1) * d], (n, d), &Device::Cpu)?;
        // A sampled token is no label (the column past the vocabulary: masked); its
        // position still teaches the target's distribution and next hidden state.
        let labels = eagle_data::labels(s)
            .into_iter()
            .map(|t| t.map_or(u32::MAX, |t| frozen.column(t)))
            .collect();
        Ok(Some(Self { h, e, labels, next }))
    }

    pub fn labels(&self) -> &[u32] {
        &self.labels
    }
}

/// Steps whose held-out accuracy training reports.
pub const MEASURED_STEPS: usize = 3;

/// Held-out top-1 per step, and of chains: `chain[s]` is the share of positions where steps
/// 1..=s + 1 all guessed right (a drafted chain of s + 1 accepted), `top1[s]` step s + 1 alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Accuracy {
    pub top1: [f64; MEASURED_STEPS],
    pub chain: [f64; MEASURED_STEPS],
    /// The first draft's top-1 by how far into the reply its position lies (the layer reads
    /// only generated rows, so early positions have little context): see [`POSITION_BUCKETS`].
    pub first_by_position: [f64; POSITION_BUCKETS.len()],
}

/// Generated positions [from, to) the first draft's top-1 is also counted in.
pub const POSITION_BUCKETS: [(usize, usize); 3] = [(0, 8), (8, 32), (32, usize::MAX)];

/// Held-out accuracy over `seqs`, every position weighed alike.
pub fn accuracy(
    t: &EagleTrainee,
    seqs: &[&SeqInputs],
    frozen: &FrozenHead,
) -> Result<Accuracy, TrainError> {
    let lm = frozen.lm.t()?;
    let (mut right, mut chains, mut count) =
        ([0usize; MEASURED_STEPS], [0usize; MEASURED_STEPS], 0usize);
    let mut by_position = [(0usize, 0usize); POSITION_BUCKETS.len()]; // (right, count)
    for x in seqs {
        let f = t.features(&x.h, &x.e, MEASURED_STEPS)?;
        if f.len() < MEASURED_STEPS {
            continue;
        }
        let guesses = f
            .iter()
            .map(|f| Ok(f.matmul(&lm)?.argmax(1)?.to_vec1::<u32>()?))
            .collect::<Result<Vec<_>, TrainError>>()?;
        // Row j of step s guesses t_{j+s}, label j + s − 1; a chain starts at step 1's row j
        // and goes on with each later step's row j.
        for j in 0..guesses[MEASURED_STEPS - 1].len() {
            count += 1;
            let mut whole = true;
            for (s, g) in guesses.iter().enumerate() {
                let ok = g[j] == x.labels[j + s];
                right[s] += usize::from(ok);
                whole &= ok;
                chains[s] += usize::from(whole);
            }
            if let Some(b) = POSITION_BUCKETS
                .iter()
                .position(|&(a, z)| (a..z).contains(&j))
            {
                by_position[b].0 += usize::from(guesses[0][j] == x.labels[j]);
                by_position[b].1 += 1;
            }
        }
    }
    let c = count.max(1) as f64;
    Ok(Accuracy {
        top1: right.map(|r| r as f64 / c),
        chain: chains.map(|r| r as f64 / c),
        first_by_position: by_position.map(|(r, n)| r as f64 / n.max(1) as f64),
    })
}

#[cfg(test)]
#[path = "eagle_trainer_tests.rs"]
mod tests;
