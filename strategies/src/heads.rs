//! Medusa heads' weights and arithmetic. On the target's final (normed) hidden state h of the
//! row that produced the pending token, head i computes
//! h_i = h + SiLU(W_i·h + U_i·e + V_i·e_prev + b_i), and the target's own LM head turns h_i
//! into a distribution over the token i + 1 places past the pending one.
//! - e is the pending token's row of the LM head: h only implies which token the target chose
//!   through an argmax the heads cannot compute, and that token is the best single clue to
//!   what follows it. Heads without U (format 1) ignore it.
//! - e_prev is the row of the token just before head i's target: the pending token for head 0,
//!   and the token drafted for the place before it for every later head (Hydra's sequential
//!   heads). Without V (formats 1 and 2) the heads do not see each other's guesses, so a chain
//!   of k heads is k independent guesses; with V, head i scores continuations of the guess it
//!   is given, which is what a draft that has been accepted so far needs.

use crate::head_matrix::Q8Matrix;
use crate::top_n::top_n_at;
use crate::TokenId;

/// The heads' weights, plain f32, row-major (and, once quantized, the 8-bit copies drafting
/// reads).
#[derive(Debug, Clone)]
pub struct MedusaHeads {
    pub hidden: usize,
    pub w: Vec<Vec<f32>>, // per head: [hidden (out), hidden (in)]
    pub b: Vec<Vec<f32>>, // per head: [hidden]
    /// Per head: [hidden (out), hidden (in)] over the pending token's embedding; empty for
    /// heads that see h only.
    pub u: Vec<Vec<f32>>,
    /// Per head: [hidden (out), hidden (in)] over the embedding of the token before the head's
    /// target; empty for heads that do not chain.
    pub v: Vec<Vec<f32>>,
    /// Per head: the softmax temperature that calibrates its probabilities (fitted on
    /// held-out data; empty or missing: 1). Candidate trees rank nodes by the product of
    /// their heads' probabilities, which only estimates a path's chance of acceptance when
    /// each head is as confident as it is right; greedy chains take the argmax and ignore it.
    pub temperatures: Vec<f32>,
    /// Per head: the share of held-out labels inside the draft vocabulary (empty or missing:
    /// 1). The calibrated softmax is the chance of a token given that the label can be
    /// drafted at all; a tree node's chance of acceptance is that times this.
    pub coverage: Vec<f32>,
    /// Per head: 8-bit copies of W, U and V that drafting reads instead of the f32 ones
    /// (`quantize`); empty: the f32 weights.
    pub q8: Vec<Q8Head>,
}

/// One head's matrices as [`Q8Matrix`]es.
#[derive(Debug, Clone)]
pub struct Q8Head {
    w: Q8Matrix,
    u: Option<Q8Matrix>,
    v: Option<Q8Matrix>,
}

impl MedusaHeads {
    pub fn num_heads(&self) -> usize {
        self.w.len()
    }

    /// Heads all zero: every head passes h through unchanged (training starts here, so an
    /// untrained head predicts what the target's next token would be).
    pub fn zeros(num_heads: usize, hidden: usize) -> Self {
        Self {
            hidden,
            w: vec![vec![0.0; hidden * hidden]; num_heads],
            b: vec![vec![0.0; hidden]; num_heads],
            u: Vec::new(),
            v: Vec::new(),
            temperatures: Vec::new(),
            coverage: Vec::new(),
            q8: Vec::new(),
        }
    }

    /// Make drafting read 8-bit copies of the matrices: a quarter of the bytes a draft step
    /// streams, at a state error far below the heads' own (each weight moves by at most half
    /// a step of 1/127 of its block's largest). Later edits of `w`, `u` or `v` are not seen
    /// until this runs again.
    pub fn quantize(&mut self) {
        let d = self.hidden;
        let q = |m: &Vec<f32>| (!m.is_empty()).then(|| Q8Matrix::from_f32(m, d)).flatten();
        // All heads or none: `q8[i]` must be head i's.
        self.q8 = (0..self.num_heads())
            .map(|i| {
                Some(Q8Head {
                    w: q(&self.w[i])?,
                    u: self.u.get(i).and_then(q),
                    v: self.v.get(i).and_then(q),
                })
            })
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
    }

