//! What the EAGLE layer is taught at each drafted position, three signals from the same data:
//! - the target's token there (cross-entropy on its draft-vocabulary column; tokens outside
//!   the draft vocabulary teach nothing);
//! - the target's whole distribution there (cross-entropy against the softmax of its own LM
//!   head over the draft vocabulary, EAGLE's classification loss), which says how close the
//!   runners-up were: the tree drafts them;
//! - the target's next hidden state itself (smooth L1 per element, EAGLE's regression loss):
//!   a dense target, and what the layer's output is read as one step later.
//!
//! The last two come free from the stored hidden states, no more generation. Which weights
//! the shipped layer uses, and what each changed, is in `strategies/data/eagle/README.md`.

use candle_core::{Tensor, D};

use crate::heads::trainer::{masked_cross_entropy, FrozenHead};
use crate::heads::training::TrainError;

/// Weights of the distribution and hidden-state terms (the token term weighs 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossWeights {
    pub distribution: f64,
    pub hidden: f64,
}

/// One step's loss over its positions: `f` the layer's output features [n, hidden], `next`
/// the target's features that produced the labels [n, hidden], `labels` their columns [n].
pub fn step_loss(
    f: &Tensor,
    next: &Tensor,
    labels: &[u32],
    frozen: &FrozenHead,
    w: LossWeights,
) -> Result<Tensor, TrainError> {
    let lm = frozen.lm.t()?;
    let logits = f.matmul(&lm)?;
    let mut loss = masked_cross_entropy(&logits, labels)?;
    if w.distribution > 0.0 {
        let teacher = candle_nn::ops::softmax_last_dim(&next.matmul(&lm)?)?;
        loss = (loss + (soft_cross_entropy(&logits, &teacher)? * w.distribution)?)?;
    }
    if w.hidden > 0.0 {
        loss = (loss + (smooth_l1(f, next)? * w.hidden)?)?;
    }
    Ok(loss)
}

/// Mean over rows of −Σ p·log softmax(logits): the cross-entropy against distributions `p`.
pub fn soft_cross_entropy(logits: &Tensor, p: &Tensor) -> Result<Tensor, TrainError> {
    let log_q = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    Ok(((p * log_q)?.sum(D::Minus1)?.mean_all()? * -1.0)?)
}

/// Smooth L1 (Huber, δ = 1) per element, averaged over elements.
pub fn smooth_l1(a: &Tensor, b: &Tensor) -> Result<Tensor, TrainError> {
    let d = (a - b)?.abs()?;
    let small = d.clamp(0.0f32, 1.0f32)?;
    // |d| < 1: d²/2; otherwise |d| − 1/2 (= 1/2 + (|d| − 1)).
    Ok(((small.sqr()? * 0.5)? + (d - small)?)?.mean_all()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(v: &[f32], shape: (usize, usize)) -> Tensor {
        Tensor::from_slice(v, shape, &Device::Cpu).expect("tensor")
    }

    #[test]
    fn smooth_l1_is_quadratic_near_zero_and_linear_beyond_one() {
        let a = t(&[0.5, 3.0], (1, 2));
        let b = t(&[0.0, 0.0], (1, 2));
        let got = smooth_l1(&a, &b).and_then(|x| Ok(x.to_scalar::<f32>()?));
        // (0.125 + 2.5) / 2
        assert!((got.expect("loss") - 1.3125).abs() < 1e-6);
    }

    #[test]
    fn soft_cross_entropy_is_least_at_the_teacher_distribution() {
        let p = t(&[0.7, 0.2, 0.1], (1, 3));
        let at = |l: &[f32]| {
            soft_cross_entropy(&t(l, (1, 3)), &p)
                .and_then(|x| Ok(x.to_scalar::<f32>()?))
                .expect("loss")
        };
        let own = at(&[0.7f32.ln(), 0.2f32.ln(), 0.1f32.ln()]);
        let entropy = -(0.7f32 * 0.7f32.ln() + 0.2 * 0.2f32.ln() + 0.1 * 0.1f32.ln());
        assert!((own - entropy).abs() < 1e-5);
        assert!(at(&[2.0, 0.0, 0.0]) > own && at(&[0.0, 1.0, 0.0]) > own);
    }
}
