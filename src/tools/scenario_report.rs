//! The report of a `loadgen --scenario` run: tokens/s per phase and configuration, the
//! learned plan against the best fixed configuration of each phase and the best single one,
//! per class for the cold scenario, and per request against plain decoding.

use std::collections::BTreeMap;

use crate::tools::loadgen::Sample;
use crate::tools::scenarios::ScenarioRun;

/// The report: tokens/s per phase and configuration, and the ratios the learned plan is
/// judged by.
pub fn markdown(run: &ScenarioRun) -> String {
    let phases: Vec<String> = run.rows.iter().fold(Vec::new(), |mut v, r| {
        if !v.contains(&r.phase) {
            v.push(r.phase.clone());
        }
        v
    });
    let mut totals: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for r in &run.rows {
        let t = totals.entry(r.config.clone()).or_default();
        t.0 += r.tokens;
        t.1 += r.seconds;
    }
    let configs: Vec<String> = totals.keys().cloned().collect();
    let tps = |config: &str, phase: Option<&str>| -> f64 {
        match phase {
            Some(p) => run
                .rows
                .iter()
                .find(|r| r.config == config && r.phase == p)
                .map_or(0.0, |r| r.tokens_per_second),
            None => totals
                .get(config)
                .map_or(0.0, |t| t.0 as f64 / t.1.max(1e-9)),
        }
    };
    let best = |phase: Option<&str>| {
        configs
            .iter()
            .filter(|c| *c != "learned")
            .max_by(|a, b| tps(a, phase).total_cmp(&tps(b, phase)))
            .cloned()
            .unwrap_or_default()
    };
    let mut out = format!(
        "| phase | {} | best fixed | learned / best fixed |\n|---|{}---|---|\n",
        configs.join(" | "),
        "---|".repeat(configs.len())
    );
    let mut line = |name: &str, phase: Option<&str>| {
        let cells: Vec<String> = configs
            .iter()
            .map(|c| format!("{:.1}", tps(c, phase)))
            .collect();
        let b = best(phase);
        out += &format!(
            "| {name} | {} | {b} | {:.2} |\n",
            cells.join(" | "),
            tps("learned", phase) / tps(&b, phase).max(1e-9)
        );
    };
    for p in &phases {
        line(p, Some(p));
    }
    line("whole scenario", None);
    if run.scenario == "cold" {
        out += &class_table(run, &best(None));
    }
    let ratios = per_request_ratios(run, "learned", "plain");
    if let Some(worst) = ratios.iter().copied().reduce(f64::min) {
        let slow = ratios.iter().filter(|r| **r < 1.0 / 1.15).count();
        out += &format!(
            "\nPer request, learned / plain tokens/s (one at a time): worst {worst:.2}, median \
             {:.2}; {slow} of {} more than 15% slower.\n",
            crate::tools::bench_decode::median(&ratios),
            ratios.len()
        );
    }
    out
}

/// Per class: each configuration's tokens/s over its requests of the class, and the learned
/// plan's against the best fixed configuration for the class and the best single one for all
/// traffic (`best_all`).
fn class_table(run: &ScenarioRun, best_all: &str) -> String {
    let mut sums: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
    for r in run.requests.iter().filter(|r| r.sample.tokens > 0) {
        let t = sums
            .entry((r.sample.class.clone(), r.config.clone()))
            .or_default();
        t.0 += r.sample.tokens;
        t.1 += r.sample.e2e;
    }
    let tps = |class: &str, config: &str| {
        sums.get(&(class.to_string(), config.to_string()))
            .map_or(0.0, |t| t.0 as f64 / t.1.max(1e-9))
    };
    let mut classes: Vec<&String> = sums.keys().map(|k| &k.0).collect();
    classes.dedup();
    let mut out = String::from(
        "\n| class | learned tok/s | best fixed | its tok/s | learned / best fixed | learned / best single fixed |\n|---|---|---|---|---|---|\n",
    );
    for class in classes {
        let best = sums
            .keys()
            .filter(|k| &k.0 == class && k.1 != "learned")
            .max_by(|a, b| tps(class, &a.1).total_cmp(&tps(class, &b.1)))
            .map(|k| k.1.clone())
            .unwrap_or_default();
        let learned = tps(class, "learned");
        out += &format!(
            "| {class} | {learned:.1} | {best} | {:.1} | {:.2} | {:.2} |\n",
            tps(class, &best),
            learned / tps(class, &best).max(1e-9),
            learned / tps(class, best_all).max(1e-9)
        );
    }
    out
}

/// For requests run one at a time: each prompt's tokens/s under `a` over under `b`.
pub fn per_request_ratios(run: &ScenarioRun, a: &str, b: &str) -> Vec<f64> {
    let speed = |s: &Sample| s.tokens as f64 / s.e2e.max(1e-9);
    let of = |config: &str| -> BTreeMap<(String, usize), f64> {
        run.requests
            .iter()
            .filter(|r| r.config == config && r.concurrency <= 1 && r.sample.tokens > 0)
            .map(|r| ((r.phase.clone(), r.index), speed(&r.sample)))
            .collect()
    };
    let (x, y) = (of(a), of(b));
    x.iter()
        .filter_map(|(k, v)| y.get(k).map(|w| v / w))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::scenarios::PhaseRow;

    #[test]
    fn the_report_judges_the_learned_plan_against_the_best_fixed_per_phase_and_overall() {
        let row = |config: &str, phase: &str, tokens, seconds| PhaseRow {
            config: config.into(),
            phase: phase.into(),
            tokens,
            seconds,
            tokens_per_second: tokens as f64 / seconds,
            errors: 0,
        };
        let run = ScenarioRun {
            scenario: "shift".into(),
            rows: vec![
                row("learned", "a", 200, 1.0),
                row("plain", "a", 100, 1.0),
                row("suffix:8", "a", 250, 1.0),
                row("learned", "b", 300, 1.0),
                row("plain", "b", 100, 1.0),
                row("suffix:8", "b", 100, 1.0),
            ],
            requests: vec![],
        };
        let md = markdown(&run);
        assert!(
            md.contains("| a | 200.0 | 100.0 | 250.0 | suffix:8 | 0.80 |"),
            "{md}"
        );
        // Overall: learned 500 tokens in 2 s against suffix:8's 350.
        assert!(
            md.contains("| whole scenario | 250.0 | 100.0 | 175.0 | suffix:8 | 1.43 |"),
            "{md}"
        );
    }
}
