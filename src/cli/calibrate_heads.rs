//! `specgate calibrate-heads`: calibrate existing Medusa heads for candidate trees (and, if
//! asked, rank their draft vocabulary) without touching their weights.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use specgate::heads::bundle::{self, HeadsConfig};
use specgate::heads::calibration::{self, Calibration};
use specgate::heads::draft_vocab::{count_tokens, DraftVocab, DraftVocabFile};
use specgate::heads::training::{self, Trainer};
use specgate::model::loaded::LoadedModel;

use crate::cli::train_heads::{log_calibration, read_prompts, CALIBRATION_PAIRS};

#[derive(Args)]
pub struct CalibrateHeadsArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The heads to calibrate (default: the shipped heads for the model).
    #[arg(long)]
    heads: Option<PathBuf>,
    /// The prompt file the heads were trained from: its held-out prompts are continued.
    #[arg(long, default_value = "strategies/data/medusa/train_prompts.jsonl")]
    prompts: PathBuf,
    /// Every n-th prompt is held out (as in train-heads).
    #[arg(long, default_value_t = 8)]
    holdout_every: usize,
    #[arg(long, default_value_t = 160)]
    max_new_tokens: usize,
    /// First rank the draft vocabulary by how often the target produces each token in its
    /// greedy continuations of the training prompts, and write it beside the heads
    /// (`draft_vocab.json`); the calibration is then for that vocabulary.
    #[arg(long)]
    rank_vocab: bool,
    /// With --rank-vocab: continue every n-th training prompt only (quicker, a coarser
    /// ranking).
    #[arg(long, default_value_t = 1)]
    rank_every: usize,
}

/// `specgate calibrate-heads`: fit existing heads' temperatures and measure their coverage on
/// the held-out continuations of their training prompts, and write both into `heads.json` and
/// `report.json` (the weights stay as they are); with `--rank-vocab`, rank their draft
/// vocabulary first.
pub fn run(model: PathBuf, args: CalibrateHeadsArgs) -> Result<()> {
    let log = &mut std::io::stderr();
    let dir = args
        .heads
        .clone()
        .unwrap_or_else(|| bundle::default_dir(&model));
    let bundle = bundle::load(&dir, &model)?;
    let mut lm = LoadedModel::load(&model)?;
    let prompts = read_prompts(&args.prompts, &lm)?;
    let ranked = if args.rank_vocab {
        Some(rank_vocab(&mut lm, &prompts, &args, log)?)
    } else {
        None
    };
    let draft_vocab = ranked
        .as_ref()
        .map_or_else(|| bundle.draft_vocab.clone(), |(v, _)| v.clone());
    writeln!(
        log,
        "continuing the held-out prompts of {}",
        args.prompts.display()
    )?;
    let held = training::collect_held_out(
        &mut lm,
        &prompts,
        args.max_new_tokens,
        bundle.heads.num_heads(),
        args.holdout_every,
    )?;
    let frozen = training::frozen_head(&model, &draft_vocab)?;
    let trainer = Trainer::from_heads(&bundle.heads)?;
    let calibration = calibration::calibrate(&trainer, &held, &frozen, CALIBRATION_PAIRS)?;
    log_calibration(log, &calibration)?;
    let mut cfg = HeadsConfig {
        temperatures: calibration.temperatures.clone(),
        coverage: calibration.coverage.clone(),
        ..bundle.config
    };
    if let Some((_, file)) = &ranked {
        bundle::save_draft_vocab(&dir, file)?;
        cfg.draft_vocab = Some(bundle::DRAFT_VOCAB_FILE.into());
    }
    bundle::write_config(&dir, &cfg)?;
    writeln!(
        log,
        "calibration written to {}",
        dir.join("heads.json").display()
    )?;
    add_to_report(&dir.join("report.json"), &calibration)?;
    println!("{}", serde_json::to_string_pretty(&calibration)?);
    Ok(())
}

/// A draft vocabulary ranked on the target's greedy continuations of the training prompts.
fn rank_vocab(
    lm: &mut LoadedModel,
    prompts: &[Vec<u32>],
    args: &CalibrateHeadsArgs,
    log: &mut impl Write,
) -> Result<(DraftVocab, DraftVocabFile)> {
    writeln!(
        log,
        "ranking the draft vocabulary on the continuations of every {} training prompt(s)",
        args.rank_every.max(1)
    )?;
    let tokens = training::training_tokens(
        lm,
        prompts,
        args.max_new_tokens,
        args.holdout_every,
        args.rank_every,
    )?;
    let vocab = lm.model.config().vocab_size;
    let ranked = DraftVocab::ranked(
        &count_tokens(tokens.iter().copied(), vocab),
        bundle::DRAFT_VOCAB,
    );
    writeln!(log, "ranked on {} tokens", tokens.len())?;
    let file = DraftVocabFile {
        ids: ranked.ids().to_vec(),
        ranked_on: tokens.len() as u64,
        source: format!(
            "greedy continuations of every {} training prompt(s) of {}",
            args.rank_every.max(1),
            args.prompts.display()
        ),
    };
    Ok((ranked, file))
}

/// Record `calibration` in the heads' training report, when they have one.
fn add_to_report(path: &Path, calibration: &Calibration) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let mut report: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    if let Some(map) = report.as_object_mut() {
        map.insert("calibration".into(), serde_json::to_value(calibration)?);
    }
    std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")?;
    Ok(())
}
