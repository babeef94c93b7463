//! `specgate build-corpus`: the model's greedy answers to generic prompts, written as the
//! answer corpus every tenant's suffix drafter consults (`specgate::drafting::answer_corpus`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde::Deserialize;
use specgate::drafting::answer_corpus::{self, CorpusHeader};
use specgate::model::loaded::LoadedModel;

#[derive(Args)]
pub struct BuildCorpusArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// JSON lines with "class" and "prompt" (run through the chat template). The default,
    /// the Medusa heads' training prompts, shares no topic with the benchmark sets.
    #[arg(long, default_value = "strategies/data/medusa/train_prompts.jsonl")]
    prompts: PathBuf,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Where the corpus goes (default: strategies/data/corpus/<model file stem>.jsonl).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Deserialize)]
struct PromptLine {
    #[serde(default)]
    class: String,
    prompt: String,
}

pub fn run(model: PathBuf, args: BuildCorpusArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.prompts)
        .with_context(|| format!("reading {}", args.prompts.display()))?;
    let prompts = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let p: PromptLine = serde_json::from_str(l)?;
            Ok((p.class, p.prompt))
        })
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("parsing {}", args.prompts.display()))?;
    let mut lm = LoadedModel::load(&model)?;
    let log = &mut std::io::stderr();
    writeln!(log, "answering {} prompts", prompts.len())?;
    let start = Instant::now();
    let answers = answer_corpus::generate_answers(&mut lm, &prompts, args.max_tokens, log)?;
    let header = CorpusHeader {
        format: answer_corpus::FORMAT.to_string(),
        target: model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        target_sha256: specgate::model::fetch::model_sha256(&model)?,
        max_tokens: args.max_tokens,
        prompts: args.prompts.display().to_string(),
    };
    let out = args
        .out
        .unwrap_or_else(|| answer_corpus::default_path(&model));
    answer_corpus::write(&out, &header, &answers)?;
    writeln!(
        log,
        "wrote {} answers to {} in {:.0} s",
        answers.len(),
        out.display(),
        start.elapsed().as_secs_f64()
    )?;
    Ok(())
}
