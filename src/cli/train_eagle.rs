//! `specgate train-eagle`: the EAGLE draft layer for a target, trained on the target's own
//! greedy continuations of a prompt file (held-out split by prompt), written beside the
//! shipped strategies' data with a report.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use specgate::heads::bundle::DRAFT_VOCAB;
use specgate::heads::draft_vocab::DraftVocab;
use specgate::heads::eagle_bundle::{self, EagleConfig};
use specgate::heads::eagle_data;
use specgate::heads::eagle_loss::LossWeights;
use specgate::heads::eagle_trainer::{EagleTrainee, SeqInputs};
use specgate::heads::eagle_training::{self, EagleSchedule};
use specgate::heads::training;
use specgate::model::loaded::LoadedModel;
use specgate_strategies::eagle::EagleShape;

#[derive(Args)]
pub struct TrainEagleArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// JSON lines with a "prompt" field (run through the chat template).
    #[arg(long, default_value = "strategies/data/medusa/train_prompts.jsonl")]
    prompts: PathBuf,
    /// Where the layer goes (default: strategies/data/eagle/<model file stem>/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Generated continuations, reused when present (git-ignored).
    #[arg(long, default_value = "target/eagle-train")]
    work: PathBuf,
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// More continuations per training prompt whose first tokens are sampled (temperature
    /// 1, top-p 0.95) before decoding turns greedy: states the greedy path never visits.
    #[arg(long, default_value_t = 0)]
    sampled_variants: usize,
    /// Most tokens a sampled-prefix continuation samples (each draws 1..=this).
    #[arg(long, default_value_t = 8)]
    max_sampled_prefix: usize,
    /// The shipped layer's recipe: 1600 steps of 4 sequences (4 epochs of the default
    /// prompts), every loss term at weight 1, two unrolled steps (see
    /// strategies/data/eagle/README.md for what each choice measured).
    #[arg(long, default_value_t = 1600)]
    steps: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    #[arg(long, default_value_t = 5e-4)]
    lr: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 200)]
    eval_every: usize,
    /// Weight of the target's whole distribution at each position (beside its token's, 1).
    #[arg(long, default_value_t = 1.0)]
    distribution_weight: f64,
    /// Weight of the target's next hidden state (smooth L1) at each position.
    #[arg(long, default_value_t = 1.0)]
    hidden_weight: f64,
    /// Steps unrolled per position in training: step s reads the layer's own step s − 1
    /// output, as the tree's depth-s drafts do.
    #[arg(long, default_value_t = 2)]
    unroll: usize,
    /// Every n-th prompt is held out.
    #[arg(long, default_value_t = 8)]
    holdout_every: usize,
    /// Use only every n-th prompt of the file (a quicker, smaller run).
    #[arg(long, default_value_t = 1)]
    every: usize,
    /// Regenerate the continuations even when the work directory has them.
    #[arg(long)]
    fresh: bool,
    /// Only fit the calibration (temperatures, coverage) of the layer already in --out on
    /// the held-out continuations, and rewrite its eagle.json; the weights stay.
    #[arg(long)]
    calibrate_only: bool,
    /// Start from this trained layer (a directory holding eagle.json and eagle.safetensors for
    /// the same target) instead of the target's last decoder layer: more steps, other
    /// prompts (a tenant's own), or more data on top of the shipped layer.
    #[arg(long)]
    resume: Option<PathBuf>,
}

/// Held-out positions the calibration is fitted on (as the Medusa heads' 4096 pairs).
const CALIBRATION_POSITIONS: usize = 4096;