    /// Head i's calibrating temperature (1 when none was fitted).
    pub fn temperature(&self, i: usize) -> f32 {
        self.temperatures.get(i).copied().unwrap_or(1.0)
    }

    /// Head i's `n` likeliest tokens in `row` (its logits over the draft vocabulary) with
    /// each one's calibrated chance of being the token there: what a tree ranks.
    pub fn candidates(&self, i: usize, row: &[f32], n: usize) -> Vec<(TokenId, f32)> {
        let coverage = self.coverage.get(i).copied().unwrap_or(1.0);
        top_n_at(row, n, self.temperature(i))
            .into_iter()
            .map(|(t, p)| (t, p * coverage))
            .collect()
    }

    /// Whether the heads read the pending token's embedding.
    pub fn token_conditioned(&self) -> bool {
        !self.u.is_empty()
    }

    /// Whether each head reads the token drafted before it: drafting is then sequential.
    pub fn chained(&self) -> bool {
        !self.v.is_empty()
    }

    /// Head 0's token before its target is the pending token, which U_0 already reads: fold
    /// V_0 into U_0 and drop it (the same heads, one matrix-vector product less per round;
    /// an empty V_i reads nothing).
    pub fn fold_first_prev(&mut self) {
        if let (Some(u), Some(v)) = (self.u.first_mut(), self.v.first_mut()) {
            if u.len() == v.len() {
                u.iter_mut().zip(v.iter()).for_each(|(u, v)| *u += v);
                v.clear();
            }
        }
    }

    /// W_i·h + U_i·e + b_i: the part of head i's pre-activation that every candidate drafted
    /// before it shares. e None is a zero vector (as in training for tokens past the
    /// embedding vocabulary).
    pub fn shared_part(&self, i: usize, h: &[f32], e: Option<&[f32]>) -> Vec<f32> {
        let d = self.hidden;
        if let Some(q) = self.q8.get(i) {
            let mut z = q.w.mul(h);
            let ue = q.u.as_ref().zip(e).map(|(u, e)| u.mul(e));
            for (o, z) in z.iter_mut().enumerate() {
                *z += self.b[i][o] + ue.as_ref().map_or(0.0, |ue| ue[o]);
            }
            return z;
        }
        let u = self.u.get(i).zip(e);
        self.w[i]
            .chunks_exact(d)
            .enumerate()
            .map(|(o, row)| {
                let mut z = dot(row, h) + self.b[i][o];
                if let Some((u, e)) = u {
                    z += dot(&u[o * d..(o + 1) * d], e);
                }
                z
            })
            .collect()
    }

    /// Head i's state from its shared part `z` and the embedding of the token before its
    /// target (ignored by heads that do not chain; None is a zero vector).
    pub fn finish(&self, i: usize, h: &[f32], z: &[f32], prev: Option<&[f32]>) -> Vec<f32> {
        let d = self.hidden;
        let v = self.v.get(i).filter(|v| !v.is_empty()).zip(prev);
        let v8 = self.q8.get(i).and_then(|q| q.v.as_ref()).zip(prev);
        let vp = v8.map(|(v, p)| v.mul(p));
        (0..d)
            .map(|o| {
                let mut z = z[o];
                if let Some(vp) = &vp {
                    z += vp[o];
                } else if let Some((v, p)) = v {
                    z += dot(&v[o * d..(o + 1) * d], p);
                }
                h[o] + z / (1.0 + (-z).exp())
            })
            .collect()
    }

    /// Head i's state for hidden state h, pending-token embedding e and the embedding of the
    /// token before the head's target.
    pub fn state(&self, i: usize, h: &[f32], e: Option<&[f32]>, prev: Option<&[f32]>) -> Vec<f32> {
        self.finish(i, h, &self.shared_part(i, h, e), prev)
    }

    /// The first `n` heads' states ([n, hidden]) for heads that do not chain; chained heads
    /// get the pending token as head 0's previous token and nothing after it.
    pub fn states(&self, h: &[f32], e: Option<&[f32]>, n: usize) -> Vec<f32> {
        (0..n.min(self.num_heads()))
            .flat_map(|i| self.state(i, h, e, if i == 0 { e } else { None }))
            .collect()
    }
}

