//! The engine's own measurement of what a step costs by its size, taken at start.
//!
//! The policy's cost model and the drafts' verify-row price come from a fit of step time
//! against batch tokens. Fitted from traffic alone it starts from a few noisy steps, and the
//! price decides which step sizes happen next: a bad start can stick (a row priced at 0
//! drafts k every round, and smaller steps are never timed again). So before serving, the
//! engine times forwards of a few sizes on a scratch sequence, interleaved so the machine's
//! drift falls on every size alike, and seeds the fit with each size's fastest time: other
//! work on the cores only ever adds time (with medians of 5, one start in four timed 2 rows
//! at 17.6 ms against 10-12 in the others). Timings in which a larger step ran faster than a
//! smaller one are taken again, up to three times. Until it is done the server is not ready
//! (`/ready` answers 503 "warming up"; requests sent anyway wait in the queue).

use std::time::{Duration, Instant};

use specgate_policies::StepCosts;

use crate::model::{LogitRows, ModelError, TargetBackend};
use crate::TokenId;

/// Rows per timed forward: a decode step and verify passes of 1, 3 and 7 drafts.
pub const SIZES: [usize; 4] = [1, 2, 4, 8];
/// Tokens already cached when timing (a short chat turn).
const CONTEXT: usize = 64;
const ROUNDS: usize = 6;
/// Timings taken before the last is kept as it is, however it looks.
const ATTEMPTS: usize = 3;

/// [`measure`], again after a pause while the times are not credible (see [`credible`]);
/// also how many timings it took. Two servers starting at once on 2 cores timed 1 row at
/// 7.98 ms and 8 rows at 7.57: each had the cores part of the time.
pub fn measure_settled(
    model: &mut dyn TargetBackend,
) -> Result<(Vec<(usize, f64)>, usize), ModelError> {
    let mut attempt = 1;
    loop {
        let measured = measure(model)?;
        if credible(&measured) || attempt == ATTEMPTS {
            return Ok((measured, attempt));
        }
        // A random pause, so two servers timing at once fall apart.
        let pause = 200 + rand::random::<u64>() % 400;
        std::thread::sleep(Duration::from_millis(pause * attempt as u64));
        attempt += 1;
    }
}

/// Step times that do not fall (beyond 5% noise) as the step's rows grow: a larger step
/// timed faster than a smaller one means other work had the cores meanwhile. A device whose
/// rows are nearly free (a GPU's decode) times every size alike, which passes.
pub fn credible(measured: &[(usize, f64)]) -> bool {
    measured.windows(2).all(|w| w[1].1 >= 0.95 * w[0].1)
}

/// The fastest of `ROUNDS` forwards of each of `SIZES` rows after `CONTEXT` cached tokens,
/// in seconds, with logits for every row as a verify pass has them. The scratch sequence is
/// released.
pub fn measure(model: &mut dyn TargetBackend) -> Result<Vec<(usize, f64)>, ModelError> {
    let vocab = model.config().vocab_size.max(1);
    let max = SIZES.iter().copied().max().unwrap_or(1);
    // A model with a short window is timed after fewer cached tokens.
    let context = CONTEXT.min(model.config().context_length.saturating_sub(max));
    // Any ids do: the cost of a forward does not depend on which tokens it reads.
    let tokens: Vec<TokenId> = (0..context + max)
        .map(|i| ((i * 7919) % vocab) as TokenId)
        .collect();
    let seq = model.new_sequence();
    let timed = time_sizes(model, seq, &tokens, context);
    model.release(seq);
    timed
}

fn time_sizes(
    model: &mut dyn TargetBackend,
    seq: crate::model::SeqId,
    tokens: &[TokenId],
    context: usize,
) -> Result<Vec<(usize, f64)>, ModelError> {
    if context > 0 {
        model.forward_one(seq, &tokens[..context], LogitRows::None)?;
    }
    let mut times = vec![Vec::with_capacity(ROUNDS); SIZES.len()];
    // One untimed round first: each size's first pass grows buffers.
    for round in 0..=ROUNDS {
        for (i, &n) in SIZES.iter().enumerate() {
            let t = Instant::now();
            model.forward_one(seq, &tokens[context..context + n], LogitRows::All)?;
            let secs = t.elapsed().as_secs_f64();
            model.truncate(seq, context)?;
            if round > 0 {
                times[i].push(secs);
            }
        }
    }
    Ok(SIZES
        .iter()
        .zip(times)
        .map(|(&n, t)| (n, t.into_iter().fold(f64::INFINITY, f64::min)))
        .collect())
}

/// Step costs seeded from `measured`.
pub fn seeded(measured: &[(usize, f64)]) -> StepCosts {
    let mut costs = StepCosts::default();
    for &(n, secs) in measured {
        costs.seed(1, n, secs);
    }
    costs
}

/// (t0, t1): a step's fixed cost and its cost per row, by least squares over the measured
/// step sizes (seconds). None with fewer than two sizes.
pub fn row_line(measured: &[(usize, f64)]) -> Option<(f64, f64)> {
    if measured.len() < 2 {
        return None;
    }
    let n = measured.len() as f64;
    let mx = measured.iter().map(|m| m.0 as f64).sum::<f64>() / n;
    let my = measured.iter().map(|m| m.1).sum::<f64>() / n;
    let sxx: f64 = measured.iter().map(|m| (m.0 as f64 - mx).powi(2)).sum();
    let sxy: f64 = measured
        .iter()
        .map(|m| (m.0 as f64 - mx) * (m.1 - my))
        .sum();
    if sxx <= 0.0 {
        return None;
    }
    let t1 = (sxy / sxx).max(0.0);
    Some(((my - t1 * mx).max(1e-6), t1))
}

#[cfg(test)]
mod row_line_tests {
    #[test]
    fn a_line_through_the_measured_steps() {
        let (t0, t1) = super::row_line(&[(1, 0.006), (2, 0.007), (4, 0.009)]).expect("a line");
        assert!(
            (t0 - 0.005).abs() < 1e-9 && (t1 - 0.001).abs() < 1e-9,
            "{t0} {t1}"
        );
        assert_eq!(super::row_line(&[(1, 0.006)]), None);
    }

    #[test]
    fn timings_that_fall_with_more_rows_are_not_credible() {
        let alone = [(1, 3.19e-3), (2, 3.50e-3), (4, 4.24e-3), (8, 6.03e-3)];
        let flat_gpu = [(1, 1.00e-3), (2, 0.98e-3), (4, 1.01e-3), (8, 1.02e-3)];
        let shared_cores = [(1, 7.98e-3), (2, 9.59e-3), (4, 9.25e-3), (8, 7.57e-3)];
        assert!(super::credible(&alone));
        assert!(super::credible(&flat_gpu));
        assert!(!super::credible(&shared_cores));
    }
}
