//! `specgate bench …`: decode speed, speculative strategies over the prompt sets, and the
//! store's costs.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use specgate::drafting::registry::{self, Needs, StrategyKind};
use specgate::SamplingParams;

use crate::{resolve_model, row_cost_arg};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// What the store costs: key lookups cold and warm, admissions, history flush throughput
    /// with several writers at once.
    Store(crate::cli::store::BenchStoreArgs),
    /// Plain decode speed beside candle's quantized_llama, and the cost of verifying n tokens.
    Decode {
        #[arg(long)]
        model: Option<PathBuf>,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, default_value_t = 64)]
        tokens: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// cpu (beside candle-transformers), cuda, cuda:N or auto (the device's own report).
        #[arg(long, default_value = "cpu")]
        device: specgate::model::DeviceChoice,
    },
    /// Schema-shaped requests (extraction, tool calls): plain decoding without and with the
    /// grammar, and speculative configurations with it (greedy).
    Structured {
        #[arg(long)]
        model: Option<PathBuf>,
        #[arg(long, default_value = "tests/fixtures/structured/bench.json")]
        requests: PathBuf,
        /// Speculative configurations as strategy:k, comma-separated.
        #[arg(long, value_delimiter = ',', value_parser = config_arg,
              default_value = "ngram:4,suffix:4,suffix-medusa:4,medusa-tree:8")]
        configs: Vec<(StrategyKind, usize)>,
        #[arg(long, default_value_t = 160)]
        max_tokens: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
    /// Every prompt set x strategy x k against plain decoding, interleaved.
    Spec {
        #[arg(long)]
        model: Option<PathBuf>,
        /// Folder with code_edit.jsonl, rag.jsonl, creative.jsonl.
        #[arg(long, default_value = "tests/fixtures/prompts")]
        prompts: PathBuf,
        /// Comma-separated strategies (default: every registered one but plain that the
        /// arguments can build: draft with --draft-model, the Medusa ones where heads exist).
        #[arg(long, value_delimiter = ',')]
        strategies: Vec<StrategyKind>,
        /// k values: numbers, and `auto` (adaptive up to 8) or `autoN`.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,6,8,auto")]
        k: Vec<specgate::tools::bench_spec::KChoice>,
        #[arg(long, default_value_t = 10)]
        prompts_per_set: usize,
        #[arg(long, default_value_t = 64)]
        max_tokens: usize,
        #[arg(long)]
        draft_model: Option<PathBuf>,
        /// Medusa heads' directory for the medusa strategies (default: the shipped heads).
        #[arg(long)]
        medusa_heads: Option<PathBuf>,
        /// The EAGLE layer's directory for the eagle strategy (default: the shipped layer).
        #[arg(long)]
        eagle_layer: Option<PathBuf>,
        /// Answer corpus for the suffix strategies (default: the shipped one for the model).
        #[arg(long)]
        corpus: Option<PathBuf>,
        /// Suffix drafting without the answer corpus.
        #[arg(long)]
        no_corpus: bool,
        #[arg(long, default_value_t = specgate::drafting::registry::DEFAULT_EXIT_LAYER)]
        exit_layer: usize,
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        #[command(flatten)]
        penalties: crate::cli::penalty_args::PenaltyArgs,
        /// Price verify rows at this share of a plain pass instead of measuring it (0: as if
        /// rows were free, as on an idle GPU; Medusa trees then take their whole budget).
        #[arg(long, value_parser = row_cost_arg)]
        row_cost: Option<f32>,
        /// Comma-separated prompt sets to run (default: all of them).
        #[arg(long, value_delimiter = ',', value_parser = set_arg)]
        sets: Vec<String>,
        /// Runs of every set, each with fresh drafters and suffix caches; speed-ups are
        /// medians over prompts and over repeats.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeats: u32,
        /// Where spec.md and spec.csv go (git-ignored).
        #[arg(long, default_value = "results")]
        out: PathBuf,
        /// The target's device: cpu, cuda, cuda:N or auto.
        #[arg(long, default_value = "cpu")]
        device: specgate::model::DeviceChoice,
    },
}

