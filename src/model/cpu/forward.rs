//! The ragged forward pass.

use super::*;
use crate::model::arch::Activation;
use crate::model::cpu::attention::{causal_attention, tree_attention, AttnShape, QueryRows};

/// Buffers a forward pass reuses: kept by the model between passes, so a pass no larger
/// than an earlier one allocates nothing for its activations.
#[derive(Default)]
pub(super) struct Workspace {
    acts: specgate_kernels::Q8Batch,
    fused: Vec<f32>,
    x: Vec<f32>,
    xn: Vec<f32>,
    attn: Vec<f32>,
    gate: Vec<f32>,
    proj: Vec<f32>,
}

impl CpuModel {
    /// Append each item's tokens to its sequence in one pass: linear layers run over all rows
    /// of all items at once, attention per sequence. Nothing is changed if validation fails.
    pub(super) fn forward_batch(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError> {
        // The pass's ~155 parallel steps run on `SpinPool` (its helpers spin between steps).
        let mut work = std::mem::take(&mut self.work);
        let out = self.run_layers(items, opts, &mut work);
        self.work = work;
        out
    }

    fn run_layers(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
        w: &mut Workspace,
    ) -> Result<BatchOutput, ModelError> {
        let depth = self.validate(items, opts)?;
        let cfg = &self.config;
        let hidden = cfg.hidden;
        let total: usize = items.iter().map(|it| it.tokens.len()).sum();

        // Start positions before this pass, per item.
        let starts: Vec<usize> = items.iter().map(|it| self.caches[&it.seq].len()).collect();
        w.x.clear(); // [total, hidden]
        for it in items {
            for &t in it.tokens {
                self.weights
                    .embeddings
                    .push_row(t as usize, hidden, &mut w.x)?;
            }
        }
        if let Some(scale) = cfg.embed_scale() {
            w.x.iter_mut().for_each(|v| *v *= scale);
        }
        let q_width = cfg.n_heads * cfg.head_dim;
        let kv_width = cfg.kv_width();
        // Tree items: each row's position (start + depth) and the rows it may see.
        let trees: Vec<Option<TreeLayout>> = items
            .iter()
            .map(|it| it.tree.map(TreeLayout::new))
            .collect();
        w.xn.resize(total * hidden, 0.0);
        w.attn.resize(total * q_width, 0.0);
        let stride = q_width + 2 * kv_width; // a fused Q/K/V row
        let ffn = cfg.ffn;
        for (l, layer) in self.weights.layers[..depth].iter().enumerate() {
            let shape = AttnShape {
                n_heads: cfg.n_heads,
                n_kv_heads: cfg.n_kv_heads,
                head_dim: cfg.head_dim,
                window: cfg.layer_window(l),
            };
            let rope = &self.ropes[self.rope_of_layer[l]];
            rms_norm(&w.x, &layer.attn_norm, cfg.rms_eps, &mut w.xn);
            layer.qkv.forward_into(&w.xn, &mut w.acts, &mut w.fused)?;
            if let Some(bias) = &layer.qkv_bias {
                w.fused
                    .chunks_exact_mut(stride)
                    .for_each(|r| add_in_place(r, bias));
            }
            let mut row = 0;
            for ((it, &start), tree) in items.iter().zip(&starts).zip(&trees) {
                let n = it.tokens.len();
                for i in 0..n {
                    let pos = start + tree.as_ref().map_or(i, |t| t.depth[i]);
                    let (q, kv) = w.fused[(row + i) * stride..][..stride].split_at_mut(q_width);
                    let k = &mut kv[..kv_width];
                    if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                        rms_norm_in_place(q, qn, cfg.rms_eps);
                        rms_norm_in_place(k, kn, cfg.rms_eps);
                    }
                    rope.apply(q, cfg.head_dim, pos);
                    rope.apply(k, cfg.head_dim, pos);
                }
                let cache = self
                    .caches
                    .get_mut(&it.seq)
                    .ok_or(ModelError::UnknownSequence(it.seq))?;
                let rows = &w.fused[row * stride..(row + n) * stride];
                cache.append_strided(l, rows, stride, q_width, q_width + kv_width);
                let (keys, values) = cache.layer(l);
                let q = QueryRows { rows, stride };
                let out = &mut w.attn[row * q_width..(row + n) * q_width];
                match tree {
                    None => causal_attention(shape, q, keys, values, out),
                    Some(t) => tree_attention(shape, q, (keys, values), &t.visible, &t.depth, out),
                }
                row += n;
            }
            layer.wo.forward_into(&w.attn, &mut w.acts, &mut w.proj)?;
            residual(
                &mut w.x,
                &mut w.proj,
                layer.post_attn_norm.as_deref(),
                cfg.rms_eps,
            );
            rms_norm(&w.x, &layer.ffn_norm, cfg.rms_eps, &mut w.xn);
            layer
                .gate_up
                .forward_into(&w.xn, &mut w.acts, &mut w.fused)?;
            w.gate.resize(total * ffn, 0.0);
            for (gu, h) in w
                .fused
                .chunks_exact(2 * ffn)
                .zip(w.gate.chunks_exact_mut(ffn))
            {
                let (gate, up) = gu.split_at(ffn);
                match cfg.arch.activation() {
                    Activation::Silu => specgate_kernels::vexp::swiglu(gate, up, h),
                    Activation::GeluTanh => specgate_kernels::gelu::geglu(gate, up, h),
                }
            }
            layer.down.forward_into(&w.gate, &mut w.acts, &mut w.proj)?;
            residual(
                &mut w.x,
                &mut w.proj,
                layer.post_ffn_norm.as_deref(),
                cfg.rms_eps,
            );
        }
        self.head(items, &w.x, opts)
    }

