//! `specgate loadgen --scenario cold|shift`: the learned plan against plain decoding and fixed
//! configurations on traffic a new user sends, each configuration as tenants of its own.
//!
//! - `cold`: every prompt of the sets once, one request at a time, configurations interleaved
//!   per prompt: a new tenant's first requests of each class on a server that has served none.
//! - `shift`: phases through one server: code edits one at a time; a ramp of mixed traffic to
//!   4, 8 and 16 concurrent requests; creative and chat one at a time; code edits again at a
//!   concurrency of 2. Each (configuration, phase) is a new tenant, so no suffix cache holds
//!   an earlier answer to a prompt it is measured on; the learner's class pools carry what it
//!   learned from phase to phase.
//!
//! Fixed configurations' requests teach the learner too (a client's choice is evidence), so
//! with `baseline_url` plain decoding and the fixed configurations run on a second server and
//! the learned plan's server learns only from its own traffic, as a new deployment would.

use serde::Serialize;

use crate::tools::bench_policy::Mix;
use crate::tools::loadgen::{
    create_tenant, interleave, model_id, one_request, run_level, LoadgenConfig, LoadgenError,
    Sample, SpecMode,
};
use crate::tools::prompts::{load_prompt_sets, PromptSet};
pub use crate::tools::scenario_report::{markdown, per_request_ratios};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Cold,
    Shift,
    /// Six-turn conversations over a long system prompt (src/tools/conversations).
    ChatTurns,
    /// Eight tool-call steps over a long system prompt with tools (src/tools/conversations).
    Agent,
    /// One tenant floods, another sends one short request at a time; weights and tiers
    /// (src/tools/noisy_neighbour).
    NoisyNeighbour,
}

impl Scenario {
    /// The conversation scenarios' kind (they run in `tools::conversations`).
    pub fn conversation(self) -> Option<crate::tools::conversations::Kind> {
        use crate::tools::conversations::Kind;
        match self {
            Scenario::ChatTurns => Some(Kind::ChatTurns),
            Scenario::Agent => Some(Kind::Agent),
            Scenario::Cold | Scenario::Shift | Scenario::NoisyNeighbour => None,
        }
    }
}

/// Requests at one concurrency.
#[derive(Debug, Clone)]
pub struct Level {
    pub concurrency: usize,
    pub mix: Mix,
}

#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub levels: Vec<Level>,
}

