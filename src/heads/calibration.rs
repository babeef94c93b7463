//! Calibrating Medusa heads on held-out data: a temperature and a coverage per head.
//!
//! A candidate tree keeps the nodes whose paths are likeliest to be accepted, and it estimates
//! that chance as the product of the heads' probabilities along the path. The product is only
//! as good as each head's calibration: a head more confident than it is right (the deeper
//! ones, trained to fit their data) pushes the tree deep where a wider first level would
//! accept more. Temperature scaling fixes that with one number per head: the T minimising the
//! held-out negative log-likelihood of softmax(logits / T). It never changes a head's ranking,
//! so chains and exactness are untouched. The softmax covers only the draft vocabulary, so the
//! temperature is fitted on the labels inside it, and each head also records the share of
//! labels that are (its coverage): a node's chance is the calibrated probability times that.

use crate::heads::training::{FrozenHead, HeadsData, TrainError, Trainer};

/// The temperatures searched: wide enough for any head worth drafting with.
pub const T_RANGE: (f32, f32) = (0.2, 5.0);

/// Mean negative log-likelihood of `labels` under softmax(row / t), over the rows of `rows`
/// ([n, vocab]) whose label lies inside the vocabulary (NaN when none does).
pub fn nll_at(rows: &[f32], vocab: usize, labels: &[u32], t: f32) -> f64 {
    let inv_t = 1.0 / f64::from(t);
    let (mut sum, mut count) = (0.0f64, 0usize);
    for (row, &label) in rows.chunks_exact(vocab).zip(labels) {
        let Some(&y) = row.get(label as usize) else {
            continue;
        };
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let z: f64 = row
            .iter()
            .map(|&x| ((f64::from(x - max)) * inv_t).exp())
            .sum();
        sum += z.ln() - f64::from(y - max) * inv_t;
        count += 1;
    }
    sum / count as f64
}

/// The temperature in `T_RANGE` minimising `nll_at`: a golden-section search over 1/T, in
/// which the NLL is convex (a log-sum-exp of linear functions minus a linear one).
pub fn fit_temperature(rows: &[f32], vocab: usize, labels: &[u32]) -> f32 {
    if nll_at(rows, vocab, labels, 1.0).is_nan() {
        return 1.0; // no label to fit on
    }
    let f = |beta: f64| nll_at(rows, vocab, labels, (1.0 / beta) as f32);
    let (mut lo, mut hi) = (1.0 / f64::from(T_RANGE.1), 1.0 / f64::from(T_RANGE.0));
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (hi - g * (hi - lo), lo + g * (hi - lo));
    let (mut fa, mut fb) = (f(a), f(b));
    while hi - lo > 1e-3 {
        if fa < fb {
            hi = b;
            (b, fb) = (a, fa);
            a = hi - g * (hi - lo);
            fa = f(a);
        } else {
            lo = a;
            (a, fa) = (b, fb);
            b = lo + g * (hi - lo);
            fb = f(b);
        }
    }
    (2.0 / (lo + hi)) as f32
}

/// The share of `labels` inside a vocabulary of `vocab` ids (1 when there are none: nothing
/// says a label would miss).
pub fn coverage(labels: &[u32], vocab: usize) -> f32 {
    if labels.is_empty() {
        return 1.0;
    }
    let inside = labels.iter().filter(|&&y| (y as usize) < vocab).count();
    inside as f32 / labels.len() as f32
}

/// Per head: the fitted temperature, the held-out NLL at T = 1 and at it, and the share of
/// labels inside the draft vocabulary (the NLL is over those).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Calibration {
    pub pairs: usize,
    pub temperatures: Vec<f32>,
    pub coverage: Vec<f32>,
    pub nll_before: Vec<f64>,
    pub nll_after: Vec<f64>,
}

/// Fit each head's temperature and measure its coverage on up to `max_pairs` of `data`'s
/// pairs (evenly spaced), with logits over the draft vocabulary as the drafter computes them.
pub fn calibrate(
    trainer: &Trainer,
    data: &HeadsData,
    frozen: &FrozenHead,
    max_pairs: usize,
) -> Result<Calibration, TrainError> {
    let heads = data.heads;
    let stride = data.len().div_ceil(max_pairs.max(1)).max(1);
    let idx: Vec<usize> = (0..data.len()).step_by(stride).collect();
    let vocab = frozen.draft_vocab();
    let mut rows = vec![Vec::with_capacity(idx.len() * vocab); heads];
    let mut labels = vec![Vec::with_capacity(idx.len()); heads];
    for chunk in idx.chunks(128) {
        let batch = data.rows(chunk, frozen)?;
        for (i, l) in trainer.logits(&batch, &frozen.lm)?.iter().enumerate() {
            rows[i].extend(l.flatten_all()?.to_vec1::<f32>()?);
            labels[i].extend(
                chunk
                    .iter()
                    .map(|&j| frozen.column(data.labels[j * heads + i])),
            );
        }
    }
    let mut out = Calibration {
        pairs: idx.len(),
        temperatures: Vec::new(),
        coverage: Vec::new(),
        nll_before: Vec::new(),
        nll_after: Vec::new(),
    };
    for (r, y) in rows.iter().zip(&labels) {
        let t = fit_temperature(r, vocab, y);
        out.temperatures.push(t);
        out.coverage.push(coverage(y, vocab));
        out.nll_before.push(nll_at(r, vocab, y, 1.0));
        out.nll_after.push(nll_at(r, vocab, y, t));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Rows whose labels are drawn from softmax(row / t_true): the fit must find t_true.
    fn sampled(t_true: f32, n: usize, vocab: usize) -> (Vec<f32>, Vec<u32>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut rows = Vec::with_capacity(n * vocab);
        let mut labels = Vec::with_capacity(n);
        for _ in 0..n {
            let row: Vec<f32> = (0..vocab).map(|_| rng.random_range(-4.0..4.0)).collect();
            let w: Vec<f64> = row.iter().map(|&x| f64::from(x / t_true).exp()).collect();
            let mut u = rng.random::<f64>() * w.iter().sum::<f64>();
            let label = w.iter().position(|&p| {
                u -= p;
                u <= 0.0
            });
            labels.push(label.unwrap_or(vocab - 1) as u32);
            rows.extend(row);
        }
        (rows, labels)
    }

    #[test]
    fn the_fit_recovers_the_temperature_the_labels_were_drawn_at() {
        for t_true in [0.5f32, 1.0, 2.0] {
            let (rows, labels) = sampled(t_true, 4000, 16);
            let t = fit_temperature(&rows, 16, &labels);
            assert!(
                (t / t_true - 1.0).abs() < 0.1,
                "drawn at {t_true}, fitted {t}"
            );
            assert!(nll_at(&rows, 16, &labels, t) <= nll_at(&rows, 16, &labels, 1.0) + 1e-9);
        }
    }

    #[test]
    fn labels_outside_the_vocabulary_are_left_out() {
        let rows = [0.0f32, 2.0, 0.0, 2.0];
        let nll = nll_at(&rows, 2, &[1, 7], 1.0);
        let want = (1.0 + (-2.0f64).exp()).ln();
        assert!((nll - want).abs() < 1e-9, "{nll} vs {want}");
        assert!(nll_at(&rows, 2, &[9, 9], 1.0).is_nan());
        assert_eq!(coverage(&[1, 7, 0, 9], 2), 0.5);
        assert_eq!(coverage(&[], 2), 1.0);
    }
}
