//! `specgate calibrate-policy`: measure, for one model, what each strategy accepts and costs
//! on each workload class's prompt set, in the learner's own units, and write it as the
//! model's priors ([`specgate_policies::priors`]). The shipped priors for the default model
//! were made with it on the bench prompt sets; the evaluation sets are never used for it.
//!
//! Each strategy runs as the learner would plan it: drafters that price their own drafts at
//! a fixed cap of `k_max`, the others adaptive up to `k_max`.

use std::io::Write;
use std::path::PathBuf;

use specgate_policies::{ArmPrior, Observation, Priors, WorkloadClass};

use crate::drafting::answer_corpus::CorpusSource;
use crate::drafting::registry::StrategyKind;
use crate::tools::bench_spec::{bench_spec, KChoice, SpecBenchConfig, SpecRow};
use crate::SamplingParams;

pub struct CalibrateConfig {
    pub model: PathBuf,
    pub prompt_dir: PathBuf,
    pub strategies: Vec<StrategyKind>,
    pub prompts_per_set: usize,
    pub max_tokens: usize,
    pub k_max: usize,
    pub draft_model: Option<PathBuf>,
    pub medusa_heads: Option<PathBuf>,
    pub corpus: CorpusSource,
    pub exit_layer: usize,
}

/// Run every strategy over every class's prompts and return the model's priors.
pub fn calibrate(cfg: &CalibrateConfig, log: &mut dyn Write) -> anyhow::Result<Priors> {
    let (own, rest): (Vec<_>, Vec<_>) = cfg
        .strategies
        .iter()
        .copied()
        .filter(|s| *s != StrategyKind::Plain)
        .partition(|s| s.prices_own_drafts());
    let mut rows = Vec::new();
    for (group, k) in [
        (own, KChoice::Fixed(cfg.k_max)),
        (rest, KChoice::Auto(cfg.k_max)),
    ] {
        if group.is_empty() {
            continue;
        }
        rows.extend(bench_spec(&bench_config(cfg, group, k), log)?);
    }
    let name = cfg
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut priors = Priors {
        model: name,
        model_sha256: crate::model::fetch::model_sha256(&cfg.model)?,
        measured: format!(
            "specgate calibrate-policy on {}: {} prompts per class, {} tokens, greedy, k_max {}",
            cfg.prompt_dir.display(),
            cfg.prompts_per_set,
            cfg.max_tokens,
            cfg.k_max
        ),
        classes: Default::default(),
    };
    for row in &rows {
        let Ok(class) = row.set.parse::<WorkloadClass>() else {
            writeln!(log, "skipped prompt set {}: not a workload class", row.set)?;
            continue;
        };
        let same_set: Vec<&SpecRow> = rows.iter().filter(|r| r.set == row.set).collect();
        let arm = ArmPrior::measured(&observation(row, step_line(&same_set)));
        // Four significant digits: the runs' noise is larger.
        let round = |x: f64| format!("{x:.4e}").parse().unwrap_or(x);
        let arm = ArmPrior {
            alpha: round(arm.alpha),
            draft_cost: round(arm.draft_cost),
            drafts_per_round: arm.drafts_per_round.map(round),
            pass_factor: arm.pass_factor.map(round),
        };
        priors.insert(class, row.strategy, arm);
    }
    Ok(priors)
}

fn bench_config(
    cfg: &CalibrateConfig,
    strategies: Vec<StrategyKind>,
    k: KChoice,
) -> SpecBenchConfig {
    SpecBenchConfig {
        model: cfg.model.clone(),
        prompt_dir: cfg.prompt_dir.clone(),
        strategies,
        ks: vec![k],
        prompts_per_set: cfg.prompts_per_set,
        max_tokens: cfg.max_tokens,
        draft_model: cfg.draft_model.clone(),
        medusa_heads: cfg.medusa_heads.clone(),
        eagle_layer: None,
        device: Default::default(),
        corpus: cfg.corpus.clone(),
        exit_layer: cfg.exit_layer,
        sampling: SamplingParams::greedy(),
        row_cost: None,
        penalties: Default::default(),
        sets: vec![],
        repeats: 1,
    }
}

/// The step-cost line (t0, t1: seconds per pass = t0 + t1 · tokens) through one set's
/// passes: plain decoding's (1 token) and each strategy's verify passes (1 + its drafts per
/// round), by least squares. Each self-pricing drafter's passes are then measured against it,
/// as the engine measures a request's against its own fit.
fn step_line(rows: &[&SpecRow]) -> Option<(f64, f64)> {
    let plain = rows.first()?.plain_tokens_per_second;
    let mut points = vec![(1.0, 1.0 / plain.max(1e-9))];
    for r in rows.iter().filter(|r| r.stats.rounds > 0) {
        let rounds = r.stats.rounds as f64;
        let tokens = 1.0 + r.stats.drafted as f64 / rounds;
        points.push((tokens, r.stats.verify_time.as_secs_f64() / rounds));
    }
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let var: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    if var < 1e-9 {
        return None;
    }
    let t1 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum::<f64>() / var;
    Some((my - t1 * mx, t1))
}

/// A cell's summed counts as one observation of an idle engine whose step line is `step`.
fn observation(row: &SpecRow, step: Option<(f64, f64)>) -> Observation {
    let s = &row.stats;
    Observation {
        strategy: row.strategy,
        rounds: s.rounds,
        drafted: s.drafted,
        accepted: s.accepted,
        judged: s.verified,
        draft_secs: s.draft_time.as_secs_f64(),
        verify_secs: s.verify_time.as_secs_f64(),
        sequences: 1,
        step,
    }
}