pub struct ScenarioConfig {
    /// The learned plan's server (`url`) and the request shape.
    pub base: LoadgenConfig,
    pub admin_token: String,
    /// Where plain decoding and the fixed configurations run (None: the same server).
    pub baseline_url: Option<String>,
    pub fixed: Vec<(String, usize)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseRow {
    pub config: String,
    pub phase: String,
    pub tokens: usize,
    pub seconds: f64,
    pub tokens_per_second: f64,
    pub errors: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestRow {
    pub config: String,
    pub phase: String,
    /// The request's place in its phase (the same prompt for every configuration where
    /// requests run one at a time; completion order otherwise).
    pub index: usize,
    pub concurrency: usize,
    pub sample: Sample,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ScenarioRun {
    pub scenario: String,
    pub rows: Vec<PhaseRow>,
    pub requests: Vec<RequestRow>,
}

pub fn label(m: &SpecMode) -> String {
    match m {
        SpecMode::Server => "learned".into(),
        SpecMode::Off => "plain".into(),
        SpecMode::Fixed(s, k) => format!("{s}:{k}"),
    }
}

/// A set's prompts `from..to` (clamped), as (class, prompt).
fn slice(sets: &[PromptSet], name: &str, from: usize, to: usize) -> Mix {
    sets.iter()
        .filter(|s| s.name == name)
        .flat_map(|s| s.prompts.iter().take(to).skip(from))
        .map(|p| (name.to_string(), p.clone()))
        .collect()
}

/// The scenario's phases over the prompt sets.
pub fn phases(scenario: Scenario, sets: &[PromptSet]) -> Result<Vec<Phase>, LoadgenError> {
    let one = |name: &str, concurrency, mix: Mix| Phase {
        name: name.to_string(),
        levels: vec![Level { concurrency, mix }],
    };
    let all = interleave(sets)?;
    Ok(match scenario {
        Scenario::Cold => vec![one("cold", 1, all)],
        Scenario::Shift => {
            let code = slice(sets, "code_edit", 0, usize::MAX);
            let mut free: Mix = interleave(
                &sets
                    .iter()
                    .filter(|s| s.name == "creative" || s.name == "chat")
                    .cloned()
                    .collect::<Vec<_>>(),
            )?;
            free.truncate(20);
            let ramp = [4usize, 8, 16]
                .iter()
                .scan(0usize, |at, &c| {
                    let mix: Mix = all.iter().cycle().skip(*at).take(c).cloned().collect();
                    *at += c;
                    Some(Level {
                        concurrency: c,
                        mix,
                    })
                })
                .collect();
            vec![
                one("code edits, 1 at a time", 1, code.clone()),
                Phase {
                    name: "mixed ramp to 16".into(),
                    levels: ramp,
                },
                one("creative and chat, 1 at a time", 1, free),
                one("code edits, 2 at a time", 2, code),
            ]
        }
        Scenario::ChatTurns | Scenario::Agent | Scenario::NoisyNeighbour => {
            return Err(LoadgenError::Protocol(
                "this scenario has no phases of prompt sets (a module of its own runs it)".into(),
            ))
        }
    })
}

/// Run the scenario: every configuration through every phase.
pub fn run(
    cfg: &ScenarioConfig,
    scenario: Scenario,
    log: &mut dyn std::io::Write,
) -> Result<ScenarioRun, LoadgenError> {
    let sets = load_prompt_sets(&cfg.base.prompt_dir)?;
    let phases = phases(scenario, &sets)?;
    let mut modes = vec![SpecMode::Server, SpecMode::Off];
    modes.extend(
        cfg.fixed
            .iter()
            .map(|(s, k)| SpecMode::Fixed(s.clone(), *k)),
    );
    let url_of = |m: &SpecMode| match (m, &cfg.baseline_url) {
        (SpecMode::Server, _) | (_, None) => cfg.base.url.clone(),
        (_, Some(u)) => u.clone(),
    };
    if cfg.baseline_url.is_none() {
        writeln!(
            log,
            "scenario: plain and the fixed configurations share the learned plan's server, and \
             their requests teach its learner too (--baseline-url keeps them apart)"
        )?;
    }
    let run_id = crate::clock::unix_now();
    let tenant = |m: &SpecMode, phase: usize| {
        let name = format!("scenario-{run_id}-p{phase}-{}", label(m).replace(':', "-"));
        create_tenant(&url_of(m), &cfg.admin_token, &name)
    };
    let probe = create_tenant(
        &cfg.base.url,
        &cfg.admin_token,
        &format!("scenario-{run_id}-model"),
    )?;
    let model = model_id(&LoadgenConfig {
        key: probe,
        ..cfg.base.clone()
    })?;
    let mut out = ScenarioRun {
        scenario: format!("{scenario:?}").to_lowercase(),
        ..Default::default()
    };
    for (p, phase) in phases.iter().enumerate() {
        writeln!(log, "phase {}: {}", p + 1, phase.name)?;
        let keys = modes
            .iter()
            .map(|m| tenant(m, p))
            .collect::<Result<Vec<_>, _>>()?;
        let mut totals: Vec<(usize, f64, usize)> = vec![(0, 0.0, 0); modes.len()];
        let mut index = 0;
        for (l, level) in phase.levels.iter().enumerate() {
            let ctx = Ctx {
                cfg,
                model: &model,
                modes: &modes,
                keys: &keys,
                url_of: &url_of,
            };
            let got = if level.concurrency <= 1 {
                ctx.interleaved(&level.mix)
            } else {
                ctx.one_after_another(level, l % 2 == 1)
            };
            for (m, (samples, errors, secs)) in got.into_iter().enumerate() {
                let t = &mut totals[m];
                t.0 += samples.iter().map(|s| s.tokens).sum::<usize>();
                t.1 += secs;
                t.2 += errors;
                for (i, sample) in samples.into_iter().enumerate() {
                    out.requests.push(RequestRow {
                        config: label(&modes[m]),
                        phase: phase.name.clone(),
                        index: index + i,
                        concurrency: level.concurrency,
                        sample,
                    });
                }
            }
            index += level.mix.len();
        }
        for (m, (tokens, seconds, errors)) in totals.into_iter().enumerate() {
            let row = PhaseRow {
                config: label(&modes[m]),
                phase: phase.name.clone(),
                tokens,
                seconds,
                tokens_per_second: tokens as f64 / seconds.max(1e-9),
                errors,
            };
            writeln!(
                log,
                "  {:<18} {:>7.1} tok/s  ({} errors)",
                row.config, row.tokens_per_second, errors
            )?;
            out.rows.push(row);
        }
    }
    Ok(out)
}

/// What one phase's requests need.
struct Ctx<'a> {
    cfg: &'a ScenarioConfig,
    model: &'a str,
    modes: &'a [SpecMode],
    keys: &'a [String],
    url_of: &'a dyn Fn(&SpecMode) -> String,
}

/// Per configuration: its samples (in the mix's order for one at a time), errors, seconds.
type Got = Vec<(Vec<Sample>, usize, f64)>;

impl Ctx<'_> {
    fn base(&self, m: &SpecMode) -> LoadgenConfig {
        LoadgenConfig {
            url: (self.url_of)(m),
            ..self.cfg.base.clone()
        }
    }

    /// One request at a time, every configuration on each prompt before the next (the order
    /// rotating), so a noisy machine's drift hits all alike. A failed request counts as an
    /// error and leaves a zero-token sample, so indices still pair prompts.
    fn interleaved(&self, mix: &Mix) -> Got {
        let mut got: Got = vec![(Vec::new(), 0, 0.0); self.modes.len()];
        for (i, (class, prompt)) in mix.iter().enumerate() {
            for j in 0..self.modes.len() {
                let m = (i + j) % self.modes.len();
                let mode = &self.modes[m];
                let r = one_request(
                    &self.base(mode),
                    &self.keys[m],
                    self.model,
                    class,
                    prompt,
                    mode,
                );
                let slot = &mut got[m];
                match r {
                    Ok(s) => {
                        slot.2 += s.e2e;
                        slot.0.push(s);
                    }
                    Err(e) => {
                        eprintln!("scenario: request failed: {e}");
                        slot.1 += 1;
                        slot.0.push(Sample::failed(class));
                    }
                }
            }
        }
        got
    }

    /// Each configuration runs the level's requests at its concurrency in turn (in reverse
    /// order on alternate levels); its time is the level's wall time.
    fn one_after_another(&self, level: &Level, reverse: bool) -> Got {
        let mut got: Got = vec![(Vec::new(), 0, 0.0); self.modes.len()];
        let mut order: Vec<usize> = (0..self.modes.len()).collect();
        if reverse {
            order.reverse();
        }
        for m in order {
            let mode = &self.modes[m];
            let (samples, errors, wall) = run_level(
                &self.base(mode),
                &self.keys[m],
                self.model,
                &level.mix,
                level.concurrency,
                level.mix.len(),
                mode,
            );
            got[m] = (samples, errors, wall.as_secs_f64());
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets() -> Vec<PromptSet> {
        ["code_edit", "rag", "creative", "chat"]
            .iter()
            .map(|n| PromptSet {
                name: n.to_string(),
                prompts: (0..10).map(|i| format!("{n}{i}")).collect(),
            })
            .collect()
    }

    #[test]
    fn the_shift_scenario_moves_from_code_to_load_to_free_text_and_back() {
        let p = phases(Scenario::Shift, &sets()).expect("phases");
        assert_eq!(p.len(), 4);
        assert!(p[0].levels[0].mix.iter().all(|(c, _)| c == "code_edit"));
        let ramp: Vec<usize> = p[1].levels.iter().map(|l| l.concurrency).collect();
        assert_eq!(ramp, [4, 8, 16]);
        // The ramp's requests are distinct prompts of every class.
        let prompts: Vec<&String> = p[1]
            .levels
            .iter()
            .flat_map(|l| &l.mix)
            .map(|x| &x.1)
            .collect();
        let mut unique = prompts.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), prompts.len());
        assert!(p[2].levels[0]
            .mix
            .iter()
            .all(|(c, _)| c == "creative" || c == "chat"));
        assert_eq!(p[2].levels[0].mix.len(), 20);
        assert_eq!(p[3].levels[0].concurrency, 2);
    }
}
