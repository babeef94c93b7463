//! `specgate bench spec`: every prompt set × strategy × k against plain decoding, runs
//! interleaved per prompt so machine drift hits all alike, `repeats` times. Reports tokens/s,
//! the median per-prompt speed-up over plain, the median per-repeat speed-up of the set's
//! tokens/s, α, tokens per target pass, c (one draft step's cost
//! relative to one plain target pass) and the formula's prediction
//! (1 − α^(k+1)) / ((1 − α)(k·c + 1)).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use specgate_strategies::{predicted_speedup, SpecStats, SuffixCache};

use crate::drafting::registry::{BuildDrafter, DrafterConfig, StrategyKind, SUFFIX_MAX_DEPTH};
use crate::engine::generate::{generate, GenerateOutput, GenerateParams};
use crate::model::loaded::LoadedModel;
use crate::tools::bench_decode::median;
use crate::tools::prompts::load_prompt_sets;
use crate::SamplingParams;

/// A k setting: fixed, or chosen per round by the adaptive controller up to a maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KChoice {
    Fixed(usize),
    Auto(usize),
}

impl std::fmt::Display for KChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed(k) => write!(f, "{k}"),
            Self::Auto(k) => write!(f, "auto≤{k}"),
        }
    }
}

impl std::str::FromStr for KChoice {
    type Err = String;

    /// "4" is fixed k = 4; "auto" is adaptive up to 8; "auto6" adaptive up to 6.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("k must be a number, auto or autoN, not {s:?}");
        match s.strip_prefix("auto") {
            Some("") => Ok(Self::Auto(8)),
            Some(n) => n.parse().map(Self::Auto).map_err(|_| bad()),
            None => s.parse().map(Self::Fixed).map_err(|_| bad()),
        }
    }
}

impl KChoice {
    fn max(self) -> usize {
        match self {
            Self::Fixed(k) | Self::Auto(k) => k,
        }
    }
}

