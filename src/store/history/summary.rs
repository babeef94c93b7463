//! The analyst's summary: a time range's history per tenant and per route (tenant × class),
//! every strategy and bucket together, with the speed-up speculation gave
//! ([`super::speedup`]). Pure: records in, rows out, JSON or CSV.

use std::collections::BTreeMap;

use serde::Serialize;

use super::speedup::{SpeedEvidence, Speedup};
use super::{HistoryKey, HistoryRecord, Latencies};

/// The class of a tenant's row, which sums its routes.
pub const ALL_CLASSES: &str = "all";

/// One summary row: a route, or a tenant (class [`ALL_CLASSES`]) over the whole range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryRow {
    pub tenant: String,
    pub class: String,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Accepted ÷ drafted; None where nothing was drafted.
    pub acceptance_rate: Option<f64>,
    /// Completion tokens ÷ target passes (the prompt's pass included).
    pub tokens_per_pass: Option<f64>,
    #[serde(flatten)]
    pub latency: Latencies,
    /// Share of requests per "strategy:k".
    pub strategy_mix: BTreeMap<String, f64>,
    #[serde(flatten)]
    pub speed: Speedup,
    /// Cached ÷ prompt tokens; None without prompt tokens.
    pub prefix_cache_hit_rate: Option<f64>,
    pub shadow_checks: u64,
    pub shadow_mismatches: u64,
}

#[derive(Default)]
struct Group {
    totals: HistoryRecord,
    mix: BTreeMap<String, u64>,
    speed: SpeedEvidence,
}

impl Group {
    fn add(&mut self, key: &HistoryKey, rec: &HistoryRecord) {
        self.totals.merge(rec);
        if rec.requests > 0 {
            *self.mix.entry(key.plan_label()).or_default() += rec.requests;
        }
        self.speed.add(key, rec);
    }

    fn merge(&mut self, o: &Group) {
        self.totals.merge(&o.totals);
        for (k, n) in &o.mix {
            *self.mix.entry(k.clone()).or_default() += n;
        }
        self.speed.merge(&o.speed);
    }

    fn row(&self, tenant: &str, class: &str) -> SummaryRow {
        let r = &self.totals;
        let part = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        SummaryRow {
            tenant: tenant.to_string(),
            class: class.to_string(),
            requests: r.requests,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.tokens_out,
            acceptance_rate: part(r.accepted, r.drafted),
            tokens_per_pass: part(r.tokens_out, r.target_passes),
            latency: Latencies::of(r),
            strategy_mix: self
                .mix
                .iter()
                .map(|(k, n)| (k.clone(), *n as f64 / r.requests.max(1) as f64))
                .collect(),
            speed: self.speed.estimate(),
            prefix_cache_hit_rate: part(r.cached_tokens, r.prompt_tokens),
            shadow_checks: r.shadow_checks,
            shadow_mismatches: r.shadow_mismatches,
        }
    }
}

/// Per tenant, its row (class "all") and then its routes', by tenant and class name.
pub fn summary_rows(records: &[(HistoryKey, HistoryRecord)]) -> Vec<SummaryRow> {
    let mut routes: BTreeMap<(String, &'static str), Group> = BTreeMap::new();
    for (key, rec) in records {
        routes
            .entry((key.tenant.clone(), key.class.name()))
            .or_default()
            .add(key, rec);
    }
    let mut tenants: BTreeMap<&str, Group> = BTreeMap::new();
    for ((tenant, _), g) in &routes {
        tenants.entry(tenant).or_default().merge(g);
    }
    let mut out = Vec::new();
    for (tenant, g) in &tenants {
        out.push(g.row(tenant, ALL_CLASSES));
        for ((t, class), g) in routes.range((tenant.to_string(), "")..) {
            if t != tenant {
                break;
            }
            out.push(g.row(t, class));
        }
    }
    out
}

/// The CSV columns: every number of a row, the mix as `strategy:k=share` joined by spaces.
const CSV_COLUMNS: [&str; 26] = [
    "tenant",
    "class",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "acceptance_rate",
    "tokens_per_pass",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "itl_p50_ms",
    "itl_p95_ms",
    "strategy_mix",
    "served_tokens_per_second",
    "plain_tokens_per_second",
    "speedup",
    "speedup_low",
    "speedup_high",
    "plain_requests",
    "plain_shadow_checks",
    "plain_samples",
    "plain_decode_tokens",
    "prefix_cache_hit_rate",
    "queue_p50_ms",
    "queue_p95_ms",
    "shadow_checks",
    "shadow_mismatches",
];

/// Rows as CSV with a header; an absent number is an empty cell.
pub fn summary_csv(rows: &[SummaryRow]) -> String {
    let mut out = CSV_COLUMNS.join(",") + "\n";
    for row in rows {
        let value = serde_json::to_value(row).unwrap_or_default();
        let cells: Vec<String> = CSV_COLUMNS
            .iter()
            .map(|c| match &value[*c] {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => csv_text(s),
                serde_json::Value::Object(mix) => mix
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_f64().unwrap_or(0.0)))
                    .collect::<Vec<_>>()
                    .join(" "),
                other => other.to_string(),
            })
            .collect();
        out += &cells.join(",");
        out.push('\n');
    }
    out
}

