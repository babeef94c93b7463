//! Step time against batch tokens, measured from the engine's own steps: what the cost
//! model ([`crate::cost`]) fits t0 and t1 on.

/// Step time as a function of batch tokens, fitted from the engine's own steps.
///
/// One curve per power-of-two count of sequences in the step (1, 2–3, 4–7, …, 32+): eight
/// tokens from eight sequences (eight caches to attend over, eight samplings) cost more than
/// eight rows of one, and with one curve a 16-way load's tail steps raised an idle
/// sequence's row price from 0.10 to 0.30 of a pass. Idle chat then went plain, saw no
/// multi-row step again to correct it, and stayed plain.
#[derive(Debug, Clone)]
pub struct StepCosts {
    curves: Vec<Vec<Bucket>>,
}

/// One power-of-two bucket of batch tokens: steps seen, and the (tokens, seconds) its steps
/// settled on (the fastest of its first few, then an EMA toward recent steps).
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    seen: u32,
    tokens: f64,
    secs: f64,
}

const BUCKETS: usize = 12; // 1 … 2048 tokens
const CURVES: usize = 6; // 1 … 32+ sequences
const EMA: f64 = 0.1;
/// Counted steps whose fastest a bucket keeps before the EMA takes over.
const SEED: u32 = 4;
/// Most a step may differ from its bucket's mean, as a share of it, when it updates the EMA.
const CLIP: f64 = 0.25;

/// The power-of-two bucket of a step of `tokens` (> 0) batch tokens.
fn bucket_of(tokens: usize) -> usize {
    log2(tokens).min(BUCKETS - 1)
}

/// The curve of steps over `sequences` sequences.
fn curve_of(sequences: usize) -> usize {
    log2(sequences).min(CURVES - 1)
}

fn log2(n: usize) -> usize {
    (usize::BITS - n.max(1).leading_zeros() - 1) as usize
}

impl Default for StepCosts {
    fn default() -> Self {
        Self {
            curves: vec![vec![Bucket::default(); BUCKETS]; CURVES],
        }
    }
}

impl StepCosts {
    /// Record one step of `tokens` batch tokens from `sequences` sequences that took `secs`.
    ///
    /// The fit prices verify rows, and what it prices decides which step sizes occur next: a
    /// row priced at 0 makes every round draft k, and the smaller sizes are not seen again
    /// to correct it. Two things put a server there, so both are damped:
    /// - a size's first pass pays one-time costs (buffers growing, pages touched): it is left
    ///   out;
    /// - a step stalled by another thread (28 and 42 ms among 9 ms steps) moved its
    ///   bucket's mean by a third. The first few steps of a bucket keep their fastest (a
    ///   stall only adds time); past them, a step moves the mean by at most `EMA · CLIP` of
    ///   it.
    ///
    /// The engine also seeds the buckets from a measurement of its own at start
    /// ([`StepCosts::seed`]), so they begin clean and one never seen again stays sane.
    pub fn observe(&mut self, sequences: usize, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs <= 0.0 {
            return;
        }
        let bucket = &mut self.curves[curve_of(sequences)][bucket_of(tokens)];
        bucket.seen = bucket.seen.saturating_add(1);
        let Some(counted) = bucket.seen.checked_sub(1).filter(|&n| n > 0) else {
            return;
        };
        if counted <= SEED {
            if counted == 1 || secs < bucket.secs {
                (bucket.tokens, bucket.secs) = (tokens as f64, secs);
            }
            return;
        }
        let step = (secs - bucket.secs).clamp(-CLIP * bucket.secs, CLIP * bucket.secs);
        bucket.tokens += EMA * (tokens as f64 - bucket.tokens);
        bucket.secs += EMA * step;
    }

    /// Set the bucket of `tokens` on the curve of `sequences` to a measured step time, as if
    /// it had been seen long enough for the EMA: later steps move it only gradually.
    pub fn seed(&mut self, sequences: usize, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs <= 0.0 {
            return;
        }
        self.curves[curve_of(sequences)][bucket_of(tokens)] = Bucket {
            seen: SEED + 2,
            tokens: tokens as f64,
            secs,
        };
    }

    /// (t0, t1) by least squares over every curve's buckets seen; `None` until two sizes
    /// were seen.
    pub fn fit(&self) -> Option<(f64, f64)> {
        fit_line(self.curves.iter().flatten(), 0.0, f64::INFINITY)
    }

    /// The line through the step sizes `sequences` sequences' rounds produce (plain steps of
    /// n tokens up to rounds of n·9), on their own curve where it has two such sizes, else
    /// on every curve's, else [`StepCosts::fit`]. A CPU step's time is not one
    /// line: flat while the weights' reads dominate, then steeper where arithmetic does. Fit
    /// over everything a server ran (prompt-sized batches of busy periods included), one
    /// sequence's rows were priced at 0.32 of a pass where they cost 0.13, and suffix drafts
    /// stopped at half the length they pay at.
    pub fn fit_for(&self, sequences: usize) -> Option<(f64, f64)> {
        let n = sequences.max(1) as f64;
        let (lo, hi) = (n / 2.0, 16.0 * n);
        fit_line(self.curves[curve_of(sequences)].iter(), lo, hi)
            .or_else(|| fit_line(self.curves.iter().flatten(), lo, hi))
            .or_else(|| self.fit())
    }
}