/// A dot product in 16 independent lanes, so the compiler vectorises it (a plain running sum
/// fixes the order of additions and stays scalar: 0.26 ms per head against 0.03). A 576 × 576
/// f32 matrix-vector product takes 30 µs here, about the time to stream the 1.3 MB matrix from
/// L3; FMA would save a quarter of it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let mut lanes = [0.0f32; L];
    let (ac, bc) = (a.chunks_exact(L), b.chunks_exact(L));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..L {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diagonal(scale: f32, d: usize) -> Vec<f32> {
        let mut m = vec![0.0; d * d];
        for i in 0..d {
            m[i * d + i] = scale;
        }
        m
    }

    #[test]
    fn the_lane_dot_product_equals_the_plain_one() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.91).cos()).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-5);
    }

    #[test]
    fn a_chained_head_adds_the_previous_tokens_row_and_unchained_heads_ignore_it() {
        let mut heads = MedusaHeads::zeros(2, 4);
        let h = [0.0, 3.0, 1.0, 0.0];
        let prev = [0.0, 0.0, 0.0, 1.0];
        assert_eq!(heads.state(1, &h, None, Some(&prev)), h, "no V: ignored");
        heads.v = vec![diagonal(0.0, 4), diagonal(8.0, 4)];
        assert!(heads.chained());
        let s = heads.state(1, &h, None, Some(&prev));
        assert!((s[3] - 8.0 / (1.0 + (-8.0f32).exp())).abs() < 1e-5);
        assert_eq!(&s[..3], &h[..3]);
        // Splitting the work changes nothing: the shared part plus the chained term.
        let z = heads.shared_part(1, &h, None);
        assert_eq!(heads.finish(1, &h, &z, Some(&prev)), s);
    }

    #[test]
    fn quantized_heads_give_nearly_the_f32_states_and_drafting_reads_them() {
        let d = 64;
        let m = |k: f32| {
            (0..d * d)
                .map(|i| ((i as f32 + k) * 0.37).sin() * 0.2)
                .collect::<Vec<_>>()
        };
        let mut heads = MedusaHeads::zeros(2, d);
        heads.w = vec![m(0.0), m(1.0)];
        heads.u = vec![m(2.0), m(3.0)];
        heads.v = vec![Vec::new(), m(4.0)];
        let vec_of = |k: f32| {
            (0..d)
                .map(|i| ((i as f32 + k) * 0.91).cos())
                .collect::<Vec<_>>()
        };
        let (h, e, p) = (vec_of(0.0), vec_of(1.0), vec_of(2.0));
        let f32_states = [
            heads.state(0, &h, Some(&e), None),
            heads.state(1, &h, Some(&e), Some(&p)),
        ];
        heads.quantize();
        assert_eq!(heads.q8.len(), 2);
        let q8_states = [
            heads.state(0, &h, Some(&e), None),
            heads.state(1, &h, Some(&e), Some(&p)),
        ];
        for (a, b) in f32_states.iter().flatten().zip(q8_states.iter().flatten()) {
            assert!((a - b).abs() < 0.02, "{a} vs {b}");
        }
        assert_ne!(f32_states, q8_states, "drafting reads the 8-bit copies");
    }

    #[test]
    fn folding_head_0s_previous_token_into_its_token_weights_keeps_its_state() {
        let d = 4;
        let mut heads = MedusaHeads::zeros(2, d);
        let m = |k: f32| {
            (0..d * d)
                .map(|i| ((i as f32 + k) * 0.37).sin())
                .collect::<Vec<_>>()
        };
        heads.u = vec![m(1.0), m(2.0)];
        heads.v = vec![m(3.0), m(4.0)];
        let (h, e, p) = (
            [0.5, -1.0, 2.0, 0.1],
            [0.3, 0.2, -0.4, 1.0],
            [1.0, 0.0, 0.5, -0.5],
        );
        let before = [
            heads.state(0, &h, Some(&e), Some(&e)),
            heads.state(1, &h, Some(&e), Some(&p)),
        ];
        heads.fold_first_prev();
        assert!(heads.v[0].is_empty() && heads.chained());
        let after = [
            heads.state(0, &h, Some(&e), Some(&e)),
            heads.state(1, &h, Some(&e), Some(&p)),
        ];
        for (b, a) in before.iter().flatten().zip(after.iter().flatten()) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
