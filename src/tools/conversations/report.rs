//! The report of a conversation scenario: per concurrency and configuration, time to first
//! token of the first turn and of the later ones (the turns a cache can serve), end-to-end
//! tokens/s and the hit rate; the ratios against no cache; time to first token turn by turn.

use std::fmt::Write;

use super::{ConversationRun, TurnRow};
use crate::tools::loadgen::percentile;

/// Medians and rates of one (concurrency, configuration).
struct Summary {
    first_ttft: f64,
    later_ttft: f64,
    later_p95: f64,
    e2e: f64,
    tokens_per_second: f64,
    hit_rate: f64,
    turns: usize,
    errors: usize,
}

fn summarise(run: &ConversationRun, c: usize, variant: &str) -> Summary {
    let turns: Vec<&TurnRow> = run
        .turns
        .iter()
        .filter(|t| t.concurrency == c && t.variant == variant)
        .collect();
    let pick = |f: &dyn Fn(&TurnRow) -> bool, g: &dyn Fn(&TurnRow) -> f64| -> Vec<f64> {
        turns.iter().filter(|t| f(t)).map(|t| g(t)).collect()
    };
    let mut first = pick(&|t| t.turn == 1, &|t| t.sample.ttft);
    let mut later = pick(&|t| t.turn > 1, &|t| t.sample.ttft);
    let mut e2e = pick(&|_| true, &|t| t.sample.e2e);
    let (prompt, cached) = turns
        .iter()
        .filter(|t| t.turn > 1)
        .fold((0u64, 0u64), |(p, c), t| {
            (p + t.sample.prompt_tokens, c + t.sample.cached_tokens)
        });
    let runs = run
        .runs
        .iter()
        .filter(|r| r.concurrency == c && r.variant == variant);
    let (tokens, secs, errors) = runs.fold((0u64, 0.0, 0usize), |(t, s, e), r| {
        (t + r.completion_tokens, s + r.seconds, e + r.errors)
    });
    Summary {
        first_ttft: percentile(&mut first, 0.5),
        later_ttft: percentile(&mut later.clone(), 0.5),
        later_p95: percentile(&mut later, 0.95),
        e2e: percentile(&mut e2e, 0.5),
        tokens_per_second: if secs > 0.0 {
            tokens as f64 / secs
        } else {
            0.0
        },
        hit_rate: if prompt > 0 {
            cached as f64 / prompt as f64
        } else {
            0.0
        },
        turns: turns.len(),
        errors,
    }
}

fn distinct<T: PartialEq + Clone>(xs: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in xs {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

pub fn markdown(run: &ConversationRun) -> String {
    let levels = distinct(run.runs.iter().map(|r| r.concurrency));
    let variants = distinct(run.runs.iter().map(|r| r.variant.clone()));
    let mut md = format!(
        "## loadgen --scenario {}\n\n| concurrency | configuration | turns | TTFT turn 1 (ms) | \
         TTFT later turns p50 (ms) | p95 (ms) | e2e per turn p50 (s) | tokens/s | hit rate, \
         later turns | errors |\n|---|---|---|---|---|---|---|---|---|---|\n",
        serde_json::to_value(run.scenario)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    );
    for &c in &levels {
        for v in &variants {
            let s = summarise(run, c, v);
            let _ = writeln!(
                md,
                "| {c} | {v} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.3} | {} |",
                s.turns,
                s.first_ttft * 1e3,
                s.later_ttft * 1e3,
                s.later_p95 * 1e3,
                s.e2e,
                s.tokens_per_second,
                s.hit_rate,
                s.errors
            );
        }
    }
    md += &ratios(run, &levels);
    md += &by_turn(run, &levels, &variants);
    md
}

/// Each cached configuration against its uncached twin.
fn ratios(run: &ConversationRun, levels: &[usize]) -> String {
    let mut md = String::from("\n| concurrency | against | TTFT later turns, ratio | tokens/s, ratio |\n|---|---|---|---|\n");
    let pairs = [
        ("cache", "no-cache"),
        ("cache, plain", "no-cache, plain"),
        ("cache", "cache, plain"),
    ];
    for &c in levels {
        for (a, b) in pairs {
            if !run.runs.iter().any(|r| r.variant == a) || !run.runs.iter().any(|r| r.variant == b)
            {
                continue;
            }
            let (x, y) = (summarise(run, c, a), summarise(run, c, b));
            let _ = writeln!(
                md,
                "| {c} | {a} vs {b} | {:.2}× lower | {:.2}× |",
                y.later_ttft / x.later_ttft.max(1e-9),
                x.tokens_per_second / y.tokens_per_second.max(1e-9)
            );
        }
    }
    md
}

/// Median time to first token by turn, one column per configuration.
fn by_turn(run: &ConversationRun, levels: &[usize], variants: &[String]) -> String {
    let mut md =
        String::from("\nTime to first token by turn, median (ms):\n\n| concurrency | turn |");
    for v in variants {
        let _ = write!(md, " {v} |");
    }
    md += "\n|---|---|";
    md += &"---|".repeat(variants.len());
    md += "\n";
    let turns = run.turns.iter().map(|t| t.turn).max().unwrap_or(0);
    for &c in levels {
        for turn in 1..=turns {
            let _ = write!(md, "| {c} | {turn} |");
            for v in variants {
                let mut xs: Vec<f64> = run
                    .turns
                    .iter()
                    .filter(|t| t.concurrency == c && &t.variant == v && t.turn == turn)
                    .map(|t| t.sample.ttft)
                    .collect();
                let _ = write!(md, " {:.0} |", percentile(&mut xs, 0.5) * 1e3);
            }
            md += "\n";
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, RunRow, TurnSample};
    use super::*;

    #[test]
    fn later_turns_and_ratios_come_from_the_right_rows() {
        let turn = |variant: &str, turn: usize, ttft: f64, cached: u64| TurnRow {
            variant: variant.into(),
            concurrency: 1,
            repeat: 0,
            conversation: 0,
            turn,
            sample: TurnSample {
                ttft,
                prompt_tokens: 100,
                cached_tokens: cached,
                completion_tokens: 10,
                ..Default::default()
            },
        };
        let runs = ["cache", "no-cache"].map(|v| RunRow {
            variant: v.into(),
            concurrency: 1,
            repeat: 0,
            seconds: 2.0,
            completion_tokens: 20,
            errors: 0,
        });
        let run = ConversationRun {
            scenario: Kind::ChatTurns,
            turns: vec![
                turn("cache", 1, 1.0, 0),
                turn("cache", 2, 0.1, 80),
                turn("no-cache", 1, 1.0, 0),
                turn("no-cache", 2, 0.8, 0),
            ],
            runs: runs.to_vec(),
        };
        let md = markdown(&run);
        assert!(
            md.contains("| 1 | cache | 2 | 1000 | 100 | 100 | 0.00 | 10.0 | 0.800 | 0 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | cache vs no-cache | 8.00× lower | 1.00× |"),
            "{md}"
        );
        assert!(md.contains("| 1 | 2 | 100 | 800 |"), "{md}");
    }
}
