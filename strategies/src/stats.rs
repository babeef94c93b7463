//! Per-request speculative statistics, fed after every round.

use std::time::Duration;

/// Draft positions the target judged in a round: the accepted ones, plus the first
/// rejection if there was one (verification stops there).
pub fn judged_positions(drafted: usize, accepted: usize) -> usize {
    accepted + usize::from(accepted < drafted)
}

/// Totals over the rounds of one sequence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecStats {
    /// Verification rounds (target passes after the prompt).
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
    /// Draft positions the target actually judged: a round stops at its first rejection.
    pub verified: u64,
    /// accepted_per_pos[i]: rounds whose draft position i was accepted.
    pub accepted_per_pos: Vec<u64>,
    /// Tokens committed by rounds (accepted + recovered/bonus).
    pub committed: u64,
    pub draft_time: Duration,
    pub verify_time: Duration,
    /// Rounds whose drafter failed and ran as plain decoding.
    pub drafter_failures: u64,
    /// Draft tokens an output grammar forced (drafted without the drafter; counted in
    /// `drafted` too).
    pub forced: u64,
}

impl SpecStats {
    pub fn record_round(
        &mut self,
        drafted: usize,
        accepted: usize,
        draft: Duration,
        verify: Duration,
    ) {
        self.rounds += 1;
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
        self.verified += judged_positions(drafted, accepted) as u64;
        if self.accepted_per_pos.len() < accepted {
            self.accepted_per_pos.resize(accepted, 0);
        }
        self.accepted_per_pos[..accepted]
            .iter_mut()
            .for_each(|c| *c += 1);
        self.committed += accepted as u64 + 1;
        self.draft_time += draft;
        self.verify_time += verify;
    }

    /// The sequence ended inside the last round (EOS, a stop string, max_tokens), recorded
    /// as `drafted` and `accepted`: only its first `used` committed tokens (at most
    /// `accepted`: all drafts) were output, an end-of-sequence token that ended it included.
    /// Positions past the end leave every count: they were neither accepted nor rejected
    /// for the output, so usage never reports more accepted tokens than the output holds
    /// and a drafter that is always right keeps an acceptance rate of 1.
    pub fn trim_last_round(&mut self, drafted: usize, accepted: usize, used: usize) {
        let used = used.min(accepted);
        self.drafted -= (drafted - used) as u64;
        self.accepted -= (accepted - used) as u64;
        self.verified -= (judged_positions(drafted, accepted) - used) as u64;
        self.committed -= (accepted + 1 - used) as u64;
        self.accepted_per_pos[used..accepted]
            .iter_mut()
            .for_each(|c| *c -= 1);
    }

    /// Accepted / drafted tokens (the rate vLLM and llama.cpp report).
    pub fn acceptance_rate(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }

    /// α: the probability that a judged draft position is accepted, the α of
    /// E[tokens per pass] = (1 − α^(k+1)) / (1 − α).
    pub fn alpha(&self) -> f64 {
        ratio(self.accepted, self.verified)
    }

    /// Committed tokens per verification round.
    pub fn tokens_per_pass(&self) -> f64 {
        ratio(self.committed, self.rounds)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Expected tokens per target pass with k drafts at per-position acceptance α.
pub fn expected_tokens_per_pass(alpha: f64, k: usize) -> f64 {
    if (1.0 - alpha).abs() < 1e-12 {
        return (k + 1) as f64;
    }
    (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
}

/// Predicted speed-up over plain decoding with draft cost c (one draft step relative to a
/// target pass): (1 − α^(k+1)) / ((1 − α)(k·c + 1)).
pub fn predicted_speedup(alpha: f64, k: usize, c: f64) -> f64 {
    expected_tokens_per_pass(alpha, k) / (k as f64 * c + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_add_up() {
        let mut s = SpecStats::default();
        let ms = Duration::from_millis(1);
        s.record_round(4, 2, ms, ms); // rejected at position 2
        s.record_round(4, 4, ms, ms); // all accepted, bonus
        s.record_round(0, 0, ms, ms); // plain step
        assert_eq!(
            (s.drafted, s.accepted, s.verified, s.committed),
            (8, 6, 7, 9)
        );
        assert_eq!(s.accepted_per_pos, vec![2, 2, 1, 1]);
        assert_eq!(s.tokens_per_pass(), 3.0);
        assert!((s.alpha() - 6.0 / 7.0).abs() < 1e-12);
        assert_eq!(s.acceptance_rate(), 0.75);
    }

    #[test]
    fn a_round_cut_short_by_the_end_counts_only_what_was_output() {
        let ms = Duration::from_millis(1);
        // (drafted, accepted, output) of a round after one of 4 drafts with 2 accepted →
        // (drafted, accepted, judged, committed) in all, and the acceptance per position.
        let cases = [
            // All 4 accepted, the end at the second.
            ((4, 4, 2), (6, 4, 5, 5), vec![2, 2, 0, 0]),
            // 6 drafted, the third rejected, the end at the first.
            ((6, 2, 1), (5, 3, 4, 4), vec![2, 1]),
            // The end at the last accepted draft: only the round's correction is dropped.
            ((3, 2, 2), (6, 4, 5, 5), vec![2, 2]),
        ];
        for ((drafted, accepted, used), totals, per_pos) in cases {
            let mut s = SpecStats::default();
            s.record_round(4, 2, ms, ms);
            s.record_round(drafted, accepted, ms, ms);
            s.trim_last_round(drafted, accepted, used);
            let got = (s.drafted, s.accepted, s.verified, s.committed);
            assert_eq!(got, totals, "{drafted}/{accepted} ending at {used}");
            assert_eq!(
                s.accepted_per_pos, per_pos,
                "{drafted}/{accepted} at {used}"
            );
        }
    }

    #[test]
    fn formula() {
        assert!((expected_tokens_per_pass(0.5, 1) - 1.5).abs() < 1e-12);
        assert_eq!(expected_tokens_per_pass(1.0, 4), 5.0);
        assert!((predicted_speedup(0.8, 4, 0.0) - 3.3616).abs() < 1e-9);
        assert_eq!(expected_tokens_per_pass(0.0, 8), 1.0);
    }
}