/// A text cell quoted when it holds a comma, quote or line break.
fn csv_text(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specgate_policies::WorkloadClass;
    use specgate_strategies::StrategyKind;

    fn request(
        tenant: &str,
        class: WorkloadClass,
        strategy: StrategyKind,
        minute: u64,
    ) -> (HistoryKey, HistoryRecord) {
        let mut rec = HistoryRecord {
            requests: 1,
            prompt_tokens: 40,
            cached_tokens: 10,
            tokens_out: 21,
            target_passes: 8,
            drafted: 20,
            accepted: 13,
            verify_secs: 0.5,
            ..Default::default()
        };
        rec.ttft.record(0.030);
        rec.itl.record(0.012);
        rec.queue.record(0.002);
        (
            HistoryKey::minute(tenant, class, strategy, 4, minute * 60),
            rec,
        )
    }

    #[test]
    fn a_tenant_row_sums_its_routes_and_comes_first() {
        let records = vec![
            request("a", WorkloadClass::Chat, StrategyKind::Suffix, 0),
            request("a", WorkloadClass::Chat, StrategyKind::Ngram, 1),
            request("a", WorkloadClass::Rag, StrategyKind::Suffix, 1),
            request("b", WorkloadClass::Chat, StrategyKind::Suffix, 0),
        ];
        let rows = summary_rows(&records);
        let names: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.tenant.as_str(), r.class.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("a", "all"),
                ("a", "chat"),
                ("a", "rag"),
                ("b", "all"),
                ("b", "chat")
            ]
        );
        let (all, chat) = (&rows[0], &rows[1]);
        assert_eq!(
            (all.requests, all.prompt_tokens, all.completion_tokens),
            (3, 120, 63)
        );
        assert_eq!(all.acceptance_rate, Some(0.65));
        assert_eq!(all.prefix_cache_hit_rate, Some(0.25));
        assert_eq!(
            chat.strategy_mix,
            BTreeMap::from([("ngram:4".into(), 0.5), ("suffix:4".into(), 0.5)])
        );
        assert_eq!(
            (
                chat.latency.ttft_p50_ms,
                chat.latency.itl_p95_ms,
                chat.latency.queue_p95_ms
            ),
            (Some(30.0), Some(15.0), Some(2.0))
        );
        assert_eq!(all.speed.speedup, None, "no plain decoding measured");
    }

    #[test]
    fn csv_has_a_cell_per_column_and_empty_cells_for_what_is_absent() {
        let rows = summary_rows(&[request("a,b", WorkloadClass::Chat, StrategyKind::Suffix, 0)]);
        let csv = summary_csv(&rows);
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let first = lines.next().unwrap();
        assert!(first.starts_with("\"a,b\",all,1,40,21,0.65,"), "{first}");
        let cells: Vec<&str> = first.trim_start_matches("\"a,b\"").split(',').collect();
        assert_eq!(cells.len(), header.len());
        let at = header.iter().position(|h| *h == "speedup").unwrap();
        assert_eq!(cells[at], "");
        let at = header.iter().position(|h| *h == "strategy_mix").unwrap();
        assert_eq!(cells[at], "suffix:4=1");
    }
}
