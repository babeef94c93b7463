//! Causal attention of new query rows over one sequence's cache, with grouped KV heads.
//!
//! Rounding follows llama.cpp's CPU path with its default f16 cache: the query is rounded to
//! f16 for the QK dot, the softmax weights to f16 for the weighted sum of values, and every
//! sum accumulates in f32. Matching the reference's rounding keeps greedy output in step with
//! it on near-ties (measured: without it, logits differ from llama.cpp's by a median 0.2).

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Shapes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// Attention for `rows` new tokens whose keys and values are already the last `rows` entries
/// of the cache. Query row i sits at position `cache_len - rows + i` and sees positions
/// `0..=cache_len - rows + i`.
/// `q`: [rows, n_heads * head_dim]; `keys`, `values`: [cache_len, n_kv_heads * head_dim];
/// `out`: [rows, n_heads * head_dim].
pub fn causal_attention(
    shape: AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    out: &mut [f32],
) {
    let AttnShape {
        n_heads,
        n_kv_heads,
        head_dim,
    } = shape;
    let q_width = n_heads * head_dim;
    let kv_width = n_kv_heads * head_dim;
    let rows = q.len() / q_width;
    let cache_len = keys.len() / kv_width;
    let group = n_heads / n_kv_heads;
    let kv = KvView::widen(shape, keys, values);
    // One task per (row, head): heads and rows are independent. Small calls stay on this
    // thread, where a thread hand-off would cost more than the work.
    let task = |scores: &mut Vec<f32>, (i, o): (usize, &mut [f32])| {
        let (r, h) = (i / n_heads, i % n_heads);
        let qh = &q[r * q_width + h * head_dim..][..head_dim];
        kv.head(qh, h / group, 0..cache_len - rows + r + 1, scores, o);
    };
    if rows * n_heads * cache_len < PARALLEL_MIN_SCORES {
        let mut scores = Vec::with_capacity(cache_len);
        out.chunks_mut(head_dim)
            .enumerate()
            .for_each(|x| task(&mut scores, x));
    } else {
        out.par_chunks_mut(head_dim)
            .enumerate()
            .for_each_init(|| Vec::with_capacity(cache_len), task);
    }
}

/// Attention for the rows of a verified tree, whose keys and values are the last `rows`
/// entries of the cache: row i sees the `cache_len - rows` earlier positions and the pass's
/// own rows `visible[i]` (itself, its ancestors, the pending token). Shapes as
/// [`causal_attention`]. Runs on the calling thread (trees are a handful of rows).
pub fn tree_attention(
    shape: AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    visible: &[Vec<usize>],
    out: &mut [f32],
) {
    let AttnShape {
        n_heads,
        n_kv_heads,
        head_dim,
    } = shape;
    let q_width = n_heads * head_dim;
    let kv_width = n_kv_heads * head_dim;
    let rows = q.len() / q_width;
    let prefix = keys.len() / kv_width - rows;
    let group = n_heads / n_kv_heads;
    let kv = KvView::widen(shape, keys, values);
    let mut scores = Vec::with_capacity(prefix + rows);
    for (i, o) in out.chunks_mut(head_dim).enumerate() {
        let (r, h) = (i / n_heads, i % n_heads);
        let qh = &q[r * q_width + h * head_dim..][..head_dim];
        let own = visible[r].iter().map(|&v| prefix + v);
        kv.head(qh, h / group, (0..prefix).chain(own), &mut scores, o);
    }
}

/// Below this many query-key scores per call, attention runs on the calling thread.
const PARALLEL_MIN_SCORES: usize = 16 * 1024;

/// The widened cache of one sequence and layer.
struct KvView {
    keys: Vec<f32>,   // [cache_len, kv_width]
    values: Vec<f32>, // [cache_len, kv_width]
    kv_width: usize,
    head_dim: usize,
    scale: f32,
}

impl KvView {
    /// Widen the cache once per call (F16C, vectorised), not once per query row and head.
    fn widen(shape: AttnShape, keys: &[f16], values: &[f16]) -> Self {
        let mut kf = vec![0.0f32; keys.len()];
        let mut vf = vec![0.0f32; values.len()];
        keys.convert_to_f32_slice(&mut kf);
        values.convert_to_f32_slice(&mut vf);
        Self {
            keys: kf,
            values: vf,
            kv_width: shape.n_kv_heads * shape.head_dim,
            head_dim: shape.head_dim,
            scale: 1.0 / (shape.head_dim as f32).sqrt(),
        }
    }

