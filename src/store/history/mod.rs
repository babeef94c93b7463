//! Per-route history: what requests of a route measured, aggregated per strategy, k and time
//! bucket (minutes, rolled up into hours past a window). Keys, records, merging and the
//! analytics rows are pure; [`HistoryStore`] is the seam a store implements, and the writer
//! actor and the HTTP handler only move records through it.

use serde::{Deserialize, Serialize};

mod key;
mod rows;
mod speedup;
mod summary;
pub use key::{tenant_prefix, Granularity, HistoryKey};
pub use rows::{route_rows, rows_csv, RouteRow};
pub use speedup::Speedup;
pub use summary::{summary_csv, summary_rows, SummaryRow, ALL_CLASSES};

use super::StoreError;

/// Per-route history buckets. Records are additive: adding a record to a bucket merges it
/// into what is there ([`HistoryRecord::merge`]), so replicas may add to the same bucket.
/// Calls may block on a round trip; the gateway makes them from the history writer's own
/// thread (adds and roll-ups, batched per flush interval) and from the analyst API.
pub trait HistoryStore: Send + Sync {
    /// Merge `records` into their buckets, all or none, durable when the call returns. A
    /// flush whose id the store has already added is skipped: a batch sent again after a
    /// failure — or after a reply that was lost on the way back — counts once.
    fn add(
        &self,
        flush: FlushId,
        records: &[(HistoryKey, HistoryRecord)],
    ) -> Result<(), StoreError>;

    /// A tenant's records (every tenant's when `tenant` is None) whose bucket starts in
    /// `[from, to)`, grouped by route.
    fn read(
        &self,
        tenant: Option<&str>,
        from: u64,
        to: u64,
    ) -> Result<Vec<(HistoryKey, HistoryRecord)>, StoreError>;

    /// Fold every minute bucket that starts before `cutoff` into its hour, each minute's move
    /// atomic (a failure half-way never counts a minute in both places). Returns the minutes
    /// moved.
    fn roll_up(&self, cutoff: u64) -> Result<usize, StoreError>;
}

/// One flush's identity, chosen by the writer and kept with its batch until a store has
/// acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlushId(pub [u8; 16]);

impl FlushId {
    pub fn new() -> Self {
        FlushId(rand::random())
    }
}

impl Default for FlushId {
    fn default() -> Self {
        Self::new()
    }
}

/// Upper bounds of the latency buckets, in milliseconds (the last is open).
pub const LATENCY_BOUNDS_MS: [f64; 19] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0, 300.0, 500.0,
    1000.0, 2000.0, 5000.0, 10000.0,
];

/// A fixed-bucket latency histogram: mergeable, and good enough for p50/p95.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    pub counts: Vec<u64>, // LATENCY_BOUNDS_MS.len() + 1
}

impl LatencyHistogram {
    pub fn record(&mut self, secs: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LATENCY_BOUNDS_MS.len() + 1];
        }
        let ms = secs * 1e3;
        let i = LATENCY_BOUNDS_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(LATENCY_BOUNDS_MS.len());
        self.counts[i] += 1;
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper bound (ms) of the bucket holding quantile `q`; None when empty. The open
    /// bucket reports the last bound.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(LATENCY_BOUNDS_MS[i.min(LATENCY_BOUNDS_MS.len() - 1)]);
            }
        }
        None
    }
}

/// Latency quantiles in milliseconds (the upper bound of the histogram bucket holding each),
/// as every analytics row gives them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latencies {
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    /// Time requests waited for the engine before their first step (fair scheduling).
    pub queue_p50_ms: Option<f64>,
    pub queue_p95_ms: Option<f64>,
}

impl Latencies {
    pub fn of(r: &HistoryRecord) -> Self {
        Latencies {
            ttft_p50_ms: r.ttft.quantile_ms(0.5),
            ttft_p95_ms: r.ttft.quantile_ms(0.95),
            itl_p50_ms: r.itl.quantile_ms(0.5),
            itl_p95_ms: r.itl.quantile_ms(0.95),
            queue_p50_ms: r.queue.quantile_ms(0.5),
            queue_p95_ms: r.queue.quantile_ms(0.95),
        }
    }
}

