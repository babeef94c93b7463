//! The analyst API's rows: a route's history records grouped per bucket, as JSON rows or CSV.

use std::collections::BTreeMap;

use serde::Serialize;
use specgate_policies::WorkloadClass;

use super::{HistoryKey, HistoryRecord, Latencies};

/// One analytics row: a route's traffic in one bucket, all strategies together.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RouteRow {
    pub tenant: String,
    pub class: String,
    pub bucket_start: u64,
    pub requests: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens served from the prefix cache, and their share of the prompt tokens.
    pub cached_tokens: u64,
    pub prefix_cache_hit_rate: f64,
    pub tokens_out: u64,
    pub drafted: u64,
    pub accepted: u64,
    pub target_passes: u64,
    pub acceptance_rate: f64,
    pub mean_accepted_length: f64,
    pub tokens_per_pass: f64,
    pub tokens_per_second: f64,
    #[serde(flatten)]
    pub latency: Latencies,
    pub shadow_checks: u64,
    pub shadow_mismatches: u64,
    /// Requests per "strategy:k".
    pub strategy_mix: BTreeMap<String, u64>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Group records into rows per (tenant, class, bucket of `bucket_secs`).
pub fn route_rows(records: &[(HistoryKey, HistoryRecord)], bucket_secs: u64) -> Vec<RouteRow> {
    let bucket_secs = bucket_secs.max(60);
    // (tenant, class, bucket) → totals and requests per "strategy:k".
    type Group = (HistoryRecord, BTreeMap<String, u64>);
    let mut groups: BTreeMap<(String, WorkloadClass, u64), Group> = BTreeMap::new();
    for (key, rec) in records {
        let start = key.start - key.start % bucket_secs;
        let g = groups
            .entry((key.tenant.clone(), key.class, start))
            .or_default();
        g.0.merge(rec);
        // Shadow-check records carry no requests: they are not part of the mix.
        if rec.requests > 0 {
            *g.1.entry(key.plan_label()).or_default() += rec.requests;
        }
    }
    groups
        .into_iter()
        .map(|((tenant, class, start), (r, mix))| RouteRow {
            tenant,
            class: class.name().to_string(),
            bucket_start: start,
            requests: r.requests,
            prompt_tokens: r.prompt_tokens,
            cached_tokens: r.cached_tokens,
            prefix_cache_hit_rate: ratio(r.cached_tokens as f64, r.prompt_tokens as f64),
            tokens_out: r.tokens_out,
            drafted: r.drafted,
            accepted: r.accepted,
            target_passes: r.target_passes,
            acceptance_rate: ratio(r.accepted as f64, r.drafted as f64),
            mean_accepted_length: 1.0 + ratio(r.accepted as f64, r.rounds as f64),
            tokens_per_pass: ratio(r.tokens_out as f64, r.target_passes as f64),
            tokens_per_second: ratio(r.tokens_out as f64, r.e2e_secs),
            latency: Latencies::of(&r),
            shadow_checks: r.shadow_checks,
            shadow_mismatches: r.shadow_mismatches,
            strategy_mix: mix,
        })
        .collect()
}

/// Rows as CSV (the mix as `strategy:k=n` joined by spaces).
pub fn rows_csv(rows: &[RouteRow]) -> String {
    let mut out = String::from(
        "tenant,class,bucket_start,requests,tokens_out,drafted,accepted,target_passes,\
         acceptance_rate,mean_accepted_length,tokens_per_pass,tokens_per_second,\
         ttft_p50_ms,ttft_p95_ms,itl_p50_ms,itl_p95_ms,shadow_checks,shadow_mismatches,\
         strategy_mix,prompt_tokens,cached_tokens,prefix_cache_hit_rate,queue_p50_ms,queue_p95_ms\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
    for r in rows {
        let mix: Vec<String> = r
            .strategy_mix
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out += &format!(
            "{},{},{},{},{},{},{},{},{:.4},{:.4},{:.4},{:.2},{},{},{},{},{},{},{},{},{},{:.4},{},{}\n",
            r.tenant,
            r.class,
            r.bucket_start,
            r.requests,
            r.tokens_out,
            r.drafted,
            r.accepted,
            r.target_passes,
            r.acceptance_rate,
            r.mean_accepted_length,
            r.tokens_per_pass,
            r.tokens_per_second,
            opt(r.latency.ttft_p50_ms),
            opt(r.latency.ttft_p95_ms),
            opt(r.latency.itl_p50_ms),
            opt(r.latency.itl_p95_ms),
            r.shadow_checks,
            r.shadow_mismatches,
            mix.join(" "),
            r.prompt_tokens,
            r.cached_tokens,
            r.prefix_cache_hit_rate,
            opt(r.latency.queue_p50_ms),
            opt(r.latency.queue_p95_ms)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use specgate_strategies::StrategyKind;

    #[test]
    fn rows_group_strategies_of_a_route_and_bucket() {
        let rec = |requests, drafted, accepted| HistoryRecord {
            requests,
            drafted,
            accepted,
            rounds: 10,
            tokens_out: 30,
            target_passes: 11,
            e2e_secs: 1.5,
            ..Default::default()
        };
        let records = vec![
            (
                HistoryKey::minute("a", WorkloadClass::Rag, StrategyKind::Ngram, 3, 60),
                rec(1, 30, 15),
            ),
            (
                HistoryKey::minute("a", WorkloadClass::Rag, StrategyKind::Suffix, 6, 120),
                rec(2, 60, 45),
            ),
            (
                HistoryKey::minute("a", WorkloadClass::Chat, StrategyKind::Plain, 0, 60),
                rec(1, 0, 0),
            ),
        ];
        let rows = route_rows(&records, 3600);
        assert_eq!(rows.len(), 2);
        let rag = rows.iter().find(|r| r.class == "rag").unwrap();
        assert_eq!((rag.requests, rag.drafted, rag.accepted), (3, 90, 60));
        assert!((rag.acceptance_rate - 60.0 / 90.0).abs() < 1e-12);
        assert_eq!(rag.strategy_mix.get("suffix:6"), Some(&2));
        assert!(rows_csv(&rows).lines().count() == 3);
    }

    #[test]
    fn rows_give_the_queue_time_of_their_requests() {
        let mut waited = HistoryRecord {
            requests: 2,
            ..Default::default()
        };
        waited.queue.record(0.004);
        waited.queue.record(0.700);
        let key = HistoryKey::minute("a", WorkloadClass::Chat, StrategyKind::Plain, 0, 60);
        let rows = route_rows(&[(key, waited)], 60);
        assert_eq!(rows[0].latency.queue_p50_ms, Some(5.0));
        assert_eq!(rows[0].latency.queue_p95_ms, Some(1000.0));
        let csv = rows_csv(&rows);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        let at = header.iter().position(|h| *h == "queue_p95_ms").unwrap();
        assert_eq!(row[at], "1000");
    }
}
