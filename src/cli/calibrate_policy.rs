//! `specgate calibrate-policy`: the learner's measured priors for a model.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use specgate::drafting::answer_corpus::CorpusSource;

#[derive(Args)]
pub struct CalibratePolicyArgs {
    /// The model to measure (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Folder with one prompt set per workload class (code_edit, rag, creative, chat).
    #[arg(long, default_value = "tests/fixtures/prompts")]
    prompts: PathBuf,
    /// Where the priors go (default: beside the model, `<model>.priors.toml`, where `serve`
    /// finds them).
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, default_value_t = 10)]
    prompts_per_set: usize,
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// The drafts' cap, as the policies' k_max.
    #[arg(long, default_value_t = 8)]
    k_max: usize,
    #[arg(long)]
    draft_model: Option<PathBuf>,
    #[arg(long)]
    medusa_heads: Option<PathBuf>,
    /// Measure only these strategies (default: every one the model can draft with), e.g. a
    /// strategy added after the priors were written.
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<specgate::drafting::registry::StrategyKind>,
    #[arg(long)]
    corpus: Option<PathBuf>,
    #[arg(long)]
    no_corpus: bool,
    #[arg(long, default_value_t = specgate::drafting::registry::DEFAULT_EXIT_LAYER)]
    exit_layer: usize,
}

pub fn run(model: PathBuf, args: CalibratePolicyArgs) -> Result<()> {
    let strategies = if args.strategies.is_empty() {
        crate::cli::bench::buildable(
            &model,
            args.draft_model.is_some(),
            args.medusa_heads.as_deref(),
            None,
        )
    } else {
        args.strategies
    };
    let out = args
        .out
        .unwrap_or_else(|| specgate::gateway::priors::beside_model(&model));
    let cfg = specgate::tools::calibrate_policy::CalibrateConfig {
        model,
        prompt_dir: args.prompts,
        strategies,
        prompts_per_set: args.prompts_per_set,
        max_tokens: args.max_tokens,
        k_max: args.k_max,
        draft_model: args.draft_model,
        medusa_heads: args.medusa_heads,
        corpus: CorpusSource::from_flags(args.corpus, args.no_corpus),
        exit_layer: args.exit_layer,
    };
    let priors = specgate::tools::calibrate_policy::calibrate(&cfg, &mut std::io::stderr())?;
    let text = format!(
        "# The learner's priors for {}.\n\
         # Per workload class and strategy: alpha (accepted per judged position, as the\n\
         # learner counts them), draft_cost (per round for drafters that price their own\n\
         # drafts, else per drafted token; a share of a verify pass), drafts_per_round and\n\
         # pass_factor (their verify passes over the step-cost line's time for them).\n\
         # Written by `specgate calibrate-policy`; see docs/policies.md.\n{}",
        priors.model,
        priors.to_toml()?
    );
    std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
    println!("{}", out.display());
    Ok(())
}
