//! What speculation gave a route: its decoding speed against plain decoding measured on the
//! same route, with an interval. Decoding speed is tokens after the first (the first comes from
//! the prompt's pass) per engine second spent on the request's rounds (its drafting and the
//! verify passes it rode in, each pass's whole time, so a busy batch slows both sides alike).
//!
//! Plain decoding is measured two ways, pooled: the route's requests served plainly (the
//! learner's plain choices and explorations, or a client's `strategy: plain`), and shadow
//! checks, which decode a speculative request's prompt again plainly. Each history record (a
//! strategy × k × bucket) is one sample of a ratio estimator; the two rates' relative variances
//! add on the log scale, and the interval takes Student's t at the smaller side's samples − 1
//! (a few minutes of traffic give only a few samples, where 1.96 would promise too much).

use serde::Serialize;
use specgate_strategies::StrategyKind;

use super::{HistoryKey, HistoryRecord};

/// Student's t for a two-sided 95% interval by degrees of freedom (a df between two rows
/// takes the lower row's, the wider interval); 1.96 past the last.
const T95: [(usize, f64); 15] = [
    (1, 12.706),
    (2, 4.303),
    (3, 3.182),
    (4, 2.776),
    (5, 2.571),
    (6, 2.447),
    (7, 2.365),
    (8, 2.306),
    (9, 2.262),
    (10, 2.228),
    (12, 2.179),
    (15, 2.131),
    (20, 2.086),
    (30, 2.042),
    (60, 2.000),
];

/// Samples each side needs for an interval: with two, t is 12.7 and the interval spans two
/// orders of magnitude, which reads as a fault rather than as doubt.
const MIN_SAMPLES: usize = 3;

fn t95(df: usize) -> f64 {
    if df > 120 {
        return 1.96;
    }
    T95.iter()
        .rev()
        .find(|(d, _)| *d <= df)
        .map_or(T95[0].1, |(_, t)| *t)
}

/// Tokens over seconds, kept per sample so the spread between samples gives an interval.
#[derive(Debug, Clone, Default)]
pub struct Rate {
    samples: Vec<(f64, f64)>,
}

impl Rate {
    /// One sample; an empty one (no tokens or no time) carries nothing and is left out.
    pub fn add(&mut self, tokens: u64, secs: f64) {
        if tokens > 0 && secs > 0.0 {
            self.samples.push((tokens as f64, secs));
        }
    }

    pub fn merge(&mut self, o: &Rate) {
        self.samples.extend_from_slice(&o.samples);
    }

    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    pub fn tokens(&self) -> u64 {
        self.samples.iter().map(|s| s.0).sum::<f64>() as u64
    }

    /// Σ tokens / Σ seconds; None without samples.
    pub fn per_second(&self) -> Option<f64> {
        let secs: f64 = self.samples.iter().map(|s| s.1).sum();
        (secs > 0.0).then(|| self.samples.iter().map(|s| s.0).sum::<f64>() / secs)
    }

    /// The ratio estimator's relative variance, n/(n−1) · Σ(yᵢ − R·xᵢ)² / (Σx)² / R²; None
    /// with fewer than two samples, where the spread is unknown.
    fn relative_variance(&self) -> Option<f64> {
        let n = self.samples.len();
        let r = self.per_second()?;
        if n < 2 {
            return None;
        }
        let secs: f64 = self.samples.iter().map(|s| s.1).sum();
        let spread: f64 = self.samples.iter().map(|&(y, x)| (y - r * x).powi(2)).sum();
        Some(n as f64 / (n as f64 - 1.0) * spread / (secs * secs) / (r * r))
    }
}

/// A route's decoding as served and plain decoding on the same route.
#[derive(Debug, Clone, Default)]
pub struct SpeedEvidence {
    pub served: Rate,
    pub plain: Rate,
    /// Requests served plainly, and shadow checks that measured plain decoding.
    pub plain_requests: u64,
    pub shadow_checks: u64,
    /// Served samples that speculated (not plain): without any, speculation gave nothing to
    /// estimate and the speed-up has no interval.
    pub speculative_samples: u64,
}

impl SpeedEvidence {
    /// What one history record adds: its requests to the served side (plain ones to the plain
    /// side as well), its shadow checks' plain decoding to the plain side.
    pub fn add(&mut self, key: &HistoryKey, r: &HistoryRecord) {
        if r.requests > 0 {
            let tokens = r.tokens_out.saturating_sub(r.requests);
            let secs = r.draft_secs + r.verify_secs;
            self.served.add(tokens, secs);
            if key.strategy == StrategyKind::Plain {
                self.plain.add(tokens, secs);
                self.plain_requests += r.requests;
            } else if tokens > 0 && secs > 0.0 {
                self.speculative_samples += 1;
            }
        }
        if r.shadow_plain_tokens > 0 {
            self.plain.add(r.shadow_plain_tokens, r.shadow_plain_secs);
            self.shadow_checks += r.shadow_checks;
        }
    }

    pub fn merge(&mut self, o: &SpeedEvidence) {
        self.served.merge(&o.served);
        self.plain.merge(&o.plain);
        self.plain_requests += o.plain_requests;
        self.shadow_checks += o.shadow_checks;
        self.speculative_samples += o.speculative_samples;
    }

