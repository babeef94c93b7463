//! `specgate train-eagle`'s loop: AdamW over whole sequences, a cosine schedule, held-out
//! accuracy as it goes. Seeded: the same data and settings give the same layer.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::heads::eagle_loss::LossWeights;
use crate::heads::eagle_trainer::{accuracy, Accuracy, EagleTrainee, SeqInputs};
use crate::heads::trainer::FrozenHead;
use crate::heads::training::TrainError;

#[derive(Debug, Clone, Copy)]
pub struct EagleSchedule {
    pub steps: usize,
    /// Sequences per step.
    pub batch: usize,
    pub lr: f64,
    pub seed: u64,
    pub eval_every: usize,
    pub loss: LossWeights,
    /// Steps unrolled per position (the training-time test's depth), at least 1.
    pub unroll: usize,
}

/// What training measured: held-out top-1 of the first three drafts (each later one reading
/// the layer's own output) and of chains of them (see [`Accuracy`]).
#[derive(Debug, Clone, Serialize)]
pub struct EagleReport {
    pub train_sequences: usize,
    pub held_out_sequences: usize,
    pub train_positions: usize,
    pub steps: usize,
    pub batch: usize,
    pub lr: f64,
    /// Weights of the distribution and hidden-state terms beside the token term.
    pub loss_distribution: f64,
    pub loss_hidden: f64,
    pub unroll: usize,
    /// The trained layer training started from (`--resume`), if not the target's layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    pub seconds_data: f64,
    pub seconds_training: f64,
    pub initial: Accuracy,
    pub final_loss: f32,
    pub held_out: Accuracy,
    pub log: Vec<String>,
}

/// Train `t` on `train`, measuring on `held`; returns the report (data time left to the
/// caller).
pub fn train(
    t: &EagleTrainee,
    train: &[SeqInputs],
    held: &[SeqInputs],
    frozen: &FrozenHead,
    sch: EagleSchedule,
    log: &mut dyn FnMut(&str),
) -> Result<EagleReport, TrainError> {
    let quick: Vec<&SeqInputs> = held.iter().step_by(4).collect();
    let quick_acc = |t: &EagleTrainee| accuracy(t, &quick, frozen);
    let initial = quick_acc(t)?;
    let mut lines = vec![format!("initial (quick held-out) {}", brief(&initial))];
    log(&lines[0]);
    let mut opt = AdamW::new(
        t.vars(),
        ParamsAdamW {
            lr: sch.lr,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(sch.seed);
    let mut order: Vec<usize> = Vec::new();
    let started = Instant::now();
    let mut last = f32::NAN;
    for step in 0..sch.steps {
        if order.len() < sch.batch {
            order = (0..train.len()).collect();
            order.shuffle(&mut rng);
        }
        let progress = step as f64 / sch.steps.max(1) as f64;
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        opt.set_learning_rate(sch.lr * (0.1 + 0.9 * cosine));
        let mut loss = Tensor::zeros((), DType::F32, &Device::Cpu)?;
        for _ in 0..sch.batch {
            let Some(i) = order.pop() else { break };
            loss = (loss + t.loss(&train[i], frozen, sch.loss, sch.unroll)?)?;
        }
        let loss = (loss / sch.batch as f64)?;
        opt.backward_step(&loss)?;
        last = loss.to_scalar::<f32>()?;
        if (step + 1) % sch.eval_every.max(1) == 0 || step + 1 == sch.steps {
            let a = quick_acc(t)?;
            let line = format!(
                "step {} loss {last:.4} quick held-out {} ({:.0} s)",
                step + 1,
                brief(&a),
                started.elapsed().as_secs_f64()
            );
            log(&line);
            lines.push(line);
        }
    }
    let seconds_training = started.elapsed().as_secs_f64();
    let all: Vec<&SeqInputs> = held.iter().collect();
    let held_out = accuracy(t, &all, frozen)?;
    Ok(EagleReport {
        train_sequences: train.len(),
        held_out_sequences: held.len(),
        train_positions: train.iter().map(|x| x.labels().len()).sum(),
        steps: sch.steps,
        batch: sch.batch,
        lr: sch.lr,
        loss_distribution: sch.loss.distribution,
        loss_hidden: sch.loss.hidden,
        unroll: sch.unroll,
        resumed_from: None,
        seconds_data: 0.0,
        seconds_training,
        initial,
        final_loss: last,
        held_out,
        log: lines,
    })
}

/// "top-1 a/b/c, chains b/c, first draft by position x/y/z" for a log line.
pub fn brief(a: &Accuracy) -> String {
    let p = a.first_by_position;
    format!(
        "top-1 {:.3}/{:.3}/{:.3}, chains of 2/3 {:.3}/{:.3}, first draft at positions \
         0-7/8-31/32+ {:.3}/{:.3}/{:.3}",
        a.top1[0], a.top1[1], a.top1[2], a.chain[1], a.chain[2], p[0], p[1], p[2]
    )
}

/// Calibration fitted on held-out sequences (up to `positions` of them): the temperature of
/// the first draft's logits (step 1) and of the later drafts' (step 2), each minimising the
/// negative log-likelihood of the labels inside the draft vocabulary, and the share of labels
/// that are inside it.
pub fn calibrate(
    t: &EagleTrainee,
    held: &[SeqInputs],
    frozen: &FrozenHead,
    positions: usize,
) -> Result<(Vec<f32>, f32), TrainError> {
    let vocab = frozen.draft_vocab();
    let (mut rows, mut labels) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for x in held {
        if labels[0].len() >= positions {
            break;
        }
        let (l1, l2) = t.logits(x, frozen)?;
        rows[0].extend(l1.flatten_all()?.to_vec1::<f32>()?);
        labels[0].extend_from_slice(x.labels());
        rows[1].extend(l2.flatten_all()?.to_vec1::<f32>()?);
        labels[1].extend_from_slice(&x.labels()[1..]);
    }
    let temperatures = (0..2)
        .map(|i| crate::heads::calibration::fit_temperature(&rows[i], vocab, &labels[i]))
        .collect();
    let coverage = crate::heads::calibration::coverage(&labels[0], vocab);
    Ok((temperatures, coverage))
}