pub struct SpecBenchConfig {
    pub model: PathBuf,
    pub prompt_dir: PathBuf,
    pub strategies: Vec<StrategyKind>,
    pub ks: Vec<KChoice>,
    pub prompts_per_set: usize,
    pub max_tokens: usize,
    pub draft_model: Option<PathBuf>,
    /// Medusa heads' directory (None: the shipped heads for the model).
    pub medusa_heads: Option<PathBuf>,
    /// The EAGLE layer's directory (None: the shipped layer for the model).
    pub eagle_layer: Option<PathBuf>,
    /// The target's device.
    pub device: crate::model::DeviceChoice,
    pub corpus: crate::drafting::answer_corpus::CorpusSource,
    pub exit_layer: usize,
    pub sampling: SamplingParams,
    /// A fixed verify-row price for the speculative runs (None: each run fits its own).
    pub row_cost: Option<f32>,
    /// Applied to every row, plain decoding's included.
    pub penalties: specgate_strategies::Penalties,
    /// Prompt sets to run (empty: all of them).
    pub sets: Vec<String>,
    /// Runs of every set, each with fresh drafters and caches.
    pub repeats: usize,
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct SpecRow {
    pub set: String,
    pub strategy: StrategyKind,
    pub k: KChoice,
    pub tokens_per_second: f64,
    pub plain_tokens_per_second: f64,
    /// The median over prompts of each prompt's speed-up: what a typical request gains.
    pub speedup_median: f64,
    /// The median over repeats of the set's tokens/s over plain's: what throughput on the
    /// set gains.
    pub set_speedup_median: f64,
    pub alpha: f64,
    pub acceptance_rate: f64,
    pub tokens_per_pass: f64,
    pub c: f64,
    pub predicted_speedup: f64,
    /// One verify pass (k + 1 rows) relative to one plain pass: the formula takes it as 1.
    pub verify_cost: f64,
    /// tokens per pass / (k·c + verify_cost): the formula with the measured verify cost.
    pub predicted_with_verify_cost: f64,
    /// Per draft position i: the share of rounds that accepted it (Medusa: per head).
    pub accepted_per_position: Vec<f64>,
    /// The cell's counts and times summed over prompts and repeats.
    pub stats: SpecStats,
}

fn decode_tps(o: &GenerateOutput) -> f64 {
    o.generated_tokens as f64 / o.decode_time.as_secs_f64().max(1e-9)
}

/// Accumulates one (set, strategy, k) cell over prompts.
#[derive(Default)]
struct Cell {
    stats: SpecStats,
    tokens: usize,
    seconds: f64,
    /// Per prompt: its tokens/s over plain's on the same prompt.
    ratios: Vec<f64>,
    /// Per repeat: the set's tokens/s over plain's on the set.
    set_ratios: Vec<f64>,
}

type BuiltDrafters = Vec<(StrategyKind, Vec<crate::drafting::registry::BoxedDrafter>)>;

/// Every strategy's drafters: model drafters once (they serve every k), suffix drafters one
/// per k with a fresh cache. A cache shared across k, or kept from an earlier repeat, would
/// hold this very prompt's output from the previous run and report acceptance no real
/// traffic sees.
fn build_drafters(
    cfg: &SpecBenchConfig,
    dcfg: &DrafterConfig,
    lm: &LoadedModel,
) -> anyhow::Result<BuiltDrafters> {
    let mut drafters = Vec::new();
    for &kind in &cfg.strategies {
        let copies = if kind.uses_suffix_cache() {
            cfg.ks.len()
        } else {
            1
        };
        let mut built = Vec::with_capacity(copies);
        for _ in 0..copies {
            let own = DrafterConfig {
                suffix_cache: Some(Arc::new(Mutex::new(SuffixCache::new(
                    SUFFIX_MAX_DEPTH,
                    1 << 16,
                )))),
                ..dcfg.clone()
            };
            built.push(kind.build(&own, &lm.tokenizer)?);
        }
        drafters.push((kind, built));
    }
    Ok(drafters)
}

pub fn bench_spec(cfg: &SpecBenchConfig, out: &mut dyn Write) -> anyhow::Result<Vec<SpecRow>> {
    let mut lm = LoadedModel::load_on(&cfg.model, cfg.device)?;
    let sets: Vec<_> = load_prompt_sets(&cfg.prompt_dir)?
        .into_iter()
        .filter(|s| cfg.sets.is_empty() || cfg.sets.contains(&s.name))
        .filter(|s| !s.prompts.is_empty() && cfg.prompts_per_set > 0)
        .collect();
    let dcfg = DrafterConfig {
        target_path: cfg.model.clone(),
        draft_model: cfg.draft_model.clone(),
        exit_layer: cfg.exit_layer,
        suffix_cache: None,
        corpus: cfg
            .corpus
            .load(&cfg.model, &lm.tokenizer, SUFFIX_MAX_DEPTH)?,
        seed: 0,
        medusa_heads: cfg.medusa_heads.clone(),
        eagle_layer: cfg.eagle_layer.clone(),
    };
    let params = |k: KChoice| GenerateParams {
        max_tokens: cfg.max_tokens,
        sampling: cfg.sampling,
        seed: 0,
        stop: vec![],
        max_draft_tokens: k.max(),
        adaptive_k: matches!(k, KChoice::Auto(_)),
        row_cost: cfg.row_cost,
        penalties: cfg.penalties.clone(),
    };
    let mut rows = Vec::new();
    for set in &sets {
        let grid = || -> Vec<Vec<Cell>> {
            cfg.strategies
                .iter()
                .map(|_| cfg.ks.iter().map(|_| Cell::default()).collect())
                .collect()
        };
        let mut cells = grid();
        let (mut plain_tokens, mut plain_seconds) = (0usize, 0f64);
        for repeat in 0..cfg.repeats.max(1) {
            let mut drafters = build_drafters(cfg, &dcfg, &lm)?;
            // This repeat's totals: its set-level speed-ups.
            let mut this = grid();
            let (mut this_tokens, mut this_seconds) = (0usize, 0f64);
            for (n, prompt) in set.prompts.iter().take(cfg.prompts_per_set).enumerate() {
                let ids = lm.prompt_ids(prompt)?;
                let plain = generate(
                    &mut lm.model,
                    &lm.tokenizer,
                    &ids,
                    &params(KChoice::Fixed(0)),
                    &mut *StrategyKind::Plain.build(&dcfg, &lm.tokenizer)?,
                    |_| {},
                )?;
                this_tokens += plain.generated_tokens;
                this_seconds += plain.decode_time.as_secs_f64();
                for (d, (_, built)) in drafters.iter_mut().enumerate() {
                    for (j, &k) in cfg.ks.iter().enumerate() {
                        let idx = j.min(built.len() - 1);
                        let o = generate(
                            &mut lm.model,
                            &lm.tokenizer,
                            &ids,
                            &params(k),
                            built[idx].as_mut(),
                            |_| {},
                        )?;
                        this[d][j].add(&o, decode_tps(&o) / decode_tps(&plain));
                    }
                }
                writeln!(
                    out,
                    "{} repeat {repeat} prompt {n}: plain {:.1} tok/s",
                    set.name,
                    decode_tps(&plain)
                )?;
            }
            let this_plain = this_tokens as f64 / this_seconds.max(1e-9);
            for (into, rep) in cells.iter_mut().flatten().zip(this.iter().flatten()) {
                into.absorb(rep, rep.tokens_per_second() / this_plain);
            }
            plain_tokens += this_tokens;
            plain_seconds += this_seconds;
        }
        let plain_tps = plain_tokens as f64 / plain_seconds.max(1e-9);
        // Seconds of one plain target pass, the unit of c.
        let pass = plain_seconds / plain_tokens.max(1) as f64;
        for (d, kind) in cfg.strategies.iter().enumerate() {
            for (j, &k) in cfg.ks.iter().enumerate() {
                rows.push(cells[d][j].row(set.name.clone(), *kind, k, plain_tps, pass));
            }
        }
    }
    Ok(rows)
}

impl Cell {
    /// One prompt's run, at `ratio` times plain's tokens/s.
    fn add(&mut self, o: &GenerateOutput, ratio: f64) {
        merge(&mut self.stats, &o.stats);
        self.tokens += o.generated_tokens;
        self.seconds += o.decode_time.as_secs_f64();
        self.ratios.push(ratio);
    }

