//! Turning one row of logits into a token: greedy, or sampling from the distribution that
//! temperature, top-k, top-p and min-p shape. Verification uses the same [`SamplingParams::probs`]
//! for the target's p and a draft model's q, so both see one transformation.

use rand::Rng;

use crate::TokenId;

/// Temperatures below this are greedy (vLLM draws the same line).
pub const GREEDY_BELOW: f32 = 1e-5;

/// How a token is chosen from a row of logits. A temperature below [`GREEDY_BELOW`] (0
/// included) means greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 disables.
    pub top_k: usize,
    /// Keep the smallest set whose mass reaches top_p; 1.0 disables.
    pub top_p: f32,
    /// Drop tokens whose probability is below min_p × the top probability; 0 disables.
    pub min_p: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

/// A sampling parameter outside its domain.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplingError {
    #[error("temperature must be a finite number >= 0, got {0}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
        }
    }

    /// Below [`GREEDY_BELOW`] sampling is greedy: 1/T would overflow to infinity (and the
    /// softmax to NaN) long before the distribution stops being a point mass.
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_BELOW
    }

    pub fn validate(&self) -> Result<(), SamplingError> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingError::MinP(self.min_p));
        }
        Ok(())
    }

    /// The distribution tokens are drawn from: softmax(logits / T), then top-k, top-p and min-p
    /// filtering, renormalised. Greedy params give a point mass on the argmax.
    /// `logits`: [vocab]; returns [vocab].
    pub fn probs(&self, logits: &[f32]) -> Vec<f32> {
        let mut probs = vec![0.0f32; logits.len()];
        if logits.is_empty() {
            return probs;
        }
        if self.is_greedy() {
            probs[argmax(logits) as usize] = 1.0;
            return probs;
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let inv_t = 1.0 / self.temperature;
        let mut sum = 0.0f64;
        for (p, &l) in probs.iter_mut().zip(logits) {
            *p = ((l - max) * inv_t).exp();
            sum += *p as f64;
        }
        let inv = (1.0 / sum) as f32;
        probs.iter_mut().for_each(|p| *p *= inv);
        if self.top_k > 0 || self.top_p < 1.0 || self.min_p > 0.0 {
            self.filter(&mut probs);
        }
        probs
    }

    /// Zero the tokens that top-k, top-p or min-p exclude, then renormalise.
    fn filter(&self, probs: &mut [f32]) {
        let mut order: Vec<u32> = (0..probs.len() as u32).collect();
        // Ties broken by token id so the kept set never depends on the sort's stability.
        order.sort_unstable_by(|&a, &b| {
            probs[b as usize]
                .total_cmp(&probs[a as usize])
                .then(a.cmp(&b))
        });
        let top = probs[order[0] as usize];
        let mut keep = if self.top_k > 0 {
            self.top_k.min(order.len())
        } else {
            order.len()
        };
        if self.top_p < 1.0 {
            let mut mass = 0.0f32;
            for (i, &t) in order[..keep].iter().enumerate() {
                mass += probs[t as usize];
                if mass >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.min_p > 0.0 {
            let floor = self.min_p * top;
            keep = order[..keep]
                .iter()
                .take_while(|&&t| probs[t as usize] >= floor)
                .count()
                .max(1);
        }
        for &t in &order[keep..] {
            probs[t as usize] = 0.0;
        }
        let sum: f32 = order[..keep].iter().map(|&t| probs[t as usize]).sum();
        order[..keep].iter().for_each(|&t| probs[t as usize] /= sum);
    }

    /// Choose the next token from a row of logits. `logits`: [vocab].
    pub fn sample(&self, logits: &[f32], rng: &mut impl Rng) -> TokenId {
        if self.is_greedy() {
            return argmax(logits);
        }
        sample_from(&self.probs(logits), rng)
    }
}

/// Index of the largest value; the lowest index wins a tie (as llama.cpp and PyTorch do).
pub fn argmax(xs: &[f32]) -> TokenId {
    let mut best = 0usize;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as TokenId
}

/// Draw an index from a distribution (need not sum exactly to 1). `probs`: [vocab].
pub fn sample_from(probs: &[f32], rng: &mut impl Rng) -> TokenId {
    let total: f64 = probs.iter().map(|&p| p as f64).sum();
    let mut u = rng.random::<f64>() * total;
    let mut last_nonzero = 0usize;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            last_nonzero = i;
            u -= p as f64;
            if u < 0.0 {
                return i as TokenId;
            }
        }
    }
    // Float rounding can leave u a hair above zero: the last token with mass takes it.
    last_nonzero as TokenId
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn params(t: f32, k: usize, p: f32, m: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            top_k: k,
            top_p: p,
            min_p: m,
        }
    }

    #[test]
    fn greedy_is_a_point_mass_on_the_argmax() {
        let p = SamplingParams::greedy().probs(&[0.1, 3.0, 2.9]);
        assert_eq!(p, vec![0.0, 1.0, 0.0]);
        assert_eq!(argmax(&[1.0, 5.0, 5.0]), 1, "ties go to the lowest id");
    }

    #[test]
    fn a_vanishing_temperature_is_greedy_never_nan() {
        for t in [1e-39f32, f32::MIN_POSITIVE, 1e-6] {
            let p = params(t, 0, 1.0, 0.0).probs(&[0.1, 3.0, 2.9]);
            assert_eq!(p, vec![0.0, 1.0, 0.0], "T = {t:e}");
        }
        let p = params(1e-4, 0, 1.0, 0.0).probs(&[0.1, 3.0, 2.9]);
        assert!(p.iter().all(|x| x.is_finite()) && p[1] > 0.999, "{p:?}");
    }

    #[test]
    fn temperature_softmax_sums_to_one() {
        let p = params(0.5, 0, 1.0, 0.0).probs(&[1.0, 2.0, 3.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let e = [(-4.0f32).exp(), (-2.0f32).exp(), 1.0];
        let z: f32 = e.iter().sum();
        for (a, b) in p.iter().zip(e.iter().map(|x| x / z)) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn filters_keep_the_expected_sets() {
        let logits = [2.0f32.ln(), 4.0f32.ln(), 3.0f32.ln(), 1.0f32.ln()]; // probs .2 .4 .3 .1
        let k2 = params(1.0, 2, 1.0, 0.0).probs(&logits);
        assert_eq!(k2.iter().filter(|&&p| p > 0.0).count(), 2);
        assert!((k2[1] - 4.0 / 7.0).abs() < 1e-6);
        let p = params(1.0, 0, 0.65, 0.0).probs(&logits); // .4 + .3 reaches .65
        assert!(p[0] == 0.0 && p[3] == 0.0 && p[1] > 0.0 && p[2] > 0.0);
        let m = params(1.0, 0, 1.0, 0.6).probs(&logits); // floor .24 keeps .4 and .3
        assert!(m[0] == 0.0 && m[3] == 0.0 && (m[1] - 4.0 / 7.0).abs() < 1e-6);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_probs() {
        let sp = params(1.0, 0, 1.0, 0.0);
        let logits = [0.0, 1.0f32.ln(), 3.0f32.ln()]; // probs 1/5 1/5 3/5
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..5000)
                .map(|_| sp.sample(&logits, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        let share = draw(7).iter().filter(|&&t| t == 2).count() as f32 / 5000.0;
        assert!((share - 0.6).abs() < 0.03, "share of token 2 was {share}");
    }

    #[test]
    fn invalid_params_are_refused() {
        assert!(params(-1.0, 0, 1.0, 0.0).validate().is_err());
        assert!(params(f32::NAN, 0, 1.0, 0.0).validate().is_err());
        assert!(params(1.0, 0, 0.0, 0.0).validate().is_err());
        assert!(params(1.0, 0, 1.0, 1.5).validate().is_err());
        assert!(params(0.7, 40, 0.9, 0.05).validate().is_ok());
    }
}
