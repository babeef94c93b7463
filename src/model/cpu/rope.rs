//! Rotary position embedding, in either pair layout: GGUF llama's (2i, 2i + 1) or NeoX's
//! (i, i + d/2) (Qwen, Gemma).
//!
//! The angle table is built exactly as ggml builds it (f32 `theta *= theta_scale`, divided
//! by a Llama 3 frequency factor, times a linear scale), so our rotations match llama.cpp's
//! to the bit and agreement with it is not lost here.

use crate::model::arch::RopeStyle;
use crate::model::config::ModelConfig;

/// One rotary table per distinct (base, scale) the model's layers use, and each layer's
/// index into them (Gemma 3's local layers rotate with another base than its global ones).
pub fn layer_ropes(config: &ModelConfig, freq_factors: Option<&[f32]>) -> (Vec<Rope>, Vec<usize>) {
    let (mut ropes, mut kinds, mut of_layer) = (Vec::new(), Vec::new(), Vec::new());
    for l in 0..config.n_layers {
        let kind = config.layer_rope(l);
        let at = kinds.iter().position(|&k| k == kind).unwrap_or_else(|| {
            let spec = RopeSpec {
                rope_dim: config.rope_dim,
                base: kind.0,
                freq_scale: kind.1,
                freq_factors,
                style: config.arch.rope_style(),
            };
            ropes.push(Rope::with_spec(spec, config.context_length));
            kinds.push(kind);
            kinds.len() - 1
        });
        of_layer.push(at);
    }
    (ropes, of_layer)
}

/// Precomputed cos/sin per (position, pair).
#[derive(Debug, Clone)]
pub struct Rope {
    pairs: usize,
    style: RopeStyle,
    cos: Vec<f32>, // [positions, pairs]
    sin: Vec<f32>, // [positions, pairs]
}

/// How the rotation angles are made: ggml's `theta_base`, `freq_scale` and `freq_factors`.
#[derive(Debug, Clone, Copy)]
pub struct RopeSpec<'a> {
    pub rope_dim: usize,
    pub base: f32,
    pub freq_scale: f32,
    /// Llama 3's per-pair divisors (`rope_freqs.weight`), [rope_dim / 2].
    pub freq_factors: Option<&'a [f32]>,
    pub style: RopeStyle,
}

impl Rope {
    /// The plain llama table (interleaved pairs, no scaling).
    pub fn new(rope_dim: usize, base: f32, positions: usize) -> Self {
        let spec = RopeSpec {
            rope_dim,
            base,
            freq_scale: 1.0,
            freq_factors: None,
            style: RopeStyle::Interleaved,
        };
        Self::with_spec(spec, positions)
    }

    pub fn with_spec(spec: RopeSpec<'_>, positions: usize) -> Self {
        let pairs = spec.rope_dim / 2;
        let theta_scale = spec.base.powf(-2.0 / spec.rope_dim as f32);
        let mut cos = Vec::with_capacity(positions * pairs);
        let mut sin = Vec::with_capacity(positions * pairs);
        for p in 0..positions {
            let mut theta = p as f32;
            for i in 0..pairs {
                let ff = spec.freq_factors.and_then(|f| f.get(i)).copied();
                let angle = spec.freq_scale * ff.map_or(theta, |ff| theta / ff);
                cos.push(angle.cos());
                sin.push(angle.sin());
                theta *= theta_scale;
            }
        }
        Self {
            pairs,
            style: spec.style,
            cos,
            sin,
        }
    }

    /// The angle tables, [positions, pairs] each: (cos, sin).
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// Value pairs rotated per head (rope_dim / 2).
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// Positions the table covers.
    pub fn positions(&self) -> usize {
        self.cos.len() / self.pairs.max(1)
    }

    /// Rotate every head of one token in place. `x`: [n_heads * head_dim].
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        let cos = &self.cos[pos * self.pairs..][..self.pairs];
        let sin = &self.sin[pos * self.pairs..][..self.pairs];
        for head in x.chunks_exact_mut(head_dim) {
            match self.style {
                RopeStyle::Interleaved => {
                    for (i, pair) in head[..2 * self.pairs].chunks_exact_mut(2).enumerate() {
                        let (a, b) = (pair[0], pair[1]);
                        pair[0] = a * cos[i] - b * sin[i];
                        pair[1] = a * sin[i] + b * cos[i];
                    }
                }
                RopeStyle::Neox => {
                    let (lo, hi) = head[..2 * self.pairs].split_at_mut(self.pairs);
                    for i in 0..self.pairs {
                        let (a, b) = (lo[i], hi[i]);
                        lo[i] = a * cos[i] - b * sin[i];
                        hi[i] = a * sin[i] + b * cos[i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_rotation_keeps_norm() {
        let rope = Rope::new(4, 10_000.0, 8);
        let mut x = [1.0, 2.0, 3.0, 4.0];
        rope.apply(&mut x, 4, 0);
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
        rope.apply(&mut x, 4, 5);
        let norm: f32 = x.iter().map(|v| v * v).sum();
        assert!((norm - 30.0).abs() < 1e-4);
        // The first pair turns by exactly `pos` radians.
        let mut y = [1.0, 0.0, 0.0, 0.0];
        rope.apply(&mut y, 4, 1);
        assert!((y[0] - 1f32.cos()).abs() < 1e-6 && (y[1] - 1f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn neox_pairs_a_value_with_the_one_half_a_head_away() {
        let spec = |style| RopeSpec {
            rope_dim: 4,
            base: 10_000.0,
            freq_scale: 1.0,
            freq_factors: None,
            style,
        };
        let (normal, neox) = (
            Rope::with_spec(spec(RopeStyle::Interleaved), 8),
            Rope::with_spec(spec(RopeStyle::Neox), 8),
        );
        // NeoX on [a, b, c, d] is the interleaved rotation of [a, c, b, d], reordered back.
        let (mut x, mut y) = ([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]);
        neox.apply(&mut x, 4, 3);
        normal.apply(&mut y, 4, 3);
        assert_eq!(x, [y[0], y[2], y[1], y[3]]);
        // A frequency factor f and a linear scale s turn pair i by pos·θᵢ·s/f.
        let scaled = Rope::with_spec(
            RopeSpec {
                freq_scale: 0.5,
                freq_factors: Some(&[4.0, 1.0]),
                ..spec(RopeStyle::Interleaved)
            },
            8,
        );
        let (cos, _) = scaled.tables();
        assert_eq!(cos[2 * 2], (0.5 * (2.0f32 / 4.0)).cos());
    }
}