    /// A repeat's cell, whose set ran at `set_ratio` times plain's tokens/s.
    fn absorb(&mut self, rep: &Cell, set_ratio: f64) {
        merge(&mut self.stats, &rep.stats);
        self.tokens += rep.tokens;
        self.seconds += rep.seconds;
        self.ratios.extend_from_slice(&rep.ratios);
        self.set_ratios.push(set_ratio);
    }

    fn tokens_per_second(&self) -> f64 {
        self.tokens as f64 / self.seconds.max(1e-9)
    }

    /// The table row; `pass` is one plain target pass in seconds.
    fn row(
        &self,
        set: String,
        strategy: StrategyKind,
        k: KChoice,
        plain: f64,
        pass: f64,
    ) -> SpecRow {
        let s = &self.stats;
        let v = s.verify_time.as_secs_f64() / s.rounds.max(1) as f64 / pass;
        let c = if s.drafted == 0 {
            0.0
        } else {
            s.draft_time.as_secs_f64() / s.drafted as f64 / pass
        };
        // Drafts per round actually made (an adaptive k varies; lookups may find fewer).
        let mean_k = s.drafted as f64 / s.rounds.max(1) as f64;
        SpecRow {
            set,
            strategy,
            k,
            tokens_per_second: self.tokens_per_second(),
            plain_tokens_per_second: plain,
            speedup_median: median(&self.ratios),
            set_speedup_median: median(&self.set_ratios),
            alpha: s.alpha(),
            acceptance_rate: s.acceptance_rate(),
            tokens_per_pass: s.tokens_per_pass(),
            c,
            predicted_speedup: predicted_speedup(s.alpha(), k.max(), c),
            verify_cost: v,
            predicted_with_verify_cost: s.tokens_per_pass() / (mean_k * c + v),
            accepted_per_position: s
                .accepted_per_pos
                .iter()
                .map(|&a| a as f64 / s.rounds.max(1) as f64)
                .collect(),
            stats: s.clone(),
        }
    }
}

fn merge(into: &mut SpecStats, s: &SpecStats) {
    into.rounds += s.rounds;
    into.drafted += s.drafted;
    into.accepted += s.accepted;
    into.verified += s.verified;
    into.committed += s.committed;
    into.draft_time += s.draft_time;
    into.verify_time += s.verify_time;
    into.drafter_failures += s.drafter_failures;
    if into.accepted_per_pos.len() < s.accepted_per_pos.len() {
        into.accepted_per_pos.resize(s.accepted_per_pos.len(), 0);
    }
    for (a, b) in into.accepted_per_pos.iter_mut().zip(&s.accepted_per_pos) {
        *a += b;
    }
}

const HEADER: [&str; 15] = [
    "set",
    "strategy",
    "k",
    "tok/s",
    "plain tok/s",
    "speed-up (median)",
    "set speed-up (median)",
    "alpha",
    "acceptance",
    "tokens/pass",
    "c",
    "predicted speed-up",
    "verify cost",
    "predicted with verify cost",
    "accepted per position",
];

fn cells(r: &SpecRow) -> Vec<String> {
    vec![
        r.set.clone(),
        r.strategy.to_string(),
        r.k.to_string(),
        format!("{:.1}", r.tokens_per_second),
        format!("{:.1}", r.plain_tokens_per_second),
        format!("{:.2}", r.speedup_median),
        format!("{:.2}", r.set_speedup_median),
        format!("{:.3}", r.alpha),
        format!("{:.3}", r.acceptance_rate),
        format!("{:.3}", r.tokens_per_pass),
        format!("{:.3}", r.c),
        format!("{:.2}", r.predicted_speedup),
        format!("{:.2}", r.verify_cost),
        format!("{:.2}", r.predicted_with_verify_cost),
        r.accepted_per_position
            .iter()
            .map(|a| format!("{a:.2}"))
            .collect::<Vec<_>>()
            .join("/"),
    ]
}

pub fn markdown(rows: &[SpecRow]) -> String {
    let mut s = format!(
        "| {} |\n|{}\n",
        HEADER.join(" | "),
        "---|".repeat(HEADER.len())
    );
    for r in rows {
        s += &format!("| {} |\n", cells(r).join(" | "));
    }
    s
}

pub fn csv(rows: &[SpecRow]) -> String {
    let mut s = HEADER.join(",") + "\n";
    for r in rows {
        s += &(cells(r).join(",") + "\n");
    }
    s
}

/// Write `spec.md` and `spec.csv` under `dir` (created if missing).
pub fn write_results(dir: &Path, rows: &[SpecRow]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("spec.md"), markdown(rows))?;
    std::fs::write(dir.join("spec.csv"), csv(rows))
}