    /// One query head over the cache positions `visible` yields. `qh`, `o`: [head_dim].
    fn head(
        &self,
        qh: &[f32],
        kvh: usize,
        visible: impl Iterator<Item = usize> + Clone,
        scores: &mut Vec<f32>,
        o: &mut [f32],
    ) {
        let hd = self.head_dim;
        let q16: Vec<f32> = qh.iter().map(|&x| round_f16(x)).collect();
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for t in visible.clone() {
            let kt = &self.keys[t * self.kv_width + kvh * hd..][..hd];
            let s = dot(&q16, kt) * self.scale;
            max = max.max(s);
            scores.push(s);
        }
        let mut sum = 0.0f32;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        o.fill(0.0);
        let inv = 1.0 / sum;
        for (t, &s) in visible.zip(scores.iter()) {
            let vt = &self.values[t * self.kv_width + kvh * hd..][..hd];
            let w = round_f16(s * inv);
            for (oi, &vi) in o.iter_mut().zip(vt) {
                *oi += w * vi;
            }
        }
    }
}

#[inline]
fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums let the compiler vectorise without reassociating a single chain.
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for i in 0..8 {
            acc[i] += a[c * 8 + i] * b[c * 8 + i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_key_returns_its_value_and_mask_hides_the_future() {
        let shape = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
        };
        let h = |xs: [f32; 4]| xs.map(f16::from_f32);
        let keys = h([1.0, 0.0, 0.0, 1.0]);
        let values = h([10.0, 20.0, 30.0, 40.0]);
        let q = [1.0, 0.0, 0.0, 1.0, 5.0, 0.0, 0.0, 5.0]; // 2 rows, 2 heads
        let mut out = [0.0f32; 8];
        causal_attention(shape, &q, &keys, &values, &mut out);
        // Row 0 sees only position 0: both heads return value 0 exactly.
        assert_eq!(&out[..4], &[10.0, 20.0, 10.0, 20.0]);
        // Row 1 sees both positions; its weights favour neither more than softmax says.
        let w0 = 1.0 / (1.0 + (5.0f32 / 2f32.sqrt()).exp()); // head 0: scores 5/√2, 0
        let expect = w0 * 30.0 + (1.0 - w0) * 10.0;
        assert!((out[4] - expect).abs() < 1e-2, "{} vs {expect}", out[4]);
    }

    #[test]
    fn tree_attention_sees_exactly_the_visible_rows() {
        let shape = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
        };
        let keys: Vec<f16> = [1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 1.0, 1.0, 0.2, 0.3]
            .map(f16::from_f32)
            .to_vec(); // 5 positions: 2 cached, 3 new
        let values: Vec<f16> = (0..10).map(|x| f16::from_f32(x as f32)).collect();
        let q: Vec<f32> = (0..12).map(|x| (x as f32 * 0.37).sin()).collect(); // 3 rows
                                                                              // A chain is causal attention.
        let chain = vec![vec![0], vec![0, 1], vec![0, 1, 2]];
        let (mut a, mut b) = (vec![0.0f32; 12], vec![0.0f32; 12]);
        tree_attention(shape, &q, &keys, &values, &chain, &mut a);
        causal_attention(shape, &q, &keys, &values, &mut b);
        assert_eq!(a, b);
        // A branch: row 2 hangs under row 0, so it must not see row 1 — the same as causal
        // attention over a cache that never held row 1.
        let branch = vec![vec![0], vec![0, 1], vec![0, 2]];
        tree_attention(shape, &q, &keys, &values, &branch, &mut a);
        let drop = |xs: &[f16]| [&xs[..6], &xs[8..]].concat();
        let mut c = vec![0.0f32; 8];
        let q2 = [&q[..4], &q[8..]].concat();
        causal_attention(shape, &q2, &drop(&keys), &drop(&values), &mut c);
        assert_eq!(&a[8..], &c[4..]);
        assert_eq!(&a[..4], &c[..4]);
    }
}
