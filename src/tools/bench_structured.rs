//! `specgate bench structured`: what a grammar costs and what speculation under it earns, on
//! schema-shaped requests (extraction into a schema, tool calls). Each request runs, in
//! turn: plain decoding without its grammar, plain decoding with it (the masks' cost), and
//! each speculative configuration with it (forced tokens count as drafted and accepted).
//! Greedy; every speculative output is checked against constrained plain decoding's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use serde::Deserialize;
use serde_json::Value;
use specgate_strategies::{Drafter, PlainDrafter, TokenId};

use crate::constraint::tools::{call_grammar, offer_tools, ToolChoice, ToolSpec};
use crate::constraint::{GrammarSpec, Grammars};
use crate::drafting::answer_corpus::CorpusSource;
use crate::drafting::registry::{
    BoxedDrafter, BuildDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER,
};
use crate::engine::generate::{generate_constrained, GenerateOutput, GenerateParams};
use crate::model::chat_template::ChatMessage;
use crate::model::loaded::{chat_prompt, LoadedModel};
use crate::tools::bench_decode::median;

/// One request of the set: a prompt and either a schema or tools (called as required).
#[derive(Debug, Clone, Deserialize)]
pub struct BenchRequest {
    pub name: String,
    pub prompt: String,
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub tools: Vec<Value>,
}

pub struct StructuredBenchConfig {
    pub model: PathBuf,
    pub requests: PathBuf,
    /// Speculative configurations measured against constrained plain decoding.
    pub configs: Vec<(StrategyKind, usize)>,
    pub max_tokens: usize,
    pub repeats: usize,
}

/// Medians over requests and repeats of per-request ratios, and totals.
#[derive(Debug, Clone)]
pub struct ConfigRow {
    pub label: String,
    /// Generated tokens per second over the whole run.
    pub tokens_per_sec: f64,
    /// Median of this row's tokens/s over the baseline's, request by request.
    pub ratio: f64,
    pub baseline: &'static str,
    pub tokens_per_pass: f64,
    pub forced_share: f64,
    pub acceptance: f64,
    /// Outputs that differed from constrained plain decoding (greedy: should be 0).
    pub mismatches: usize,
    /// Microseconds of one mask (the grammar walked over the output alone).
    pub mask_micros: Option<f64>,
}

struct Totals {
    tokens: usize,
    secs: f64,
    passes: usize,
    drafted: u64,
    accepted: u64,
    forced: u64,
    ratios: Vec<f64>,
    mismatches: usize,
    mask_secs: f64,
    masks: usize,
}

impl Totals {
    fn new() -> Self {
        Self {
            tokens: 0,
            secs: 0.0,
            passes: 0,
            drafted: 0,
            accepted: 0,
            forced: 0,
            ratios: Vec::new(),
            mismatches: 0,
            mask_secs: 0.0,
            masks: 0,
        }
    }

    /// Decode only: every configuration of a request shares its prompt's pass.
    fn add(&mut self, o: &GenerateOutput) {
        self.tokens += o.generated_tokens.saturating_sub(1);
        self.secs += o.decode_time.as_secs_f64();
        self.passes += o.target_passes;
        self.drafted += o.stats.drafted;
        self.accepted += o.stats.accepted;
        self.forced += o.stats.forced;
    }
}

/// The request's prompt ids and grammar.
fn prepare(lm: &LoadedModel, r: &BenchRequest) -> anyhow::Result<(Vec<TokenId>, GrammarSpec)> {
    let mut messages = vec![ChatMessage::new("user", &r.prompt)];
    let spec = match (&r.schema, r.tools.is_empty()) {
        (Some(s), true) => GrammarSpec::JsonSchema(s.clone()),
        (None, false) => {
            let tools: Vec<ToolSpec> = r
                .tools
                .iter()
                .map(|t| ToolSpec {
                    name: t["name"].as_str().unwrap_or_default().to_string(),
                    description: t["description"].as_str().map(str::to_string),
                    parameters: t["parameters"].clone(),
                    strict: true,
                })
                .collect();
            messages = offer_tools(&messages, &tools);
            call_grammar(&tools, &ToolChoice::Required, false, None)?
                .context("tools without a grammar")?
        }
        _ => bail!("{}: give a schema or tools", r.name),
    };
    let text = chat_prompt(&lm.tokenizer, &messages)?;
    Ok((lm.tokenizer.encode_prompt(&text)?, spec))
}

fn drafters(
    model: &Path,
    lm: &LoadedModel,
    kinds: &[StrategyKind],
) -> anyhow::Result<Vec<BoxedDrafter>> {
    let cfg = DrafterConfig {
        target_path: model.to_path_buf(),
        draft_model: None,
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: None,
        corpus: CorpusSource::Default.load(model, &lm.tokenizer, 8)?,
        seed: 0,
        medusa_heads: None,
        eagle_layer: None,
    };
    kinds
        .iter()
        .map(|k| k.build(&cfg, &lm.tokenizer).map_err(anyhow::Error::from))
        .collect()
}

