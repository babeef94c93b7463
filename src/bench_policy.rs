//! `specgate loadgen --compare-fixed`: the learning policy against fixed choices, on a
//! replay of the three prompt sets through a running server. Per class it reports tokens/s
//! (generated tokens over the requests' own end-to-end time) of the server's plan and of
//! every fixed (strategy, k) applied to all requests, then the ratios the policy is judged by:
//! learned / best fixed for that class, and learned / the best single fixed choice for all.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::loadgen::{model_id, one_request, prompt_mix, LoadgenConfig, LoadgenError, SpecMode};

#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub config: String,
    pub class: String,
    pub tokens_per_second: f64,
}

fn label(m: &SpecMode) -> String {
    match m {
        SpecMode::Server => "learned".into(),
        SpecMode::Off => "plain".into(),
        SpecMode::Fixed(s, k) => format!("{s}:{k}"),
    }
}

/// Warm the learner with `warmup` passes over the mix, then run every configuration over
/// the mix `rounds` times, configurations interleaved per prompt so drift hits all alike.
pub fn compare(
    cfg: &LoadgenConfig,
    fixed: &[(String, usize)],
    warmup: usize,
    rounds: usize,
    log: &mut dyn std::io::Write,
) -> Result<Vec<PolicyRow>, LoadgenError> {
    let model = model_id(cfg)?;
    let mix = prompt_mix(&cfg.prompt_dir)?;
    for w in 0..warmup {
        writeln!(log, "warm-up pass {}/{warmup}", w + 1)?;
        for (class, prompt) in &mix {
            one_request(cfg, &model, class, prompt, &SpecMode::Server)?;
        }
    }
    let mut modes = vec![SpecMode::Server, SpecMode::Off];
    modes.extend(fixed.iter().map(|(s, k)| SpecMode::Fixed(s.clone(), *k)));
    // (config, class) → (tokens, seconds)
    let mut totals: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for r in 0..rounds {
        writeln!(log, "round {}/{rounds}", r + 1)?;
        for (class, prompt) in &mix {
            for m in &modes {
                let s = one_request(cfg, &model, class, prompt, m)?;
                for key in [(label(m), class.clone()), (label(m), "all".to_string())] {
                    let t = totals.entry(key).or_default();
                    t.0 += s.tokens as f64;
                    t.1 += s.e2e;
                }
            }
        }
    }
    Ok(totals
        .into_iter()
        .map(|((config, class), (tokens, secs))| PolicyRow {
            config,
            class,
            tokens_per_second: tokens / secs.max(1e-9),
        })
        .collect())
}

/// The table and the two ratios per class.
pub fn markdown(rows: &[PolicyRow]) -> String {
    let classes: Vec<String> = {
        let mut c: Vec<String> = rows.iter().map(|r| r.class.clone()).collect();
        c.sort();
        c.dedup();
        c
    };
    let get = |config: &str, class: &str| {
        rows.iter()
            .find(|r| r.config == config && r.class == class)
            .map_or(0.0, |r| r.tokens_per_second)
    };
    let configs: Vec<String> = {
        let mut c: Vec<String> = rows.iter().map(|r| r.config.clone()).collect();
        c.sort();
        c.dedup();
        c
    };
    let fixed: Vec<&String> = configs.iter().filter(|c| *c != "learned").collect();
    // The best single fixed choice for all traffic, judged on all classes together.
    let best_all = fixed
        .iter()
        .max_by(|a, b| get(a, "all").total_cmp(&get(b, "all")))
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut out = String::from("| class | learned tok/s | best fixed | its tok/s | learned / best fixed | best single fixed for all | learned / it |\n|---|---|---|---|---|---|---|\n");
    for class in &classes {
        let learned = get("learned", class);
        let best = fixed
            .iter()
            .max_by(|a, b| get(a, class).total_cmp(&get(b, class)))
            .map(|s| s.to_string())
            .unwrap_or_default();
        out += &format!(
            "| {class} | {learned:.1} | {best} | {:.1} | {:.2} | {best_all} | {:.2} |\n",
            get(&best, class),
            learned / get(&best, class).max(1e-9),
            learned / get(&best_all, class).max(1e-9),
        );
    }
    out += "\n| config | class | tok/s |\n|---|---|---|\n";
    for r in rows {
        out += &format!(
            "| {} | {} | {:.1} |\n",
            r.config, r.class, r.tokens_per_second
        );
    }
    out
}
