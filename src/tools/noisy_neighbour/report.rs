//! The noisy-neighbour run as markdown: B's latency alone and under the flood, the engine's
//! throughput, the weighted shares and the tiers, one column per server.

use std::fmt::Write;

use super::{NoisyRun, Probes, ServerRun};
use crate::tools::loadgen_report::percentile;

fn ms(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    percentile(&mut v, p) * 1e3
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "n/a".into()
    }
}

fn probe_row(name: &str, p: &Probes) -> String {
    format!(
        "{name}: TTFT p50 {:.0} ms, p95 {:.0} ms; latency p50 {:.0} ms, p95 {:.0} ms ({} answered, {} 429, {} failed)",
        ms(&p.ttft, 0.5),
        ms(&p.ttft, 0.95),
        ms(&p.e2e, 0.5),
        ms(&p.e2e, 0.95),
        p.ttft.len(),
        p.refused,
        p.failed
    )
}

fn server(md: &mut String, s: &ServerRun) {
    let _ = writeln!(md, "### {}\n", s.url);
    let lines = [
        probe_row("- B alone", &s.alone),
        probe_row("- B under the flood", &s.flood.probes),
        format!(
            "- B's TTFT under the flood against alone: p50 {}, p95 {}",
            ratio(ms(&s.flood.probes.ttft, 0.5), ms(&s.alone.ttft, 0.5)),
            ratio(ms(&s.flood.probes.ttft, 0.95), ms(&s.alone.ttft, 0.95))
        ),
        format!(
            "- engine output tokens/s while B was measured: A {:.1}, all tenants {:.1} (A's 429s {}, failures {})",
            s.flood.flood_tokens_per_s,
            s.flood.total_tokens_per_s,
            s.flood.flood_refused,
            s.flood.flood_failed
        ),
        format!(
            "- weights {}:{} over {:.0} s: output tokens {} : {} ({}), charged work {} : {} ({})",
            s.weights.weights.0,
            s.weights.weights.1,
            s.weights.seconds,
            s.weights.output_tokens.0,
            s.weights.output_tokens.1,
            ratio(s.weights.output_tokens.0 as f64, s.weights.output_tokens.1 as f64),
            s.weights.charged.0,
            s.weights.charged.1,
            ratio(s.weights.charged.0 as f64, s.weights.charged.1 as f64)
        ),
        probe_row("- interactive B alone", &s.tiers_alone),
        probe_row("- interactive B under a batch flood", &s.tiers.probes),
        format!(
            "- interactive TTFT under the batch flood against alone: p50 {}, p95 {}; batch tenant's output {:.1} tokens/s",
            ratio(ms(&s.tiers.probes.ttft, 0.5), ms(&s.tiers_alone.ttft, 0.5)),
            ratio(ms(&s.tiers.probes.ttft, 0.95), ms(&s.tiers_alone.ttft, 0.95)),
            s.tiers.flood_tokens_per_s
        ),
    ];
    for l in lines {
        let _ = writeln!(md, "{l}");
    }
    md.push('\n');
}

pub fn markdown(run: &NoisyRun) -> String {
    let pause = match run.probe_gap_ms {
        0 => "each as soon as the last one ended".to_string(),
        ms => format!("each after a random pause of 0-{ms} ms"),
    };
    let mut md = format!(
        "## loadgen --scenario noisy-neighbour\n\nA keeps {} requests of up to {} tokens in \
         flight; B sends requests of up to {} tokens one at a time, {pause}.\n\n",
        run.flood, run.flood_max_tokens, run.probe_max_tokens
    );
    for s in &run.servers {
        server(&mut md, s);
    }
    if let [first, second] = &run.servers[..] {
        let _ = writeln!(
            md,
            "All tenants' output tokens/s under the flood, {} against {}: {}",
            first.url,
            second.url,
            ratio(
                first.flood.total_tokens_per_s,
                second.flood.total_tokens_per_s
            )
        );
    }
    md
}