/// Every registered strategy but plain (the baseline every one is measured against) whose
/// needs these arguments meet: draft with a draft model, the Medusa ones where heads exist.
pub fn buildable(
    model: &std::path::Path,
    draft_model: bool,
    medusa_heads: Option<&std::path::Path>,
    eagle_layer: Option<&std::path::Path>,
) -> Vec<StrategyKind> {
    let heads = medusa_heads
        .map(PathBuf::from)
        .unwrap_or_else(|| specgate::heads::bundle::default_dir(model));
    let eagle = eagle_layer
        .map(PathBuf::from)
        .unwrap_or_else(|| specgate::heads::eagle_bundle::default_dir(model));
    let has = |needs| match needs {
        Needs::Nothing | Needs::EarlyExitLayers => true,
        Needs::DraftModel => draft_model,
        Needs::MedusaHeads => heads.join("heads.json").exists(),
        Needs::EagleLayer => eagle.join("eagle.json").exists(),
    };
    registry::REGISTRY
        .iter()
        .filter(|r| r.kind != StrategyKind::Plain && has(r.needs))
        .map(|r| r.kind)
        .collect()
}

fn config_arg(s: &str) -> Result<(StrategyKind, usize), String> {
    let (kind, k) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected strategy:k"))?;
    let kind: StrategyKind = kind.parse().map_err(|e| format!("{e}"))?;
    let k: usize = k.parse().map_err(|e| format!("{s:?}: k: {e}"))?;
    Ok((kind, k))
}

fn set_arg(s: &str) -> Result<String, String> {
    let known = specgate::tools::prompts::SET_NAMES;
    if known.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "unknown prompt set {s:?} (known: {})",
            known.join(", ")
        ))
    }
}

pub fn run(which: BenchCommand) -> Result<()> {
    match which {
        BenchCommand::Store(args) => crate::cli::store::run_bench(args),
        BenchCommand::Decode {
            model,
            runs,
            tokens,
            json,
            device,
        } => {
            let path = resolve_model(model)?;
            let out = &mut std::io::stdout();
            let report = match device {
                specgate::model::DeviceChoice::Cpu => serde_json::to_string_pretty(
                    &specgate::tools::bench_decode::bench_decode(&path, runs, tokens, out)?,
                )?,
                d => serde_json::to_string_pretty(&specgate::tools::bench_device::bench_device(
                    &path, d, runs, tokens, out,
                )?)?,
            };
            if let Some(p) = json {
                std::fs::write(&p, report)?;
            }
            Ok(())
        }
        BenchCommand::Structured {
            model,
            requests,
            configs,
            max_tokens,
            repeats,
        } => {
            let cfg = specgate::tools::bench_structured::StructuredBenchConfig {
                model: resolve_model(model)?,
                requests,
                configs,
                max_tokens,
                repeats: repeats.max(1),
            };
            let rows =
                specgate::tools::bench_structured::bench_structured(&cfg, &mut std::io::stderr())?;
            println!("{}", specgate::tools::bench_structured::markdown(&rows));
            Ok(())
        }
        BenchCommand::Spec {
            model,
            prompts,
            mut strategies,
            k,
            prompts_per_set,
            max_tokens,
            draft_model,
            medusa_heads,
            eagle_layer,
            corpus,
            no_corpus,
            exit_layer,
            temperature,
            penalties,
            row_cost,
            sets,
            repeats,
            out,
            device,
        } => {
            let model = resolve_model(model)?;
            if strategies.is_empty() {
                strategies = buildable(
                    &model,
                    draft_model.is_some(),
                    medusa_heads.as_deref(),
                    eagle_layer.as_deref(),
                );
            }
            let cfg = specgate::tools::bench_spec::SpecBenchConfig {
                model,
                prompt_dir: prompts,
                strategies,
                ks: k,
                prompts_per_set,
                max_tokens,
                draft_model,
                medusa_heads,
                eagle_layer,
                corpus: specgate::drafting::answer_corpus::CorpusSource::from_flags(
                    corpus, no_corpus,
                ),
                exit_layer,
                sampling: SamplingParams {
                    temperature,
                    ..SamplingParams::greedy()
                },
                row_cost,
                penalties: penalties.penalties(),
                device,
                sets,
                repeats: repeats as usize,
            };
            let rows = specgate::tools::bench_spec::bench_spec(&cfg, &mut std::io::stderr())?;
            println!("{}", specgate::tools::bench_spec::markdown(&rows));
            specgate::tools::bench_spec::write_results(&out, &rows)?;
            eprintln!("wrote {}/spec.md and spec.csv", out.display());
            Ok(())
        }
    }
}