/// Totals of the requests in one bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryRecord {
    pub requests: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV came from the prefix cache (in `prompt_tokens` too).
    #[serde(default)]
    pub cached_tokens: u64,
    pub tokens_out: u64,
    pub target_passes: u64,
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
    pub judged: u64,
    pub accepted_per_pos: Vec<u64>,
    pub draft_secs: f64,
    pub verify_secs: f64,
    pub e2e_secs: f64,
    pub ttft: LatencyHistogram,
    pub itl: LatencyHistogram,
    /// Time each request waited for the engine before its first step.
    #[serde(default)]
    pub queue: LatencyHistogram,
    /// Shadow checks run on the route's requests, and how many found a real mismatch.
    #[serde(default)]
    pub shadow_checks: u64,
    #[serde(default)]
    pub shadow_mismatches: u64,
    /// Plain decoding as the shadow checks measured it on the route: tokens decoded after the
    /// first (which comes from the prompt's pass) and the engine seconds they took. What the
    /// analyst's speed-up compares the route's own decoding with.
    #[serde(default)]
    pub shadow_plain_tokens: u64,
    #[serde(default)]
    pub shadow_plain_secs: f64,
    /// Σ over the requests of 1 / (the mean count of sequences their rounds ran with): the
    /// load their acceptance was measured under. None in records written before it was
    /// kept, read as run alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_share: Option<f64>,
    /// The part of these totals from requests the learner did not learn from (recalled
    /// repeats, predicted outputs), so a restart's warm start leaves them out as well.
    #[serde(default, skip_serializing_if = "Evidence::is_empty")]
    pub unlearned: Evidence,
}

/// What the learner takes from a bucket: the counts that price a strategy on the route.
/// Every field defaults, so a field added later still reads the buckets stored before it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Evidence {
    pub requests: u64,
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
    pub judged: u64,
    pub draft_secs: f64,
    pub verify_secs: f64,
    /// Σ 1 / sequences, as [`HistoryRecord::load_share`].
    pub load_share: f64,
}

impl Evidence {
    pub fn is_empty(&self) -> bool {
        self.requests == 0
    }

    fn add(&mut self, o: &Evidence) {
        self.requests += o.requests;
        self.rounds += o.rounds;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.judged += o.judged;
        self.draft_secs += o.draft_secs;
        self.verify_secs += o.verify_secs;
        self.load_share += o.load_share;
    }

    /// The count of sequences these requests typically ran with (harmonic mean; 1 if unknown).
    pub fn sequences(&self) -> f64 {
        if self.load_share > 0.0 && self.requests > 0 {
            (self.requests as f64 / self.load_share).max(1.0)
        } else {
            1.0
        }
    }
}

impl HistoryRecord {
    /// The record's totals as evidence for the learner, all requests counted.
    pub fn evidence(&self) -> Evidence {
        Evidence {
            requests: self.requests,
            rounds: self.rounds,
            drafted: self.drafted,
            accepted: self.accepted,
            judged: self.judged,
            draft_secs: self.draft_secs,
            verify_secs: self.verify_secs,
            load_share: self.load_share.unwrap_or(self.requests as f64),
        }
    }

    /// What the live learner learned from this bucket: the totals less the unlearned part.
    pub fn learned(&self) -> Evidence {
        let all = self.evidence();
        let off = &self.unlearned;
        Evidence {
            requests: all.requests.saturating_sub(off.requests),
            rounds: all.rounds.saturating_sub(off.rounds),
            drafted: all.drafted.saturating_sub(off.drafted),
            accepted: all.accepted.saturating_sub(off.accepted),
            judged: all.judged.saturating_sub(off.judged),
            draft_secs: (all.draft_secs - off.draft_secs).max(0.0),
            verify_secs: (all.verify_secs - off.verify_secs).max(0.0),
            load_share: (all.load_share - off.load_share).max(0.0),
        }
    }

