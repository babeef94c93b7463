//! `specgate bench spec`: every prompt set × strategy × k against plain decoding, runs
//! interleaved per prompt so machine drift hits all alike. Reports tokens/s, the median
//! per-prompt speed-up over plain, α, tokens per target pass, c (one draft step's cost
//! relative to one plain target pass) and the formula's prediction
//! (1 − α^(k+1)) / ((1 − α)(k·c + 1)).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use specgate_strategies::{predicted_speedup, SpecStats, SuffixCache};

use crate::bench::median;
use crate::chat::ChatMessage;
use crate::generate::{generate, GenerateOutput, GenerateParams};
use crate::loaded::LoadedModel;
use crate::prompts::load_prompt_sets;
use crate::strategy::{BuildDrafter, DrafterConfig, StrategyKind, SUFFIX_MAX_DEPTH};
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
    pub exit_layer: usize,
    pub sampling: SamplingParams,
    /// A fixed verify-row price for the speculative runs (None: each run fits its own).
    pub row_cost: Option<f32>,
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct SpecRow {
    pub set: String,
    pub strategy: StrategyKind,
    pub k: KChoice,
    pub tokens_per_second: f64,
    pub plain_tokens_per_second: f64,
    pub speedup_median: f64,
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
    ratios: Vec<f64>,
}

pub fn bench_spec(cfg: &SpecBenchConfig, out: &mut dyn Write) -> anyhow::Result<Vec<SpecRow>> {
    let mut lm = LoadedModel::load(&cfg.model)?;
    let sets = load_prompt_sets(&cfg.prompt_dir)?;
    let dcfg = DrafterConfig {
        target_path: cfg.model.clone(),
        draft_model: cfg.draft_model.clone(),
        exit_layer: cfg.exit_layer,
        suffix_cache: None,
        seed: 0,
        medusa_heads: cfg.medusa_heads.clone(),
    };
    // Model drafters load weights once and serve every k. Suffix drafters get one cache per
    // k: a shared cache would hold this very prompt's output from the previous k's run and
    // report acceptance no real traffic sees.
    let mut drafters: Vec<(StrategyKind, Vec<crate::strategy::BoxedDrafter>)> = Vec::new();
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
    let params = |k: KChoice| GenerateParams {
        max_tokens: cfg.max_tokens,
        sampling: cfg.sampling,
        seed: 0,
        stop: vec![],
        max_draft_tokens: k.max(),
        adaptive_k: matches!(k, KChoice::Auto(_)),
        row_cost: cfg.row_cost,
    };
    let mut rows = Vec::new();
    for set in &sets {
        let mut cells: Vec<Vec<Cell>> = drafters
            .iter()
            .map(|_| cfg.ks.iter().map(|_| Cell::default()).collect())
            .collect();
        let (mut plain_tokens, mut plain_seconds) = (0usize, 0f64);
        for (n, prompt) in set.prompts.iter().take(cfg.prompts_per_set).enumerate() {
            let text = lm.chat_prompt(&[ChatMessage::new("user", prompt)])?;
            let ids = lm.tokenizer.encode(&text)?;
            let plain = generate(
                &mut lm.model,
                &lm.tokenizer,
                &ids,
                &params(KChoice::Fixed(0)),
                &mut *StrategyKind::Plain.build(&dcfg, &lm.tokenizer)?,
                |_| {},
            )?;
            plain_tokens += plain.generated_tokens;
            plain_seconds += plain.decode_time.as_secs_f64();
            for (d, (_, built)) in drafters.iter_mut().enumerate() {
                for (j, &k) in cfg.ks.iter().enumerate() {
                    let idx = j.min(built.len() - 1);
                    let drafter = &mut built[idx];
                    let o = generate(
                        &mut lm.model,
                        &lm.tokenizer,
                        &ids,
                        &params(k),
                        drafter.as_mut(),
                        |_| {},
                    )?;
                    let cell = &mut cells[d][j];
                    merge(&mut cell.stats, &o.stats);
                    cell.tokens += o.generated_tokens;
                    cell.seconds += o.decode_time.as_secs_f64();
                    cell.ratios.push(decode_tps(&o) / decode_tps(&plain));
                }
            }
            writeln!(
                out,
                "{} prompt {n}: plain {:.1} tok/s",
                set.name,
                decode_tps(&plain)
            )?;
        }
        let plain_tps = plain_tokens as f64 / plain_seconds.max(1e-9);
        // Seconds of one plain target pass, the unit of c.
        let pass = plain_seconds / plain_tokens.max(1) as f64;
        for (d, (kind, _)) in drafters.iter().enumerate() {
            for (j, &k) in cfg.ks.iter().enumerate() {
                let cell = &cells[d][j];
                let s = &cell.stats;
                let v = s.verify_time.as_secs_f64() / s.rounds.max(1) as f64 / pass;
                let c = if s.drafted == 0 {
                    0.0
                } else {
                    s.draft_time.as_secs_f64() / s.drafted as f64 / pass
                };
                // Drafts per round actually made (an adaptive k varies; lookups may find fewer).
                let mean_k = s.drafted as f64 / s.rounds.max(1) as f64;
                rows.push(SpecRow {
                    set: set.name.clone(),
                    strategy: *kind,
                    k,
                    tokens_per_second: cell.tokens as f64 / cell.seconds.max(1e-9),
                    plain_tokens_per_second: plain_tps,
                    speedup_median: median(&cell.ratios),
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
                });
            }
        }
    }
    Ok(rows)
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

const HEADER: [&str; 14] = [
    "set",
    "strategy",
    "k",
    "tok/s",
    "plain tok/s",
    "speed-up (median)",
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
