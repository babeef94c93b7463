//! Verification: which drafted tokens the target accepts, and the token that follows.
//!
//! Output tokens of a round = the accepted drafts + one more: the recovered token that
//! replaces the first rejection, or the bonus token when all drafts pass.
//!
//! Greedy: accept while the draft equals the target's argmax. Sampling: accept x with
//! probability min(1, p(x)/q(x)); on rejection sample from max(0, p − q) renormalised. This
//! keeps the output distribution exactly the target's (Leviathan et al. 2023; Chen et al.
//! 2023). Resampling from plain p after a rejection would be biased: never do it.

use rand::Rng;

use crate::draft::Draft;
use crate::sampling::{argmax, sample_from, SamplingParams};
use crate::TokenId;

/// The outcome of one round: emit `draft[..accepted]`, then `next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub accepted: usize,
    pub next: TokenId,
}

/// Greedy verification. `rows`: [k + 1, vocab], row i the target's logits after draft[..i].
pub fn verify_greedy(draft: &[TokenId], rows: &[f32], vocab: usize) -> Verdict {
    let row = |i: usize| &rows[i * vocab..(i + 1) * vocab];
    for (i, &d) in draft.iter().enumerate() {
        let best = argmax(row(i));
        if best != d {
            return Verdict {
                accepted: i,
                next: best,
            };
        }
    }
    Verdict {
        accepted: draft.len(),
        next: argmax(row(draft.len())),
    }
}

/// Verification for any params: greedy when the temperature is 0, else rejection sampling.
pub fn verify(
    draft: &Draft,
    rows: &[f32],
    vocab: usize,
    params: &SamplingParams,
    rng: &mut impl Rng,
) -> Verdict {
    if params.is_greedy() {
        return verify_greedy(&draft.tokens, rows, vocab);
    }
    let row = |i: usize| &rows[i * vocab..(i + 1) * vocab];
    for (i, &x) in draft.tokens.iter().enumerate() {
        let p = params.probs(row(i));
        let q = draft.q.as_ref().map(|q| q[i].as_slice());
        match accept_or_recover(&p, q, x, rng) {
            None => continue,
            Some(next) => return Verdict { accepted: i, next },
        }
    }
    let p = params.probs(row(draft.len()));
    Verdict {
        accepted: draft.len(),
        next: sample_from(&p, rng),
    }
}

/// One step of rejection sampling for draft token `x`: `None` when accepted, else the
/// recovered token drawn from the residual max(0, p − q). `q = None` is a point mass on x.
pub fn accept_or_recover(
    p: &[f32],
    q: Option<&[f32]>,
    x: TokenId,
    rng: &mut impl Rng,
) -> Option<TokenId> {
    let xi = x as usize;
    let qx = q.map_or(1.0, |q| q[xi]);
    let px = p[xi];
    // qx == 0 cannot come from a sampled draft; treat it as a rejection rather than divide.
    if qx > 0.0 && (px >= qx || rng.random::<f32>() < px / qx) {
        return None;
    }
    let residual: Vec<f32> = match q {
        Some(q) => p.iter().zip(q).map(|(&a, &b)| (a - b).max(0.0)).collect(),
        None => p
            .iter()
            .enumerate()
            .map(|(i, &a)| if i == xi { 0.0 } else { a })
            .collect(),
    };
    if residual.iter().all(|&r| r <= 0.0) {
        // p ≤ q everywhere means p == q: a rejection then has probability 0; guard anyway.
        return Some(sample_from(p, rng));
    }
    Some(sample_from(&residual, rng))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(argmaxes: &[usize], vocab: usize) -> Vec<f32> {
        let mut r = vec![0.0f32; argmaxes.len() * vocab];
        for (i, &a) in argmaxes.iter().enumerate() {
            r[i * vocab + a] = 1.0;
        }
        r
    }

    #[test]
    fn greedy_accepts_the_agreeing_prefix_then_recovers() {
        let r = rows(&[3, 1, 4, 1], 5);
        assert_eq!(
            verify_greedy(&[3, 1, 4], &r, 5),
            Verdict {
                accepted: 3,
                next: 1
            },
            "bonus"
        );
        assert_eq!(
            verify_greedy(&[3, 2, 4], &r, 5),
            Verdict {
                accepted: 1,
                next: 1
            }
        );
        assert_eq!(
            verify_greedy(&[0, 1, 4], &r, 5),
            Verdict {
                accepted: 0,
                next: 3
            }
        );
        assert_eq!(
            verify_greedy(&[], &r[..5], 5),
            Verdict {
                accepted: 0,
                next: 3
            },
            "plain"
        );
    }
}
