//! One sequence's keys and values, per layer, growing by append and shrinking by truncate.
//!
//! Layout per layer: `[len, n_kv_heads * head_dim]` row-major, so appending a token is one
//! `extend` and rolling back rejected drafts is a `truncate` that copies nothing.
//! Values are stored as f16, as llama.cpp stores them by default: half the memory of f32, and
//! the same rounding the reference applies, so our logits track llama.cpp's closely.

use half::f16;

/// The KV cache of one sequence.
#[derive(Debug, Clone)]
pub struct KvCache {
    width: usize,
    keys: Vec<Vec<f16>>,   // per layer: [len, width]
    values: Vec<Vec<f16>>, // per layer: [len, width]
}

impl KvCache {
    pub fn new(n_layers: usize, width: usize) -> Self {
        Self {
            width,
            keys: vec![Vec::new(); n_layers],
            values: vec![Vec::new(); n_layers],
        }
    }

    /// Tokens held by layer 0 (every layer when the last forward ran the full model).
    pub fn len(&self) -> usize {
        self.layer_len(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens held by one layer; an early-exit forward fills only the first layers.
    pub fn layer_len(&self, layer: usize) -> usize {
        self.keys.get(layer).map_or(0, |k| k.len() / self.width)
    }

    /// Roll back to `len` tokens in every layer; longer layers lose their tail, shorter keep all.
    pub fn truncate(&mut self, len: usize) {
        let n = len * self.width;
        for (k, v) in self.keys.iter_mut().zip(&mut self.values) {
            k.truncate(n);
            v.truncate(n);
        }
    }

    /// Keep, after position `base`, only the rows at offsets `keep` (increasing, relative to
    /// `base`), moved to `base`, `base + 1`, …: a verified tree's accepted path becomes the
    /// sequence's next positions and everything else leaves.
    pub fn keep(&mut self, base: usize, keep: &[usize]) {
        let w = self.width;
        for buf in self.keys.iter_mut().chain(&mut self.values) {
            for (j, &r) in keep.iter().enumerate() {
                let (from, to) = ((base + r) * w, (base + j) * w);
                if from != to && from + w <= buf.len() {
                    buf.copy_within(from..from + w, to);
                }
            }
            buf.truncate((base + keep.len()) * w);
        }
    }

    /// Append rows for one layer from rows of `stride` values holding a key of `width`
    /// values at `k_at` and a value at `v_at` (the fused Q/K/V product).
    pub fn append_strided(
        &mut self,
        layer: usize,
        rows: &[f32],
        stride: usize,
        k_at: usize,
        v_at: usize,
    ) {
        let width = self.width;
        for row in rows.chunks_exact(stride) {
            push_f16(&mut self.keys[layer], &row[k_at..k_at + width]);
            push_f16(&mut self.values[layer], &row[v_at..v_at + width]);
        }
    }

    /// All keys and values of one layer: ([len, width], [len, width]).
    pub fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        (&self.keys[layer], &self.values[layer])
    }

    /// A copy of positions `first..first + len` of every layer (a prefix-cache block); None
    /// where a layer holds fewer.
    pub fn copy_range(&self, first: usize, len: usize) -> Option<KvCache> {
        let (from, to) = (first * self.width, (first + len) * self.width);
        let cut = |bufs: &[Vec<f16>]| -> Option<Vec<Vec<f16>>> {
            bufs.iter()
                .map(|b| b.get(from..to).map(<[f16]>::to_vec))
                .collect()
        };
        Some(KvCache {
            width: self.width,
            keys: cut(&self.keys)?,
            values: cut(&self.values)?,
        })
    }

    /// Room for `tokens` more positions in every layer without reallocating.
    pub fn reserve(&mut self, tokens: usize) {
        for buf in self.keys.iter_mut().chain(&mut self.values) {
            buf.reserve(tokens * self.width);
        }
    }

    /// Append another cache's positions after this one's, layer by layer (a cached block
    /// starting a sequence).
    pub fn extend_from(&mut self, other: &KvCache) {
        for (dst, src) in self.keys.iter_mut().zip(&other.keys) {
            dst.extend_from_slice(src);
        }
        for (dst, src) in self.values.iter_mut().zip(&other.values) {
            dst.extend_from_slice(src);
        }
    }

    /// Bytes held (for the KV memory budget and its gauge).
    pub fn bytes(&self) -> usize {
        let floats: usize = self.keys.iter().chain(&self.values).map(Vec::len).sum();
        floats * std::mem::size_of::<f16>()
    }
}

/// Round `xs` to f16 onto the end of `buf` (F16C where the CPU has it; the same rounding,
/// to nearest even, either way).
fn push_f16(buf: &mut Vec<f16>, xs: &[f32]) {
    use half::slice::HalfFloatSliceExt;
    let start = buf.len();
    buf.resize(start + xs.len(), f16::ZERO);
    buf[start..].convert_from_f32_slice(xs);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Append rows given as separate keys and values ([rows, width] each).
    fn append(c: &mut KvCache, layer: usize, k: &[f32], v: &[f32]) {
        let w = c.width;
        let fused: Vec<f32> = k
            .chunks(w)
            .zip(v.chunks(w))
            .flat_map(|(a, b)| [a, b].concat())
            .collect();
        c.append_strided(layer, &fused, 2 * w, 0, w);
    }

    #[test]
    fn keep_moves_the_accepted_rows_into_place_and_drops_the_rest() {
        let mut c = KvCache::new(2, 1);
        for layer in 0..2 {
            let rows: Vec<f32> = (0..7).map(|x| x as f32).collect();
            append(&mut c, layer, &rows, &rows);
        }
        // Base 2: keep offsets 0 (the pending token), 2 and 4.
        c.keep(2, &[0, 2, 4]);
        for layer in 0..2 {
            let (k, v) = c.layer(layer);
            let got: Vec<f32> = k.iter().map(|x| x.to_f32()).collect();
            assert_eq!(got, vec![0.0, 1.0, 2.0, 4.0, 6.0]);
            assert_eq!(k, v);
        }
        assert_eq!(c.len(), 5);
    }

    #[test]
    fn a_copied_range_starts_another_cache_with_the_same_rows() {
        let mut c = KvCache::new(2, 1);
        for layer in 0..2 {
            let rows: Vec<f32> = (0..6).map(|x| (x + 10 * layer) as f32).collect();
            append(&mut c, layer, &rows, &rows);
        }
        let (a, b) = (c.copy_range(0, 2).unwrap(), c.copy_range(2, 2).unwrap());
        assert!(c.copy_range(5, 2).is_none());
        let mut d = KvCache::new(2, 1);
        d.extend_from(&a);
        d.extend_from(&b);
        assert_eq!(d.len(), 4);
        for layer in 0..2 {
            assert_eq!(d.layer(layer).0, &c.layer(layer).0[..4]);
            assert_eq!(d.layer(layer).1, &c.layer(layer).1[..4]);
        }
    }

    #[test]
    fn truncate_keeps_the_prefix() {
        let mut c = KvCache::new(2, 2);
        append(&mut c, 0, &[1., 2., 3., 4.], &[5., 6., 7., 8.]);
        append(&mut c, 1, &[1., 2., 3., 4.], &[5., 6., 7., 8.]);
        assert_eq!(c.len(), 2);
        c.truncate(1);
        let (k, v) = c.layer(1);
        assert_eq!((k[1].to_f32(), v[0].to_f32()), (2.0, 5.0));
        assert_eq!((k.len(), c.bytes()), (2, 2 * 4 * 2)); // 2 layers × (K + V) × 2 halves
    }
}
