//! One sequence's keys and values, per layer, growing by append and shrinking by truncate.
//!
//! Layout per layer: `[len, n_kv_heads * head_dim]` row-major, so appending a token is one
//! `extend` and rolling back rejected drafts is a `truncate` that copies nothing.

/// The KV cache of one sequence.
#[derive(Debug, Clone)]
pub struct KvCache {
    width: usize,
    keys: Vec<Vec<f32>>,   // per layer: [len, width]
    values: Vec<Vec<f32>>, // per layer: [len, width]
}

impl KvCache {
    pub fn new(n_layers: usize, width: usize) -> Self {
        Self { width, keys: vec![Vec::new(); n_layers], values: vec![Vec::new(); n_layers] }
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

    /// Append rows for one layer. `k`, `v`: [rows, width].
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        self.keys[layer].extend_from_slice(k);
        self.values[layer].extend_from_slice(v);
    }

    /// All keys and values of one layer: ([len, width], [len, width]).
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        (&self.keys[layer], &self.values[layer])
    }

    /// Bytes held (for the KV memory budget and its gauge).
    pub fn bytes(&self) -> usize {
        let floats: usize = self.keys.iter().chain(&self.values).map(Vec::len).sum();
        floats * std::mem::size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_the_prefix() {
        let mut c = KvCache::new(2, 2);
        c.append(0, &[1., 2., 3., 4.], &[5., 6., 7., 8.]);
        c.append(1, &[1., 2., 3., 4.], &[5., 6., 7., 8.]);
        assert_eq!(c.len(), 2);
        c.truncate(1);
        assert_eq!(c.layer(1), (&[1., 2.][..], &[5., 6.][..]));
        assert_eq!(c.bytes(), 4 * 4);
    }
}