    pub fn estimate(&self) -> Speedup {
        let served = self.served.per_second();
        let plain = self.plain.per_second();
        let ratio = served.zip(plain).map(|(s, p)| s / p);
        // The relative variances add (delta method on the log). Plain requests sit on both
        // sides, which makes the interval wider than it need be, never narrower.
        let fewest = self.served.samples().min(self.plain.samples());
        let interval = ratio.filter(|_| self.speculative_samples > 0 && fewest >= MIN_SAMPLES);
        let interval = interval.and_then(|x| {
            let v = self.served.relative_variance()? + self.plain.relative_variance()?;
            let half = t95(fewest - 1) * v.sqrt();
            Some((x * (-half).exp(), x * half.exp()))
        });
        Speedup {
            served_tokens_per_second: served,
            plain_tokens_per_second: plain,
            speedup: ratio,
            speedup_low: interval.map(|i| i.0),
            speedup_high: interval.map(|i| i.1),
            plain_requests: self.plain_requests,
            plain_shadow_checks: self.shadow_checks,
            plain_samples: self.plain.samples.len() as u64,
            plain_decode_tokens: self.plain.tokens(),
        }
    }
}

/// The estimate as the analytics API gives it: None where plain decoding was not measured on
/// the route (no speed-up) or a side has a single sample (no interval).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Speedup {
    pub served_tokens_per_second: Option<f64>,
    pub plain_tokens_per_second: Option<f64>,
    pub speedup: Option<f64>,
    pub speedup_low: Option<f64>,
    pub speedup_high: Option<f64>,
    pub plain_requests: u64,
    pub plain_shadow_checks: u64,
    /// History records (strategy × k × bucket) behind the plain rate, and its tokens.
    pub plain_samples: u64,
    pub plain_decode_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use specgate_policies::WorkloadClass;

    fn served(
        strategy: StrategyKind,
        minute: u64,
        tokens: u64,
        secs: f64,
    ) -> (HistoryKey, HistoryRecord) {
        let key = HistoryKey::minute("t", WorkloadClass::Chat, strategy, 4, minute * 60);
        let rec = HistoryRecord {
            requests: 1,
            tokens_out: tokens + 1,
            draft_secs: secs / 4.0,
            verify_secs: secs * 3.0 / 4.0,
            ..Default::default()
        };
        (key, rec)
    }

    #[test]
    fn without_plain_decoding_on_the_route_there_is_no_speedup() {
        let mut e = SpeedEvidence::default();
        for m in 0..3 {
            let (k, r) = served(StrategyKind::Suffix, m, 100, 1.0);
            e.add(&k, &r);
        }
        let s = e.estimate();
        assert_eq!(s.served_tokens_per_second, Some(100.0));
        assert_eq!((s.speedup, s.speedup_low), (None, None));
    }

    #[test]
    fn plain_requests_and_shadow_checks_price_plain_decoding_with_an_interval() {
        let mut e = SpeedEvidence::default();
        for (m, secs) in [(0, 0.9), (1, 1.0), (2, 1.1)] {
            let (k, r) = served(StrategyKind::Suffix, m, 100, secs);
            e.add(&k, &r);
        }
        let (k, r) = served(StrategyKind::Plain, 3, 50, 1.0);
        e.add(&k, &r);
        // A shadow check's record: no request, its plain decode's tokens and seconds.
        let (k, mut shadow) = served(StrategyKind::Suffix, 4, 0, 0.0);
        shadow.requests = 0;
        shadow.shadow_checks = 1;
        shadow.shadow_plain_tokens = 60;
        shadow.shadow_plain_secs = 1.0;
        e.add(&k, &shadow);
        // Two plain samples: a speed-up, but too few for an interval.
        let two = e.estimate();
        assert!(two.speedup.is_some() && two.speedup_low.is_none());
        shadow.shadow_plain_tokens = 50;
        e.add(&k, &shadow);
        let s = e.estimate();
        // Served: 350 tokens in 4 s (the plain request is served traffic too); plain: 160 in 3 s.
        assert!((s.served_tokens_per_second.unwrap() - 87.5).abs() < 1e-9);
        assert!((s.plain_tokens_per_second.unwrap() - 160.0 / 3.0).abs() < 1e-9);
        let x = s.speedup.unwrap();
        assert!((x - 87.5 * 3.0 / 160.0).abs() < 1e-9);
        let (lo, hi) = (s.speedup_low.unwrap(), s.speedup_high.unwrap());
        assert!(lo < x && x < hi, "{lo} < {x} < {hi}");
        assert_eq!(
            (s.plain_requests, s.plain_shadow_checks, s.plain_samples),
            (1, 2, 3)
        );
        // More samples of the same spread narrow the interval.
        let mut more = e.clone();
        more.merge(&e);
        let m = more.estimate();
        assert!(m.speedup_high.unwrap() - m.speedup_low.unwrap() < hi - lo);
    }

    #[test]
    fn a_route_served_only_plainly_reads_one_without_an_interval() {
        let mut e = SpeedEvidence::default();
        for (m, secs) in [(0, 0.9), (1, 1.0), (2, 1.2)] {
            let (k, r) = served(StrategyKind::Plain, m, 100, secs);
            e.add(&k, &r);
        }
        let s = e.estimate();
        assert_eq!((s.speedup, s.speedup_low), (Some(1.0), None));
        assert_eq!(s.plain_requests, 3);
    }

    #[test]
    fn few_samples_widen_the_interval_as_students_t_does() {
        assert_eq!((t95(1), t95(11), t95(200)), (12.706, 2.228, 1.96));
    }

    #[test]
    fn a_single_plain_sample_gives_a_speedup_without_an_interval() {
        let mut e = SpeedEvidence::default();
        for (strategy, m, tokens) in [
            (StrategyKind::Ngram, 0, 90),
            (StrategyKind::Ngram, 1, 110),
            (StrategyKind::Plain, 2, 40),
        ] {
            let (k, r) = served(strategy, m, tokens, 1.0);
            e.add(&k, &r);
        }
        let s = e.estimate();
        assert!((s.speedup.unwrap() - (240.0 / 3.0) / 40.0).abs() < 1e-9);
        assert_eq!((s.speedup_low, s.speedup_high), (None, None));
    }
}
