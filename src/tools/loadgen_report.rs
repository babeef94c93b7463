//! What `specgate loadgen` reports: a row per concurrency level, mode and class (throughput,
//! TTFT and inter-token latency percentiles, tokens per pass, the strategies the server
//! chose) and every request, as markdown, JSON and JSON lines.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::tools::loadgen::{LoadgenError, Sample};

/// One level × mode.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    pub concurrency: usize,
    pub speculation: bool,
    pub class: String, // "all" or one class
    pub requests: usize,
    pub errors: usize,
    pub tokens_per_second: f64,
    pub ttft_p50: f64,
    pub ttft_p95: f64,
    pub itl_p50: f64,
    pub itl_p95: f64,
    /// Output tokens per target pass after the prefill (1 without speculation).
    pub tokens_per_pass: f64,
    /// The strategies the server chose, with their request counts, most used first.
    pub strategies: String,
}

/// One request of a run, for the request log.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    pub concurrency: usize,
    pub speculation: bool,
    #[serde(flatten)]
    pub sample: Sample,
}

/// What a load run measured: a row per level, mode and class, and every request.
#[derive(Debug, Clone, Default)]
pub struct LoadgenRun {
    pub rows: Vec<LevelReport>,
    pub requests: Vec<RequestRecord>,
}

pub(crate) fn percentile(xs: &mut [f64], p: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let i = ((xs.len() - 1) as f64 * p).round() as usize;
    xs[i]
}

pub(crate) fn summarise(
    c: usize,
    spec: bool,
    class: &str,
    samples: &[&Sample],
    errors: usize,
    wall: Duration,
) -> LevelReport {
    let tokens: usize = samples.iter().map(|s| s.tokens).sum();
    let mut ttft: Vec<f64> = samples.iter().map(|s| s.ttft).collect();
    let mut itl: Vec<f64> = samples.iter().map(|s| s.itl).collect();
    let decode_passes: u64 = samples
        .iter()
        .map(|s| s.speculative["target_passes"].as_u64().unwrap_or(0))
        .map(|p| p.saturating_sub(1))
        .sum();
    let mut mix: Vec<(String, usize)> = Vec::new();
    for s in samples {
        let name = s.speculative["strategy"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        match mix.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => *count += 1,
            None => mix.push((name, 1)),
        }
    }
    mix.sort_by_key(|m| std::cmp::Reverse(m.1));
    let strategies: Vec<String> = mix.iter().map(|(n, c)| format!("{n}×{c}")).collect();
    LevelReport {
        concurrency: c,
        speculation: spec,
        class: class.to_string(),
        requests: samples.len(),
        errors,
        tokens_per_second: tokens as f64 / wall.as_secs_f64().max(1e-9),
        ttft_p50: percentile(&mut ttft, 0.5),
        ttft_p95: percentile(&mut ttft, 0.95),
        itl_p50: percentile(&mut itl, 0.5),
        itl_p95: percentile(&mut itl, 0.95),
        // The first token of every request comes from its prefill pass.
        tokens_per_pass: tokens.saturating_sub(samples.len()) as f64 / decode_passes.max(1) as f64,
        strategies: strategies.join(" "),
    }
}

/// The report as a markdown table, with speculation on/off ratios per level and class.
pub fn markdown(rows: &[LevelReport]) -> String {
    let mut out = String::from(
        "| concurrency | class | spec | requests | errors | tok/s | TTFT p50 ms | TTFT p95 ms | ITL p50 ms | ITL p95 ms | ITL off/on | tok/s on/off | tokens/pass | strategies |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let twin = rows.iter().find(|o| {
            o.concurrency == r.concurrency && o.class == r.class && o.speculation != r.speculation
        });
        let (itl_ratio, tps_ratio) = match (r.speculation, twin) {
            (true, Some(off)) => (
                format!("{:.2}", off.itl_p50 / r.itl_p50.max(1e-9)),
                format!(
                    "{:.2}",
                    r.tokens_per_second / off.tokens_per_second.max(1e-9)
                ),
            ),
            _ => (String::new(), String::new()),
        };
        out += &format!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} | {:.2} | {} |\n",
            r.concurrency,
            r.class,
            if r.speculation { "on" } else { "off" },
            r.requests,
            r.errors,
            r.tokens_per_second,
            r.ttft_p50 * 1e3,
            r.ttft_p95 * 1e3,
            r.itl_p50 * 1e3,
            r.itl_p95 * 1e3,
            itl_ratio,
            tps_ratio,
            r.tokens_per_pass,
            r.strategies
        );
    }
    out
}

/// `loadgen.md`, `loadgen.json` (the rows) and `requests.jsonl` (every request).
pub fn write_results(dir: &Path, run: &LoadgenRun) -> Result<(), LoadgenError> {
    let json_err = |e: serde_json::Error| LoadgenError::Protocol(e.to_string());
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("loadgen.md"), markdown(&run.rows))?;
    let json = serde_json::to_string_pretty(&run.rows).map_err(json_err)?;
    std::fs::write(dir.join("loadgen.json"), json)?;
    let mut lines = String::new();
    for r in &run.requests {
        lines += &serde_json::to_string(r).map_err(json_err)?;
        lines.push('\n');
    }
    std::fs::write(dir.join("requests.jsonl"), lines)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(strategy: &str, tokens: usize, passes: u64) -> Sample {
        Sample {
            class: "code_edit".into(),
            ttft: 0.05,
            itl: 0.003,
            tokens,
            e2e: 0.5,
            speculative: json!({"strategy": strategy, "target_passes": passes}),
        }
    }

    #[test]
    fn a_row_counts_tokens_per_decode_pass_and_the_strategy_mix() {
        // 41 tokens in 21 passes: the prefill's pass made the first token, 20 made 40.
        let (a, b, c) = (
            sample("suffix", 41, 21),
            sample("suffix", 11, 6),
            sample("plain", 10, 10),
        );
        let row = summarise(1, true, "all", &[&a, &b, &c], 0, Duration::from_secs(1));
        assert!((row.tokens_per_pass - 59.0 / 34.0).abs() < 1e-9, "{row:?}");
        assert_eq!(row.strategies, "suffix×2 plain×1");
        assert_eq!(row.requests, 3);
        let md = markdown(&[row]);
        assert!(md.contains("| 1.74 | suffix×2 plain×1 |"), "{md}");
    }
}
