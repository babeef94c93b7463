//! The `specgate` command line: the binary's edge, where errors become one-line messages.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

mod cli;
use serde_json::json;
use specgate::drafting::registry::{BuildDrafter, DrafterConfig, StrategyKind, SUFFIX_MAX_DEPTH};
use specgate::engine::generate::{generate, GenerateParams};
use specgate::model::chat_template::ChatMessage;
use specgate::model::fetch::{
    default_model_path, ensure_default_model, ensure_model, known_model, models_dir, KNOWN_MODELS,
};
use specgate::model::loaded::LoadedModel;
use specgate::SamplingParams;

#[derive(Parser)]
#[command(
    name = "specgate",
    version,
    about = "LLM gateway with exact speculative decoding"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible API (fetches the default model on first use).
    Serve(crate::cli::gateway::ServeArgs),
    /// Generate text for one prompt, streaming it to stdout.
    Generate(GenerateArgs),
    /// Load a running server with a mix of workload classes, speculation on and off.
    Loadgen(crate::cli::gateway::LoadgenArgs),
    /// Soak a running server: N clients for M minutes of mixed traffic, then check for 5xx,
    /// leaked KV cache, lost history and memory growth (exit 1 on any).
    Soak(crate::cli::gateway::SoakArgs),
    /// Train Medusa heads for the model by self-distillation (CPU), with a held-out report.
    TrainHeads(crate::cli::train_heads::TrainHeadsArgs),
    /// Train the EAGLE draft layer for the model on its own greedy continuations (CPU), with
    /// a held-out report.
    TrainEagle(crate::cli::train_eagle::TrainEagleArgs),
    /// Calibrate Medusa heads (the temperatures and coverage tree drafting ranks candidates
    /// by) on the held-out continuations of their training prompts.
    CalibrateHeads(crate::cli::calibrate_heads::CalibrateHeadsArgs),
    /// Measure what each strategy accepts and costs per workload class on a model, and write
    /// them as the learner's priors for it (beside the model, where `serve` finds them).
    CalibratePolicy(crate::cli::calibrate_policy::CalibratePolicyArgs),
    /// Compile every CUDA kernel with NVRTC for the given architectures (no GPU needed; the
    /// build needs `--features cuda` and libnvrtc).
    CheckKernels(crate::cli::check_kernels::CheckKernelsArgs),
    /// Write the answer corpus suffix drafting consults for every tenant: the model's greedy
    /// answers to generic prompts.
    BuildCorpus(crate::cli::build_corpus::BuildCorpusArgs),
    /// Download a model specgate knows by name if it is not there yet, and print its path:
    /// the default SmolLM2-135M-Instruct Q4_1, or `gemma3-270m` (Gemma 3 270M Q4_K_M).
    FetchModel {
        /// smollm2-135m (the default) or gemma3-270m.
        name: Option<String>,
        /// Where to put it (default: models/<its file name>).
        #[arg(long)]
        dest: Option<PathBuf>,
    },
    /// Routing policies as TOML files (the server must be stopped: the store is locked).
    Policy {
        #[command(subcommand)]
        which: crate::cli::gateway::PolicyCommand,
    },
    /// The store: `migrate` (create or upgrade its schema), `copy` (move a deployment's
    /// state, e.g. from sled to PostgreSQL).
    Store {
        #[command(subcommand)]
        which: crate::cli::store::StoreCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: crate::cli::bench::BenchCommand,
    },
}

#[derive(Args)]
struct GenerateArgs {
    /// A llama-architecture GGUF file (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    #[command(flatten)]
    penalties: cli::penalty_args::PenaltyArgs,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop when this string appears (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Draft strategy: plain, ngram, suffix, draft, early-exit, medusa, medusa-tree or
    /// suffix-medusa.
    #[arg(long, default_value = "plain")]
    strategy: StrategyKind,
    /// Most drafted tokens per target pass (ignored by plain).
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// The draft model for --strategy draft (a GGUF with the target's vocabulary).
    #[arg(long)]
    draft_model: Option<PathBuf>,
    /// Medusa heads' directory for --strategy medusa (default: the shipped heads).
    #[arg(long)]
    medusa_heads: Option<PathBuf>,
    /// The EAGLE layer's directory for --strategy eagle (default: the shipped layer).
    #[arg(long)]
    eagle_layer: Option<PathBuf>,
    /// Answer corpus for the suffix strategies (default: the shipped one for the model).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Suffix drafting without the answer corpus.
    #[arg(long)]
    no_corpus: bool,
    /// Choose k each round (up to --k) from the measured acceptance and costs, plain
    /// decoding included.
    #[arg(long)]
    adaptive_k: bool,
    /// Price verify rows at this share of a plain pass instead of measuring it (0: as if rows
    /// were free, as on an idle GPU).
    #[arg(long, value_parser = row_cost_arg)]
    row_cost: Option<f32>,
    /// Layers the early-exit draft keeps (of the target's).
    #[arg(long, default_value_t = specgate::drafting::registry::DEFAULT_EXIT_LAYER)]
    exit_layer: usize,
    /// The target's device: cpu, cuda, cuda:N or auto (a GPU when one is found).
    #[arg(long, env = "SPECGATE_DEVICE", default_value = "cpu")]
    device: specgate::model::DeviceChoice,
}

/// A verify row's price: a finite share of a plain pass, 0 or more.
pub(crate) fn row_cost_arg(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a share of a plain pass (a number, 0 or more)"
        )),
    }
}