/// (t0, t1) by least squares over the buckets seen twice whose tokens lie in `lo..=hi`.
fn fit_line<'a>(buckets: impl Iterator<Item = &'a Bucket>, lo: f64, hi: f64) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64)> = buckets
        .filter(|b| b.seen >= 2 && (lo..=hi).contains(&b.tokens))
        .map(|b| (b.tokens, b.secs))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let t1 = (sxy / sxx).max(0.0);
    let t0 = (my - t1 * mx).max(1e-6);
    Some((t0, t1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::LoadView;

    #[test]
    fn the_fit_recovers_a_linear_step_cost() {
        let mut s = StepCosts::default();
        assert_eq!(s.fit(), None);
        for tokens in [1usize, 2, 4, 8, 16, 64, 300] {
            for _ in 0..50 {
                s.observe(1, tokens, 0.02 + 0.003 * tokens as f64);
            }
        }
        let (t0, t1) = s.fit().unwrap();
        assert!(
            (t0 - 0.02).abs() < 1e-3 && (t1 - 0.003).abs() < 1e-4,
            "{t0} {t1}"
        );
    }

    #[test]
    fn a_sizes_first_slow_step_does_not_bend_the_fit() {
        let mut s = StepCosts::default();
        let step = |n: usize| 0.0066 + 0.0015 * n as f64;
        // Each size's first pass is five times slow (buffers growing), then steps are steady.
        for n in [2usize, 4, 1] {
            s.observe(1, n, 5.0 * step(n));
        }
        assert_eq!(s.fit(), None, "first steps alone fit nothing");
        for _ in 0..3 {
            for n in [1usize, 2, 4] {
                s.observe(1, n, step(n));
            }
        }
        let (t0, t1) = s.fit().unwrap();
        assert!(
            (t0 - 0.0066).abs() < 1e-6 && (t1 - 0.0015).abs() < 1e-6,
            "{t0} {t1}"
        );
        let row = LoadView {
            sequences: 1,
            step: Some((t0, t1)),
        }
        .row_cost();
        assert!((row - 0.0015 / 0.0081).abs() < 1e-4, "{row}");
        // Stalls (another thread held the cores) among steady 1-row steps barely move it,
        // nor does one among a bucket's first steps.
        s.observe(1, 8, step(8));
        s.observe(1, 8, 5.0 * step(8));
        s.observe(1, 8, step(8));
        for i in 0..40 {
            let stall = if i % 20 == 3 { 5.0 } else { 1.0 };
            s.observe(1, 1, stall * step(1));
            s.observe(1, 4, step(4));
        }
        let (t0, t1) = s.fit().unwrap();
        assert!(
            (t0 - 0.0066).abs() < 2e-4 && (t1 - 0.0015).abs() < 1e-4,
            "{t0} {t1}"
        );
        // Seeded buckets fit at once and move only gradually.
        let mut seeded = StepCosts::default();
        seeded.seed(1, 1, step(1));
        seeded.seed(1, 8, step(8));
        let (t0, t1) = seeded.fit().unwrap();
        assert!((t0 - 0.0066).abs() < 1e-9 && (t1 - 0.0015).abs() < 1e-9);
        seeded.observe(1, 8, 10.0 * step(8));
        let moved = seeded.fit().unwrap().1 / 0.0015 - 1.0;
        assert!(moved > 0.0 && moved < 0.2, "{moved}");
    }

    #[test]
    fn steps_of_many_sequences_do_not_reprice_one_sequences_rows() {
        // One sequence's rows as the engine measured them at start (ms): flat, then rising.
        let mut s = StepCosts::default();
        for (rows, ms) in [(1usize, 3.99), (2, 4.17), (4, 4.61), (8, 6.52)] {
            s.seed(1, rows, ms / 1e3);
        }
        let idle = |s: &StepCosts| {
            LoadView {
                sequences: 1,
                step: s.fit_for(1),
            }
            .row_cost()
        };
        let before = idle(&s);
        assert!((0.05..0.2).contains(&before), "{before}");
        // A 16-way load's tail: plain steps of 2 to 15 sequences, each token its own sequence
        // with its own cache, dearer than rows of one sequence.
        for _ in 0..200 {
            for n in [2usize, 3, 5, 8, 12, 15] {
                s.observe(n, n, (3.99 + 0.9 * n as f64) / 1e3);
            }
        }
        let after = idle(&s);
        assert!((after - before).abs() < 1e-9, "{before} -> {after}");
        // Those sequences are priced on their own steps.
        let busy = LoadView {
            sequences: 8,
            step: s.fit_for(8),
        };
        assert!(busy.row_cost() > 2.0 * before, "{}", busy.row_cost());
    }

    #[test]
    fn rows_are_priced_by_the_step_sizes_of_the_load() {
        // Nearly flat while weights' reads dominate, then 0.5 ms per token (about the default
        // model on 2 cores): small rounds' rows cost far less than the line through big
        // batches says.
        let step = |b: usize| (0.0027 + 0.0002 * (b as f64 - 1.0)).max(0.0005 * b as f64);
        let mut s = StepCosts::default();
        for b in [1usize, 2, 4, 8, 16, 32, 64, 128, 256] {
            s.seed(1, b, step(b));
        }
        let row = |fit: Option<(f64, f64)>, n: usize| {
            LoadView {
                sequences: n,
                step: fit,
            }
            .row_cost()
        };
        let (local, global) = (row(s.fit_for(1), 1), row(s.fit(), 1));
        assert!((0.10..0.16).contains(&local), "one sequence: {local}");
        assert!(global > 2.0 * local, "the global line: {global}");
        // Sixteen sequences: their rounds sit on the steep part, where a row costs most of a
        // sequence's share of the step.
        let busy = row(s.fit_for(16), 16);
        assert!(busy > 0.8, "sixteen sequences: {busy}");
        // With only other sizes seen, the global line stands in.
        let mut far = StepCosts::default();
        far.seed(1, 256, step(256));
        far.seed(1, 1024, step(1024));
        assert_eq!(far.fit_for(1), far.fit());
    }
}