pub fn run(model: PathBuf, args: TrainEagleArgs) -> Result<()> {
    let log = &mut std::io::stderr();
    std::fs::create_dir_all(&args.work)?;
    let data_path = match args.sampled_variants {
        0 => args.work.join(format!("data-{}.safetensors", args.every)),
        v => (args.work).join(format!(
            "data-{}-v{v}-p{}.safetensors",
            args.every, args.max_sampled_prefix
        )),
    };
    let mut lm = LoadedModel::load(&model)?;
    let t = Instant::now();
    let seqs = if data_path.exists() && !args.fresh {
        writeln!(log, "reusing {}", data_path.display())?;
        eagle_data::load(&data_path)?
    } else {
        let prompts = crate::cli::train_heads::read_prompts(&args.prompts, &lm)?;
        let prompts: Vec<_> = prompts.into_iter().step_by(args.every.max(1)).collect();
        writeln!(log, "generating continuations of {} prompts", prompts.len())?;
        let variants = training::Variants {
            extra: args.sampled_variants,
            max_prefix: args.max_sampled_prefix,
            seed: args.seed,
        };
        let seqs = eagle_data::generate(
            &mut lm,
            &prompts,
            args.max_new_tokens,
            variants,
            args.holdout_every,
        )?;
        eagle_data::save(&data_path, &seqs)?;
        seqs
    };
    let seconds_data = t.elapsed().as_secs_f64();
    let cfg = lm.model.config().clone();
    let frozen =
        training::frozen_head(&model, &DraftVocab::first(DRAFT_VOCAB.min(cfg.vocab_size)))?;
    let (train, held) = eagle_data::split(seqs, args.holdout_every);
    let inputs = |s: &[eagle_data::EagleSequence]| -> Result<Vec<SeqInputs>> {
        let mut out = Vec::new();
        for s in s {
            out.extend(SeqInputs::of(s, &frozen)?);
        }
        Ok(out)
    };
    let (train, held) = (inputs(&train)?, inputs(&held)?);
    writeln!(
        log,
        "{} training sequences, {} held out",
        train.len(),
        held.len()
    )?;
    let shape = EagleShape {
        hidden: cfg.hidden,
        heads: cfg.n_heads,
        kv_heads: cfg.n_kv_heads,
        head_dim: cfg.head_dim,
        ffn: cfg.ffn,
        rope_base: cfg.rope_base,
        rms_eps: cfg.rms_eps,
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| eagle_bundle::default_dir(&model));
    if args.calibrate_only {
        let mut config = eagle_bundle::read_config(&out, &model)?;
        let trainee = EagleTrainee::from_weights(&eagle_bundle::load_weights(&out, &config)?)?;
        let (t, c) = eagle_training::calibrate(&trainee, &held, &frozen, CALIBRATION_POSITIONS)?;
        writeln!(log, "temperatures {t:.3?}, coverage {c:.3}")?;
        (config.temperatures, config.coverage) = (t, Some(c));
        eagle_bundle::write_config(&out, &config)?;
        return Ok(());
    }
    let (trainee, init_layer) = match &args.resume {
        Some(dir) => {
            let from = eagle_bundle::read_config(dir, &model)?;
            let weights = eagle_bundle::load_weights(dir, &from)?;
            writeln!(log, "resuming from {}", dir.display())?;
            (EagleTrainee::from_weights(&weights)?, from.init_layer)
        }
        None => {
            let layer = cfg.n_layers.saturating_sub(1);
            (EagleTrainee::from_target(&model, shape, layer)?, layer)
        }
    };
    let schedule = EagleSchedule {
        steps: args.steps,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
        eval_every: args.eval_every,
        loss: LossWeights {
            distribution: args.distribution_weight,
            hidden: args.hidden_weight,
        },
        unroll: args.unroll.max(1),
    };
    let mut report = eagle_training::train(&trainee, &train, &held, &frozen, schedule, &mut |l| {
        eprintln!("{l}")
    })?;
    report.seconds_data = seconds_data;
    report.resumed_from = args.resume.as_ref().map(|d| d.display().to_string());
    let (temperatures, coverage) =
        eagle_training::calibrate(&trainee, &held, &frozen, CALIBRATION_POSITIONS)?;
    writeln!(
        log,
        "temperatures {temperatures:.3?}, coverage {coverage:.3}"
    )?;
    let config = EagleConfig::new(
        shape,
        cfg.vocab_size,
        &model,
        init_layer,
        temperatures,
        coverage,
    )?;
    eagle_bundle::save(&out, &trainee.weights()?, &config)?;
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(out.join("report.json"), json + "\n")
        .with_context(|| format!("{}", out.display()))?;
    writeln!(
        log,
        "held-out {}; wrote {}",
        eagle_training::brief(&report.held_out),
        out.display()
    )?;
    Ok(())
}