/// The model to use: the given path, or the default one, fetched on first use.
pub(crate) fn resolve_model(model: Option<PathBuf>) -> Result<PathBuf> {
    match model {
        Some(p) if p.exists() => Ok(p),
        Some(p) => bail!("model file {} does not exist", p.display()),
        None => Ok(ensure_default_model(
            &default_model_path(),
            &mut std::io::stderr(),
        )?),
    }
}

fn run_generate(args: GenerateArgs) -> Result<()> {
    let path = resolve_model(args.model)?;
    let mut lm = LoadedModel::load_on(&path, args.device)
        .with_context(|| format!("loading {}", path.display()))?;
    let text = if args.chat {
        lm.chat_prompt(&[ChatMessage::new("user", &args.prompt)])?
    } else {
        args.prompt.clone()
    };
    let prompt = lm.tokenizer.encode_prompt(&text)?;
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
        },
        seed: args.seed,
        stop: args.stop,
        max_draft_tokens: if args.strategy == StrategyKind::Plain {
            0
        } else {
            args.k
        },
        adaptive_k: args.adaptive_k,
        row_cost: args.row_cost,
        penalties: args.penalties.penalties(),
    };
    let cfg = DrafterConfig {
        target_path: path.clone(),
        draft_model: args.draft_model.clone(),
        exit_layer: args.exit_layer,
        suffix_cache: None,
        corpus: specgate::drafting::answer_corpus::CorpusSource::from_flags(
            args.corpus.clone(),
            args.no_corpus,
        )
        .load(&path, &lm.tokenizer, SUFFIX_MAX_DEPTH)?,
        seed: args.seed,
        medusa_heads: args.medusa_heads.clone(),
        eagle_layer: args.eagle_layer.clone(),
    };
    let mut drafter = args.strategy.build(&cfg, &lm.tokenizer)?;
    let json = args.json;
    let mut stdout = std::io::stdout();
    let out = generate(
        &mut lm.model,
        &lm.tokenizer,
        &prompt,
        &params,
        drafter.as_mut(),
        |piece| {
            if !json {
                let _ = stdout.write_all(piece.as_bytes());
                let _ = stdout.flush();
            }
        },
    )?;
    if json {
        let v = json!({
            "text": out.text,
            "token_ids": out.token_ids,
            "prompt_tokens": out.prompt_tokens,
            "generated_tokens": out.generated_tokens,
            "tokens_per_second": out.tokens_per_second(),
            "target_passes": out.target_passes,
            "finish_reason": out.finish_reason,
            "strategy": args.strategy.name(),
            "k": params.max_draft_tokens,
            "drafted": out.stats.drafted,
            "accepted": out.stats.accepted,
            "acceptance_rate": out.stats.acceptance_rate(),
            "alpha": out.stats.alpha(),
            "tokens_per_pass": out.stats.tokens_per_pass(),
            "accepted_per_position": out.stats.accepted_per_pos,
            "draft_seconds": out.stats.draft_time.as_secs_f64(),
            "verify_seconds": out.stats.verify_time.as_secs_f64(),
            "drafter_failures": out.stats.drafter_failures,
        });
        println!("{v}");
    } else {
        println!();
        eprintln!(
            "{:.1} tokens/s, {} prompt tokens, {} generated tokens",
            out.tokens_per_second(),
            out.prompt_tokens,
            out.generated_tokens
        );
    }
    Ok(())
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => {
            crate::cli::gateway::run_serve(resolve_model(args.model.clone())?, args)
        }
        Command::Policy { which } => crate::cli::gateway::run_policy(which),
        Command::Store { which } => crate::cli::store::run(which),
        Command::Bench { which } => crate::cli::bench::run(which),
        Command::Loadgen(args) => crate::cli::gateway::run_loadgen(args),
        Command::Soak(args) => crate::cli::gateway::run_soak(args),
        Command::TrainHeads(args) => {
            crate::cli::train_heads::run(resolve_model(args.model.clone())?, args)
        }
        Command::TrainEagle(args) => {
            crate::cli::train_eagle::run(resolve_model(args.model.clone())?, args)
        }
        Command::CalibrateHeads(args) => {
            crate::cli::calibrate_heads::run(resolve_model(args.model.clone())?, args)
        }
        Command::CalibratePolicy(args) => {
            crate::cli::calibrate_policy::run(resolve_model(args.model.clone())?, args)
        }
        Command::CheckKernels(args) => crate::cli::check_kernels::run(args),
        Command::BuildCorpus(args) => {
            crate::cli::build_corpus::run(resolve_model(args.model.clone())?, args)
        }
        Command::Generate(args) => run_generate(args),
        Command::FetchModel { name, dest } => {
            let name = name.as_deref().unwrap_or("default");
            let Some(model) = known_model(name) else {
                let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.name).collect();
                bail!("no model called {name:?} (known: {})", names.join(", "));
            };
            let dest = dest.unwrap_or_else(|| models_dir().join(model.file));
            let path = ensure_model(&model, &dest, &mut std::io::stderr())?;
            println!("{}", path.display());
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes (some carry a backtrace after a newline).
            let msg: Vec<String> = e
                .chain()
                .map(|c| c.to_string().lines().next().unwrap_or_default().to_string())
                .collect();
            eprintln!("error: {}", msg.join(": "));
            ExitCode::FAILURE
        }
    }
}
