//! Choosing k within a request from what the request itself measures: α (accepted / judged
//! draft positions, decayed toward recent rounds), the cost of a draft step and the cost of a
//! verify pass over n + 1 rows, both relative to a plain pass. Each round takes the k that
//! maximises expected committed tokens per unit of time,
//!
//!   E(k) = (1 − α^(k+1)) / (1 − α)  /  (k·c + v(k)),
//!
//! with k = 0 (plain, E = 1) always a candidate, so speculation stops where it cannot win. A
//! request that has settled on plain probes k = 2 now and then, so a change in α is still
//! noticed: every `PROBE_EVERY` rounds for a cheap drafter, less often for a dear one, so
//! probes never cost more than about `PROBE_BUDGET` of the request's time. Until a draft step
//! has been timed, k stays at the probe's 2: an unmeasured drafter may cost most of a pass
//! per token (the early-exit draft does), and one k = 8 round of it costs ~6 plain passes.

/// Fewest rounds between probes while plain decoding is the choice.
pub const PROBE_EVERY: usize = 16;
const PROBE_K: usize = 2;
/// The share of a request's time probes of a losing drafter may take, at most.
const PROBE_BUDGET: f64 = 0.02;
/// Most judged positions a drafter's earlier record counts for (about one decayed window).
const SEED_WEIGHT: f64 = 8.0;
/// Per-round decay of the α evidence: about the last ten rounds count.
const DECAY: f64 = 0.9;
/// Smoothing of measured times.
const TIME_EMA: f64 = 0.3;