    pub fn merge(&mut self, o: &HistoryRecord) {
        self.load_share = match (self.load_share, o.load_share) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(self.requests as f64) + b.unwrap_or(o.requests as f64)),
        };
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.tokens_out += o.tokens_out;
        self.target_passes += o.target_passes;
        self.rounds += o.rounds;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.judged += o.judged;
        if self.accepted_per_pos.len() < o.accepted_per_pos.len() {
            self.accepted_per_pos.resize(o.accepted_per_pos.len(), 0);
        }
        for (a, b) in self.accepted_per_pos.iter_mut().zip(&o.accepted_per_pos) {
            *a += b;
        }
        self.draft_secs += o.draft_secs;
        self.verify_secs += o.verify_secs;
        self.e2e_secs += o.e2e_secs;
        self.ttft.merge(&o.ttft);
        self.itl.merge(&o.itl);
        self.queue.merge(&o.queue);
        self.shadow_checks += o.shadow_checks;
        self.shadow_mismatches += o.shadow_mismatches;
        self.shadow_plain_tokens += o.shadow_plain_tokens;
        self.shadow_plain_secs += o.shadow_plain_secs;
        self.unlearned.add(&o.unlearned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_merge_and_give_quantiles() {
        let mut a = LatencyHistogram::default();
        for ms in [3.0, 12.0, 12.0, 18.0] {
            a.record(ms / 1e3);
        }
        let mut b = LatencyHistogram::default();
        b.record(0.450);
        a.merge(&b);
        assert_eq!(a.total(), 5);
        assert_eq!(a.quantile_ms(0.5), Some(15.0));
        assert_eq!(a.quantile_ms(0.95), Some(500.0));
        assert_eq!(LatencyHistogram::default().quantile_ms(0.5), None);
    }

    #[test]
    fn a_bucket_keeps_the_load_its_requests_ran_under() {
        let at = |requests, sequences: f64| HistoryRecord {
            requests,
            load_share: Some(requests as f64 / sequences),
            ..Default::default()
        };
        // Eight requests 16-way and two alone: the harmonic mean, as the learner's 1/n
        // evidence weights add up.
        let mut busy = at(8, 16.0);
        busy.merge(&at(2, 1.0));
        assert!((busy.evidence().sequences() - 10.0 / 2.5).abs() < 1e-12);
        // A record written before loads were kept counts its requests as run alone.
        let old = HistoryRecord {
            requests: 3,
            ..Default::default()
        };
        assert_eq!(old.evidence().sequences(), 1.0);
        let mut mixed = old.clone();
        mixed.merge(&at(1, 16.0));
        assert!((mixed.evidence().sequences() - 4.0 / (3.0 + 1.0 / 16.0)).abs() < 1e-12);
        // And it still reads: the field is optional in the stored JSON.
        let json = serde_json::to_string(&old).unwrap();
        assert!(!json.contains("load_share"));
        let back: HistoryRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, old);
    }

    #[test]
    fn the_learned_part_of_a_bucket_leaves_out_what_the_learner_never_saw() {
        let request = |judged, accepted, sequences: f64| HistoryRecord {
            requests: 1,
            rounds: 4,
            drafted: judged,
            accepted,
            judged,
            draft_secs: 0.01,
            verify_secs: 0.02,
            load_share: Some(1.0 / sequences),
            ..Default::default()
        };
        let mut bucket = request(16, 8, 2.0);
        let mut recalled = request(32, 30, 1.0);
        recalled.unlearned = recalled.evidence();
        bucket.merge(&recalled);
        // Every total still counts the recalled repeat (analytics shows all traffic)...
        assert_eq!(
            (bucket.requests, bucket.judged, bucket.accepted),
            (2, 48, 38)
        );
        // ...but the learner's part is the first request alone, with its load.
        let learned = bucket.learned();
        assert_eq!(learned, request(16, 8, 2.0).evidence());
        assert!((learned.sequences() - 2.0).abs() < 1e-12);
        // Stored and read back with the part kept; a bucket without one stores no field.
        let back: HistoryRecord =
            serde_json::from_str(&serde_json::to_string(&bucket).unwrap()).unwrap();
        assert_eq!(back.learned(), learned);
        assert!(!serde_json::to_string(&request(1, 1, 1.0))
            .unwrap()
            .contains("unlearned"));
    }
}
