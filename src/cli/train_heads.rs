//! `specgate train-heads`: the command around `specgate::heads::training` — prompts in, heads and
//! a training report out, resumable from its work directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use clap::Args;
use specgate::heads::bundle::{self, HeadsConfig};
use specgate::heads::calibration::{self, Calibration};
use specgate::heads::draft_vocab::{count_tokens, DraftVocab, DraftVocabFile};
use specgate::heads::training::{self, HeadsData, TrainReport, Trainer};
use specgate::model::loaded::LoadedModel;

#[derive(Args)]
pub struct TrainHeadsArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// JSON lines with a "prompt" field (run through the chat template).
    #[arg(long, default_value = "strategies/data/medusa/train_prompts.jsonl")]
    prompts: PathBuf,
    /// Where the heads go (default: strategies/data/medusa/<model file stem>/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Generated data and checkpoints (resumable; git-ignored).
    #[arg(long, default_value = "target/medusa-train")]
    work: PathBuf,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    #[arg(long, default_value_t = 160)]
    max_new_tokens: usize,
    #[arg(long, default_value_t = 5000)]
    steps: usize,
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Report held-out accuracy every n steps.
    #[arg(long, default_value_t = 1000)]
    eval_every: usize,
    /// Every n-th sequence is held out for the accuracy report.
    #[arg(long, default_value_t = 8)]
    holdout_every: usize,
    /// Extra continuations per training prompt that sample their first tokens (temperature 1,
    /// top-p 0.95) before turning greedy: more, and more varied, training states (the
    /// default, 1, is what the shipped heads were trained with).
    #[arg(long, default_value_t = 1)]
    sampled_variants: usize,
    /// Most tokens a sampled-prefix continuation samples (each draws 1..=this).
    #[arg(long, default_value_t = 24)]
    max_sampled_prefix: usize,
    /// Which token ids the heads draft from: the first ids (`first`: BPE merge order, a
    /// general frequency order) or the most frequent in the training continuations
    /// (`ranked`). Ranking pays when the training prompts are the traffic the heads will
    /// serve: on held-out prompts of the same file it raised the chain length from 0.719 to
    /// 0.793, but on the shipped bench sets, whose text differs, tokens per pass fell 1-3%.
    #[arg(long, value_enum, default_value_t = VocabChoice::First)]
    draft_vocab: VocabChoice,
    /// Start over instead of resuming from the work directory.
    #[arg(long)]
    fresh: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum VocabChoice {
    Ranked,
    First,
}

pub(crate) fn read_prompts(path: &Path, lm: &LoadedModel) -> Result<Vec<Vec<u32>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("line {}", i + 1))?;
        let prompt = v["prompt"]
            .as_str()
            .with_context(|| format!("line {}: no \"prompt\"", i + 1))?;
        out.push(lm.prompt_ids(prompt)?);
    }
    Ok(out)
}

fn save_data(path: &Path, train: &HeadsData, held: &HeadsData) -> Result<()> {
    let mut map = std::collections::HashMap::new();
    for (name, d) in [("train", train), ("held", held)] {
        let n = d.len();
        map.insert(
            format!("{name}.hidden"),
            Tensor::from_slice(&d.hidden, (n, d.dim), &Device::Cpu)?,
        );
        map.insert(
            format!("{name}.pending"),
            Tensor::from_slice(&d.pending, n, &Device::Cpu)?,
        );
        map.insert(
            format!("{name}.labels"),
            Tensor::from_slice(&d.labels, (n, d.heads), &Device::Cpu)?,
        );
    }
    candle_core::safetensors::save(&map, path)?;
    Ok(())
}

fn load_data(path: &Path) -> Result<(HeadsData, HeadsData)> {
    let t = candle_core::safetensors::load(path, &Device::Cpu)?;
    let get = |name: &str| -> Result<HeadsData> {
        let h = t.get(&format!("{name}.hidden")).context("hidden")?;
        let l = t.get(&format!("{name}.labels")).context("labels")?;
        let p = t.get(&format!("{name}.pending")).with_context(|| {
            format!(
                "{} holds no pending tokens (written by an older specgate): start over with \
                 --fresh",
                path.display()
            )
        })?;
        Ok(HeadsData {
            pending: p.to_vec1()?,
            dim: h.dims()[1],
            heads: l.dims()[1],
            hidden: h.flatten_all()?.to_vec1()?,
            labels: l.flatten_all()?.to_vec1()?,
        })
    };
    Ok((get("train")?, get("held")?))
}