/// Expected speed-up over plain of k drafts at acceptance α, draft cost c and verify cost v.
pub fn expected_speedup(alpha: f64, k: usize, c: f64, v: f64) -> f64 {
    let tokens = if (1.0 - alpha).abs() < 1e-12 {
        (k + 1) as f64
    } else {
        (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
    };
    tokens / (k as f64 * c + v)
}

/// The per-request k controller.
#[derive(Debug, Clone)]
pub struct AdaptiveK {
    k_max: usize,
    accepted: f64,
    judged: f64,
    /// EMA seconds of a target pass over n + 1 rows, index n.
    pass_secs: Vec<Option<f64>>,
    /// EMA seconds of one draft step.
    draft_secs: Option<f64>,
    rounds_plain: usize,
}

impl AdaptiveK {
    /// `prior_alpha` counts as two judged positions until real rounds outweigh it.
    pub fn new(k_max: usize, prior_alpha: f64) -> Self {
        Self {
            k_max,
            accepted: 2.0 * prior_alpha,
            judged: 2.0,
            pass_secs: vec![None; k_max + 1],
            draft_secs: None,
            rounds_plain: 0,
        }
    }

    /// Start from what the drafter measured before: `alpha` over `judged` positions (capped
    /// so this request's own rounds soon outweigh it) and its draft step's seconds.
    pub fn seed(&mut self, alpha: f64, judged: f64, step_secs: f64) {
        let weight = judged.clamp(0.0, SEED_WEIGHT);
        if weight > 0.0 && alpha.is_finite() {
            self.accepted = alpha.clamp(0.0, 1.0) * weight;
            self.judged = weight;
        }
        if step_secs.is_finite() && step_secs >= 0.0 {
            self.draft_secs = Some(step_secs);
        }
    }

    pub fn alpha(&self) -> f64 {
        self.accepted / self.judged
    }

    /// Verify cost of n drafts relative to a plain pass: measured when both are, else the prior.
    fn verify_cost(&self, n: usize) -> f64 {
        match (self.plain_secs(), self.pass_secs[n]) {
            (Some(plain), Some(pass)) if plain > 0.0 && n > 0 => pass / plain,
            _ => prior_verify_cost(n),
        }
    }

    /// A plain pass's seconds: measured, or inferred from a measured verify pass and the prior.
    fn plain_secs(&self) -> Option<f64> {
        self.pass_secs[0].or_else(|| {
            (1..self.pass_secs.len())
                .find_map(|n| self.pass_secs[n].map(|s| s / prior_verify_cost(n)))
        })
    }

    fn draft_cost(&self) -> f64 {
        match (self.draft_secs, self.plain_secs()) {
            (Some(d), Some(plain)) if plain > 0.0 => d / plain,
            _ => 0.0,
        }
    }

    /// The k for the next round.
    pub fn next_k(&mut self) -> usize {
        let (alpha, c) = (self.alpha(), self.draft_cost());
        let best = (0..=self.k_max)
            .map(|k| {
                (
                    k,
                    if k == 0 {
                        1.0
                    } else {
                        expected_speedup(alpha, k, c, self.verify_cost(k))
                    },
                )
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(k, _)| k);
        if best > 0 {
            return match self.draft_secs {
                Some(_) => best,
                None => best.min(PROBE_K),
            };
        }
        self.rounds_plain += 1;
        if self.rounds_plain >= self.probe_every() {
            self.rounds_plain = 0;
            PROBE_K.min(self.k_max)
        } else {
            0
        }
    }

    /// Rounds between probes: what a probe costs beyond a plain pass, spread so that probes
    /// take at most `PROBE_BUDGET` of the time.
    fn probe_every(&self) -> usize {
        let k = PROBE_K.min(self.k_max);
        let excess = k as f64 * self.draft_cost() + self.verify_cost(k) - 1.0;
        let spread = (excess.max(0.0) / PROBE_BUDGET).ceil();
        PROBE_EVERY.max(spread.min(1e6) as usize)
    }

    /// Feed one round: `drafted` tokens proposed, `accepted` of them kept, and the seconds
    /// spent drafting and in the target pass.
    pub fn observe(&mut self, drafted: usize, accepted: usize, draft_secs: f64, pass_secs: f64) {
        if drafted > 0 {
            let judged = specgate_strategies::judged_positions(drafted, accepted);
            self.accepted = self.accepted * DECAY + accepted as f64;
            self.judged = self.judged * DECAY + judged as f64;
            let per_step = draft_secs / drafted as f64;
            self.draft_secs = Some(ema(self.draft_secs, per_step));
        }
        let n = drafted.min(self.k_max);
        self.pass_secs[n] = Some(ema(self.pass_secs[n], pass_secs));
    }
}

/// Verify cost of n drafts before any is measured: 15% more per row (this CPU engine's curve
/// runs 1.3-1.8x at n = 1).
fn prior_verify_cost(n: usize) -> f64 {
    1.0 + 0.15 * n as f64
}

fn ema(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + TIME_EMA * (new - o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated request: acceptance α per position, plain pass 1.0 s, verify cost
    /// 1 + slope·n, draft step c. Returns (tokens per second, the k chosen most often).
    fn simulate(alpha: f64, slope: f64, c: f64, rounds: usize, seed: u64) -> (f64, usize) {
        let mut ctl = AdaptiveK::new(8, 0.5);
        let mut x = seed;
        let mut uniform = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut tokens, mut secs) = (0.0, 0.0);
        let mut chosen = [0usize; 9];
        for _ in 0..rounds {
            let k = ctl.next_k();
            chosen[k] += 1;
            let accepted = (0..k).take_while(|_| uniform() < alpha).count();
            let (d, v) = (c * k as f64, 1.0 + slope * k as f64);
            ctl.observe(k, accepted, d, v);
            tokens += (accepted + 1) as f64;
            secs += d + v;
        }
        let mode = (0..9).max_by_key(|&k| chosen[k]).unwrap_or(0);
        (tokens / secs, mode)
    }

    /// The best fixed k in hindsight, by the formula.
    fn best_fixed(alpha: f64, slope: f64, c: f64) -> (usize, f64) {
        (0..=8)
            .map(|k| (k, expected_speedup(alpha, k, c, 1.0 + slope * k as f64)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
    }

    #[test]
    fn settles_near_the_best_fixed_k() {
        for (alpha, slope, c) in [
            (0.9, 0.1, 0.0),
            (0.7, 0.25, 0.0),
            (0.8, 0.1, 0.1),
            (0.95, 0.05, 0.02),
        ] {
            let (best_k, best) = best_fixed(alpha, slope, c);
            let (tps, mode) = simulate(alpha, slope, c, 3000, 42);
            assert!(
                tps >= 0.9 * best,
                "α {alpha}: {tps:.3} tok/s vs best fixed k={best_k} {best:.3}"
            );
            assert!(
                mode.abs_diff(best_k) <= 2,
                "α {alpha}: mode k {mode}, best {best_k}"
            );
        }
    }

    #[test]
    fn turns_speculation_off_where_it_cannot_win_and_loses_little() {
        // Creative text on a CPU: α 0.3, each verify row costs 40% of a pass.
        let (tps, mode) = simulate(0.3, 0.4, 0.0, 3000, 7);
        assert_eq!(mode, 0, "plain decoding");
        assert!(tps >= 0.95, "lost more than 5% to probes: {tps:.3}");
    }

    #[test]
    fn a_dear_drafter_that_loses_costs_a_short_request_under_5_percent() {
        // The early-exit draft on creative text: a draft step costs 0.6 of a pass, α ≈ 0.05.
        for seed in [1, 2, 3] {
            let (tps, mode) = simulate(0.05, 0.08, 0.6, 128, seed);
            assert_eq!(mode, 0, "plain decoding");
            assert!(tps >= 0.95, "lost more than 5%: {tps:.3}");
        }
    }

    #[test]
    fn k_stays_at_the_probe_until_a_draft_step_is_timed() {
        // A prior that would take k = 8 at once.
        let mut ctl = AdaptiveK::new(8, 0.95);
        assert_eq!(ctl.next_k(), PROBE_K);
        // A cheap drafter, every draft kept: then the formula's k.
        ctl.observe(2, 2, 0.0, 1.2);
        ctl.observe(0, 0, 0.0, 1.0);
        assert_eq!(ctl.next_k(), 8);
    }

    #[test]
    fn a_drafter_known_to_lose_starts_on_plain() {
        let mut ctl = AdaptiveK::new(8, 0.5);
        ctl.seed(0.02, 100.0, 0.6);
        assert_eq!(ctl.next_k(), 0, "no opening probe");
        // A known good, cheap one starts past the probe's k.
        let mut ctl = AdaptiveK::new(8, 0.5);
        ctl.seed(0.9, 100.0, 0.0);
        assert!(ctl.next_k() > PROBE_K);
    }

    #[test]
    fn notices_when_acceptance_rises() {
        let mut ctl = AdaptiveK::new(8, 0.1);
        for _ in 0..200 {
            let k = ctl.next_k();
            ctl.observe(k, 0, 0.0, 1.0 + 0.1 * k as f64);
        }
        assert_eq!(ctl.next_k(), 0);
        // Drafts now always pass: probes see it and k climbs.
        let mut k = 0;
        for _ in 0..100 {
            k = ctl.next_k();
            ctl.observe(k, k, 0.0, 1.0 + 0.1 * k as f64);
        }
        assert!(k >= 6, "k {k}");
    }
}
