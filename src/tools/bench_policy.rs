//! `specgate loadgen --compare-fixed`: the learning policy against fixed choices, on a
//! replay of the three prompt sets through a running server. Per class it reports tokens/s
//! (generated tokens over the requests' own end-to-end time) of the server's plan and of
//! every fixed (strategy, k) applied to all requests, then the ratios the policy is judged by:
//! learned / best fixed for that class, and learned / the best single fixed choice for all.
//!
//! Fresh traffic, not repeated prompts: the first half of each set warms up, the second half
//! is measured, and with an admin token each configuration runs as a tenant of its own, so
//! no suffix cache holds another configuration's answer to the prompt being measured.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tools::loadgen::{
    create_tenant, model_id, one_request, prompt_mix, LoadgenConfig, LoadgenError, SpecMode,
};

#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub config: String,
    pub class: String,
    pub tokens_per_second: f64,
}

/// Who each configuration's requests run as.
#[derive(Debug, Clone)]
pub enum Tenancy {
    /// A new tenant per configuration, created with this admin token.
    PerConfig { admin_token: String },
    /// Every configuration as `LoadgenConfig::key`: suffix drafting then also draws on the
    /// other configurations' warm-up traffic.
    Shared,
}

fn label(m: &SpecMode) -> String {
    match m {
        SpecMode::Server => "learned".into(),
        SpecMode::Off => "plain".into(),
        SpecMode::Fixed(s, k) => format!("{s}:{k}"),
    }
}

/// (class, prompt) pairs in replay order.
pub type Mix = Vec<(String, String)>;

/// (warm-up, measured): the first half of each class's prompts, and the rest.
pub fn split_mix(mix: Mix) -> (Mix, Mix) {
    let mut per_class: BTreeMap<String, usize> = BTreeMap::new();
    for (class, _) in &mix {
        *per_class.entry(class.clone()).or_default() += 1;
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    mix.into_iter().partition(|(class, _)| {
        let n = seen.entry(class.clone()).or_default();
        *n += 1;
        *n <= per_class[class] / 2
    })
}

/// Every configuration runs `warmup` passes over the warm-up half (the learner learns its
/// routes; every suffix cache gets the same earlier traffic), then `rounds` passes over the
/// measured half, configurations interleaved per prompt so drift hits all alike.
pub fn compare(
    cfg: &LoadgenConfig,
    fixed: &[(String, usize)],
    tenancy: &Tenancy,
    warmup: usize,
    rounds: usize,
    log: &mut dyn std::io::Write,
) -> Result<Vec<PolicyRow>, LoadgenError> {
    let (warm, measured) = split_mix(prompt_mix(&cfg.prompt_dir)?);
    let mut modes = vec![SpecMode::Server, SpecMode::Off];
    modes.extend(fixed.iter().map(|(s, k)| SpecMode::Fixed(s.clone(), *k)));
    let run = crate::clock::unix_now();
    let keys = modes
        .iter()
        .map(|m| match tenancy {
            Tenancy::PerConfig { admin_token } => {
                let name = format!("replay-{run}-{}", label(m).replace(':', "-"));
                create_tenant(&cfg.url, admin_token, &name)
            }
            Tenancy::Shared => Ok(cfg.key.clone()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let model = model_id(&LoadgenConfig {
        key: keys[0].clone(),
        ..cfg.clone()
    })?;
    for w in 0..warmup {
        writeln!(log, "warm-up pass {}/{warmup}", w + 1)?;
        for (class, prompt) in &warm {
            for (m, key) in modes.iter().zip(&keys) {
                one_request(cfg, key, &model, class, prompt, m)?;
            }
        }
    }
    // (config, class) → (tokens, seconds)
    let mut totals: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for r in 0..rounds {
        writeln!(log, "round {}/{rounds}", r + 1)?;
        for (class, prompt) in &measured {
            for (m, key) in modes.iter().zip(&keys) {
                let s = one_request(cfg, key, &model, class, prompt, m)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_warms_up_on_its_first_half_and_is_measured_on_the_rest() {
        let mix: Mix = [("a", "a0"), ("b", "b0"), ("a", "a1"), ("b", "b1")]
            .iter()
            .chain(&[("a", "a2"), ("a", "a3"), ("b", "b2")])
            .map(|(c, p)| (c.to_string(), p.to_string()))
            .collect();
        let (warm, measured) = split_mix(mix);
        let names = |v: &[(String, String)]| v.iter().map(|x| x.1.clone()).collect::<Vec<_>>();
        assert_eq!(names(&warm), ["a0", "b0", "a1"]);
        assert_eq!(names(&measured), ["b1", "a2", "a3", "b2"]);
    }
}