pub fn bench_structured(
    cfg: &StructuredBenchConfig,
    log: &mut dyn std::io::Write,
) -> anyhow::Result<Vec<ConfigRow>> {
    let requests: Vec<BenchRequest> =
        serde_json::from_str(&std::fs::read_to_string(&cfg.requests)?)?;
    let mut lm = LoadedModel::load(&cfg.model)?;
    let grammars = Grammars::new(Arc::clone(&lm.tokenizer), lm.model.config().vocab_size)?;
    let prepared = requests
        .iter()
        .map(|r| prepare(&lm, r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut free = Totals::new();
    let mut plain = Totals::new();
    let mut spec: Vec<Totals> = cfg.configs.iter().map(|_| Totals::new()).collect();
    let kinds: Vec<StrategyKind> = cfg.configs.iter().map(|c| c.0).collect();
    for repeat in 0..cfg.repeats {
        // Fresh drafters each repeat: a lookup must not recall the last repeat's answer.
        let mut ds = drafters(&cfg.model, &lm, &kinds)?;
        for ((ids, grammar), r) in prepared.iter().zip(&requests) {
            let mut run = |k: usize, d: &mut dyn Drafter, g: Option<&GrammarSpec>| {
                let grammar = g.map(|g| grammars.compile(g)).transpose()?;
                let params = GenerateParams::greedy(cfg.max_tokens, k);
                generate_constrained(
                    &mut lm.model,
                    &lm.tokenizer,
                    ids,
                    &params,
                    d,
                    grammar,
                    |_| {},
                )
                .map_err(anyhow::Error::from)
            };
            let unconstrained = run(0, &mut PlainDrafter, None)?;
            let base = run(0, &mut PlainDrafter, Some(grammar))?;
            free.add(&unconstrained);
            plain.add(&base);
            plain
                .ratios
                .push(decode_rate(&base) / decode_rate(&unconstrained));
            let mut g = grammars.compile(grammar)?;
            let t = std::time::Instant::now();
            for &tok in &base.token_ids {
                g.mask()?;
                g.consume(&[tok])?;
            }
            plain.mask_secs += t.elapsed().as_secs_f64();
            plain.masks += base.token_ids.len();
            for ((d, (kind, k)), t) in ds.iter_mut().zip(&cfg.configs).zip(&mut spec) {
                let o = run(*k, d.as_mut(), Some(grammar))?;
                t.add(&o);
                t.ratios.push(decode_rate(&o) / decode_rate(&base));
                if o.token_ids != base.token_ids {
                    t.mismatches += 1;
                    writeln!(
                        log,
                        "{} {kind} k={k}: differs from constrained plain",
                        r.name
                    )?;
                }
            }
            writeln!(
                log,
                "repeat {repeat} {}: {} tokens, {}",
                r.name, base.generated_tokens, base.text
            )?;
        }
    }
    let mut rows = vec![row("unconstrained plain", &free, "", 1.0)];
    let ratio = median(&plain.ratios);
    rows.push(row(
        "constrained plain",
        &plain,
        "unconstrained plain",
        ratio,
    ));
    for ((kind, k), t) in cfg.configs.iter().zip(&mut spec) {
        let ratio = median(&t.ratios);
        rows.push(row(
            &format!("constrained {kind} k={k}"),
            t,
            "constrained plain",
            ratio,
        ));
    }
    Ok(rows)
}

/// Tokens per second after the prompt's pass.
fn decode_rate(o: &GenerateOutput) -> f64 {
    o.generated_tokens.saturating_sub(1) as f64 / o.decode_time.as_secs_f64().max(1e-9)
}

fn row(label: &str, t: &Totals, baseline: &'static str, ratio: f64) -> ConfigRow {
    ConfigRow {
        label: label.to_string(),
        tokens_per_sec: t.tokens as f64 / t.secs.max(1e-9),
        ratio,
        baseline,
        tokens_per_pass: t.tokens as f64 / t.passes.max(1) as f64,
        forced_share: t.forced as f64 / t.drafted.max(1) as f64,
        acceptance: t.accepted as f64 / t.drafted.max(1) as f64,
        mismatches: t.mismatches,
        mask_micros: (t.masks > 0).then(|| t.mask_secs * 1e6 / t.masks as f64),
    }
}

pub fn markdown(rows: &[ConfigRow]) -> String {
    let mut s = String::from(
        "| configuration | decode tokens/s | median ratio | against | tokens/pass | forced/drafted | accepted/drafted | differs | mask µs |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {:.1} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
            r.label,
            r.tokens_per_sec,
            r.ratio,
            r.baseline,
            r.tokens_per_pass,
            r.forced_share,
            r.acceptance,
            r.mismatches,
            r.mask_micros.map_or("".into(), |m| format!("{m:.0}"))
        );
    }
    s
}
