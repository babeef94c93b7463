//! The EAGLE draft layer's shape and weights, as plain f32 tensors by name: what training
//! writes and drafting reads.
//!
//! At draft position j the layer reads the target's final normed hidden state h_j of the row
//! that produced token t_j (or, past the verified tokens, its own normed output for the place
//! before) and t_j's embedding e_j:
//!   x = FC·[RMS(h_j)·n_h ; RMS(e_j)·n_e]
//!   x += O·attention(RoPE(Q·RMS(x)·n_a), RoPE(K·…), V·…) over its own cache (causal / tree)
//!   x += DOWN·(SiLU(GATE·m) ⊙ UP·m), m = RMS(x)·n_f
//!   f = RMS(x)·n_out        — its guess at h_{j+1}; the target's LM head turns f into t_{j+1}.

/// The layer's dimensions (from the target it was trained for).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EagleShape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
}

impl EagleShape {
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Every tensor the layer has: (name, [rows, cols]) with cols 1 for vectors.
    pub fn tensors(&self) -> Vec<(&'static str, [usize; 2])> {
        let (d, f) = (self.hidden, self.ffn);
        vec![
            ("fc", [d, 2 * d]),
            ("norm_h", [d, 1]),
            ("norm_e", [d, 1]),
            ("attn_norm", [d, 1]),
            ("q", [self.q_dim(), d]),
            ("k", [self.kv_dim(), d]),
            ("v", [self.kv_dim(), d]),
            ("o", [d, self.q_dim()]),
            ("ffn_norm", [d, 1]),
            ("gate", [f, d]),
            ("up", [f, d]),
            ("down", [d, f]),
            ("out_norm", [d, 1]),
        ]
    }

    /// Whether the shape can be drafted with: heads divide evenly into key/value groups and
    /// head dimensions pair up for RoPE.
    pub fn check(&self) -> Result<(), String> {
        let ok = self.hidden > 0
            && self.heads > 0
            && self.kv_heads > 0
            && self.heads.is_multiple_of(self.kv_heads)
            && self.head_dim > 0
            && self.head_dim.is_multiple_of(2)
            && self.ffn > 0
            && self.rope_base > 0.0
            && self.rms_eps > 0.0;
        if ok {
            Ok(())
        } else {
            Err(format!("not a drafting shape: {self:?}"))
        }
    }
}

/// The weights, row-major f32, in the order of [`EagleShape::tensors`].
#[derive(Debug, Clone)]
pub struct EagleWeights {
    pub shape: EagleShape,
    pub tensors: Vec<Vec<f32>>,
}

impl EagleWeights {
    /// Weights from named tensors; each must have its shape's size.
    pub fn from_named(
        shape: EagleShape,
        mut get: impl FnMut(&str) -> Option<Vec<f32>>,
    ) -> Result<Self, String> {
        shape.check()?;
        let mut tensors = Vec::new();
        for (name, [r, c]) in shape.tensors() {
            let t = get(name).ok_or_else(|| format!("tensor {name:?} missing"))?;
            if t.len() != r * c {
                return Err(format!(
                    "tensor {name:?} has {} values; the shape needs {r} x {c}",
                    t.len()
                ));
            }
            if t.iter().any(|v| !v.is_finite()) {
                return Err(format!("tensor {name:?} holds a value that is not finite"));
            }
            tensors.push(t);
        }
        Ok(Self { shape, tensors })
    }

    /// Tensor `name` ([rows * cols]); empty for a name the layer does not have.
    pub fn get(&self, name: &str) -> &[f32] {
        self.shape
            .tensors()
            .iter()
            .position(|(n, _)| *n == name)
            .and_then(|i| self.tensors.get(i))
            .map_or(&[], Vec::as_slice)
    }
}

/// RoPE angles for position `pos`: (cos, sin) of pos · base^(−2i/head_dim) for each pair i,
/// pairs being adjacent values (2i, 2i + 1). Training builds its tables with this too.
pub fn rope_angles(pos: usize, head_dim: usize, base: f32) -> (Vec<f32>, Vec<f32>) {
    let pairs = head_dim / 2;
    (0..pairs)
        .map(|i| {
            let theta = (pos as f64) * f64::from(base).powf(-2.0 * i as f64 / head_dim as f64);
            (theta.cos() as f32, theta.sin() as f32)
        })
        .unzip()
}

/// Rotate `x` ([heads × head_dim]) in place by the angles of one position.
pub fn rope_in_place(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    for head in x.chunks_exact_mut(head_dim) {
        for (i, pair) in head.chunks_exact_mut(2).enumerate() {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos[i] - b * sin[i];
            pair[1] = a * sin[i] + b * cos[i];
        }
    }
}

/// RMSNorm of `x` times `w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * s * w).collect()
}