pub fn run(model: PathBuf, args: TrainHeadsArgs) -> Result<()> {
    let log = &mut std::io::stderr();
    std::fs::create_dir_all(&args.work)?;
    let data_path = args.work.join("data.safetensors");
    let ckpt = args.work.join("checkpoint.safetensors");
    let mut lm = LoadedModel::load(&model)?;
    let prompts = read_prompts(&args.prompts, &lm)?;
    let t = Instant::now();
    let (train, held) = if data_path.exists() && !args.fresh {
        writeln!(log, "reusing {}", data_path.display())?;
        load_data(&data_path)?
    } else {
        writeln!(log, "generating continuations of {} prompts", prompts.len())?;
        let variants = training::Variants {
            extra: args.sampled_variants,
            max_prefix: args.max_sampled_prefix,
            seed: args.seed,
        };
        let (train, held) = training::collect(
            &mut lm,
            &prompts,
            args.max_new_tokens,
            args.heads,
            variants,
            args.holdout_every,
        )?;
        save_data(&data_path, &train, &held)?;
        (train, held)
    };
    let seconds_data = t.elapsed().as_secs_f64();
    writeln!(
        log,
        "{} training pairs, {} held out",
        train.len(),
        held.len()
    )?;
    // Ranked on the training pairs alone, so held-out accuracy measures it fairly; the same
    // data ranks it the same way when training resumes.
    let vocab = lm.model.config().vocab_size;
    let labels = training::label_tokens(&train);
    let draft_vocab = match args.draft_vocab {
        VocabChoice::Ranked => DraftVocab::ranked(
            &count_tokens(labels.iter().copied(), vocab),
            bundle::DRAFT_VOCAB,
        ),
        VocabChoice::First => DraftVocab::first(bundle::DRAFT_VOCAB.min(vocab)),
    };
    let frozen = training::frozen_head(&model, &draft_vocab)?;
    let mut trainer = if ckpt.exists() && !args.fresh {
        let tr = Trainer::load_checkpoint(&ckpt)?;
        writeln!(log, "resuming at step {}", tr.step)?;
        tr
    } else {
        Trainer::new(args.heads, train.dim)?
    };
    let t = Instant::now();
    let schedule = training::Schedule {
        steps: args.steps,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
    };
    // In segments, so the log shows held-out accuracy as training goes (when to stop).
    let mut final_loss = f32::NAN;
    while trainer.step < args.steps {
        let until = (trainer.step / args.eval_every.max(1) + 1) * args.eval_every.max(1);
        final_loss = training::train(
            &mut trainer,
            &train,
            &frozen,
            schedule,
            until,
            Some((&ckpt, 100)),
            log,
        )?;
        if trainer.step >= args.steps {
            break; // the report below measures the last step
        }
        let acc = trainer.accuracy(&held, &frozen)?;
        let top1: Vec<String> = acc
            .per_head
            .iter()
            .map(|(a, _)| format!("{a:.3}"))
            .collect();
        writeln!(
            log,
            "step {}: held-out top-1 {}, chain length {:.3}",
            trainer.step,
            top1.join(" "),
            acc.chain_length
        )?;
    }
    trainer.save_checkpoint(&ckpt)?;
    let seconds_train = t.elapsed().as_secs_f64();
    let accuracy = trainer.accuracy(&held, &frozen)?;
    let mut heads = trainer.heads()?;
    let calibration = calibration::calibrate(&trainer, &held, &frozen, CALIBRATION_PAIRS)?;
    log_calibration(log, &calibration)?;
    heads.temperatures = calibration.temperatures.clone();
    heads.coverage = calibration.coverage.clone();
    let cfg = lm.model.config();
    let heads_cfg = HeadsConfig {
        format: bundle::format_of(&heads).into(),
        num_heads: args.heads,
        hidden_size: cfg.hidden,
        vocab_size: cfg.vocab_size,
        lm_head: "target".into(),
        target: model
            .file_name()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
        target_sha256: bundle::sha256_of(&model)?,
        temperatures: Vec::new(),
        coverage: Vec::new(),
        draft_vocab: (args.draft_vocab == VocabChoice::Ranked)
            .then(|| bundle::DRAFT_VOCAB_FILE.into()),
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| bundle::default_dir(&model));
    if heads_cfg.draft_vocab.is_some() {
        bundle::save_draft_vocab(
            &out,
            &DraftVocabFile {
                ids: draft_vocab.ids().to_vec(),
                ranked_on: labels.len() as u64,
                source: format!("greedy continuations of {}", args.prompts.display()),
            },
        )?;
    }
    bundle::save(&out, &heads, &heads_cfg)?;
    let report = TrainReport {
        prompts: prompts.len(),
        train_pairs: train.len(),
        heldout_pairs: held.len(),
        steps: trainer.step,
        batch: args.batch,
        lr: args.lr,
        seconds_data,
        seconds_train,
        final_loss,
        heldout_accuracy: accuracy.per_head,
        heldout_chain_length: accuracy.chain_length,
        calibration: Some(calibration),
    };
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    writeln!(log, "heads written to {}", out.display())?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// Held-out pairs a calibration fits on (evenly spaced; the logits of 4096 pairs over the
/// draft vocabulary take 128 MiB per head).
pub(crate) const CALIBRATION_PAIRS: usize = 4096;

pub(crate) fn log_calibration(log: &mut impl Write, c: &Calibration) -> Result<()> {
    for (i, t) in c.temperatures.iter().enumerate() {
        writeln!(
            log,
            "head {i}: temperature {t:.3}, held-out NLL {:.4} -> {:.4}, coverage {:.3} ({} \
             pairs)",
            c.nll_before[i], c.nll_after[i], c.coverage[i], c.pairs
        )?;
    }
    Ok(())
}