    /// Final norm and LM head over only the rows that asked for logits.
    fn head(
        &self,
        items: &[BatchItem<'_>],
        x: &[f32],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError> {
        let hidden = self.config.hidden;
        let mut picked = Vec::new(); // [rows, hidden]
        let mut spans = Vec::with_capacity(items.len());
        let mut row = 0;
        let mut out_rows = 0;
        for it in items {
            let n = it.tokens.len();
            let wanted = match it.logits {
                LogitRows::None => row..row,
                LogitRows::Last => row + n.saturating_sub(1)..row + n,
                LogitRows::All => row..row + n,
            };
            picked.extend_from_slice(&x[wanted.start * hidden..wanted.end * hidden]);
            spans.push(out_rows..out_rows + wanted.len());
            out_rows += wanted.len();
            row += n;
        }
        let mut normed = vec![0.0f32; picked.len()];
        rms_norm(
            &picked,
            &self.weights.output_norm,
            self.config.rms_eps,
            &mut normed,
        );
        let logits = self.weights.lm_head.forward(&normed)?;
        Ok(BatchOutput {
            vocab: self.weights.lm_head.out_dim(),
            hidden_dim: hidden,
            logits,
            hidden: if opts.hidden { normed } else { Vec::new() },
            spans,
        })
    }

    /// Check a batch before touching any cache; returns the number of layers to run.
    fn validate(&self, items: &[BatchItem<'_>], opts: ForwardOptions) -> Result<usize, ModelError> {
        let limit = self.config.context_length.min(self.ropes[0].positions());
        crate::model::batch::check(&self.config, limit, items, opts, |seq, depth| {
            let cache = self.caches.get(&seq)?;
            let len = cache.len();
            Some((len, (1..depth).all(|l| cache.layer_len(l) == len)))
        })
    }
}

/// RMSNorm as ggml computes it (sum of squares in f64). `x`, `out`: [rows, dim]; `w`: [dim].
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    out.copy_from_slice(x);
    rms_norm_in_place(out, w, eps);
}

/// Σx² in f64, in eight lanes: one chain of 576 dependent f64 adds cost ~0.5 µs a row, 3%
/// of an 8-row verify pass, all of it on one thread. The squares are exact in f64 and the
/// lanes' rounding (~2⁻⁴⁴ relative) lies far below the f32 the scale is taken in.
fn sum_of_squares(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| (v as f64) * (v as f64))
        .sum();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += (v as f64) * (v as f64);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// RMSNorm of each `w.len()`-wide chunk of `x` (a token, or a Q or K head), in place.
fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let sum = sum_of_squares(xr);
        let scale = 1.0 / ((sum / w.len() as f64) as f32 + eps).sqrt();
        for (v, &g) in xr.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    }
}

/// `x += y`, with `y` first normed where the architecture norms a block's output (Gemma).
fn residual(x: &mut [f32], y: &mut [f32], post_norm: Option<&[f32]>, eps: f32) {
    if let Some(w) = post_norm {
        rms_norm_in_place(y, w, eps);
    }
    add_in_place(x, y);
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// A tree item's layout: row 0 is the pending token, row 1 + i node i.
struct TreeLayout {
    depth: Vec<usize>,        // per row: 0 for the pending token
    visible: Vec<Vec<usize>>, // per row: the rows it sees
}

impl TreeLayout {
    fn new(parents: &[Option<usize>]) -> Self {
        let tree = specgate_strategies::DraftTree {
            tokens: vec![0; parents.len()],
            parents: parents.to_vec(),
        };
        let rows = parents.len() + 1;
        Self {
            depth: (0..rows)
                .map(|r| if r == 0 { 0 } else { tree.depth(r - 1) })
                .collect(),
            visible: (0..rows).map(|r| tree.visible_rows(r)).collect(),
        }
    }
}
