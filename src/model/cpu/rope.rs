//! Rotary position embedding in GGUF llama's "normal" layout: pairs (2i, 2i+1) of each head.
//!
//! The angle table is built exactly as ggml builds it (f32 `theta *= theta_scale`), so our
//! rotations match llama.cpp's to the bit and agreement with it is not lost here.

/// Precomputed cos/sin per (position, pair).
#[derive(Debug, Clone)]
pub struct Rope {
    pairs: usize,
    cos: Vec<f32>, // [positions, pairs]
    sin: Vec<f32>, // [positions, pairs]
}

impl Rope {
    pub fn new(rope_dim: usize, base: f32, positions: usize) -> Self {
        let pairs = rope_dim / 2;
        let theta_scale = base.powf(-2.0 / rope_dim as f32);
        let mut cos = Vec::with_capacity(positions * pairs);
        let mut sin = Vec::with_capacity(positions * pairs);
        for p in 0..positions {
            let mut theta = p as f32;
            for _ in 0..pairs {
                cos.push(theta.cos());
                sin.push(theta.sin());
                theta *= theta_scale;
            }
        }
        Self { pairs, cos, sin }
    }

    /// The angle tables, [positions, pairs] each: (cos, sin).
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
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
            for (i, pair) in head[..2 * self.pairs].chunks_exact_mut(2).enumerate() {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * cos[i] - b * sin[i];
                pair[1] = a * sin[i] + b * cos[i];
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
}
