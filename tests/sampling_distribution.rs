//! Speculative sampling on the real model follows the target's own distribution. The first
//! three tokens sampled after a prompt (temperature 1, top-k 3: at most 27 outcomes) are drawn
//! thousands of times with Medusa drafting — its q covers only the heads' draft vocabulary and
//! is zero elsewhere, and its drafts are often rejected, so the residual max(0, p − q) is
//! exercised — and compared with the exact joint distribution computed from the model's
//! logits by a chi-square goodness-of-fit test. (strategies/tests/distribution.rs shows on
//! toy models that the same test catches resampling from p after a rejection.)

mod common;

use std::collections::BTreeMap;

use specgate::drafting::registry::{BuildDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER};
use specgate::engine::generate::{generate, GenerateParams};
use specgate::model::loaded::LoadedModel;
use specgate::model::LogitRows;
use specgate::{SamplingParams, TokenId};

const SAMPLES: u64 = 2000;
const TOKENS: usize = 3;

fn sampling() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 3,
        top_p: 1.0,
        min_p: 0.0,
    }
}

/// The target's next-token distribution after `ctx` (sampling parameters applied).
fn next_probs(lm: &mut LoadedModel, ctx: &[TokenId]) -> Vec<f32> {
    let seq = lm.model.new_sequence();
    let out = lm.model.forward_one(seq, ctx, LogitRows::Last).unwrap();
    let p = sampling().probs(out.row(0, 0));
    lm.model.release(seq);
    p
}

/// Exact probabilities of every output of up to TOKENS tokens (EOS ends one early and is
/// not part of it, as in `generate`).
fn exact(lm: &mut LoadedModel, prompt: &[TokenId]) -> BTreeMap<Vec<TokenId>, f64> {
    let eos = lm.tokenizer.eos();
    let mut out = BTreeMap::new();
    let mut frontier = vec![(Vec::<TokenId>::new(), 1.0f64)];
    while let Some((prefix, p)) = frontier.pop() {
        if prefix.len() == TOKENS {
            out.insert(prefix, p);
            continue;
        }
        let ctx = [prompt, &prefix].concat();
        for (t, &q) in next_probs(lm, &ctx).iter().enumerate() {
            if q <= 0.0 {
                continue;
            }
            if t as TokenId == eos {
                *out.entry(prefix.clone()).or_default() += p * q as f64;
            } else {
                frontier.push(([prefix.clone(), vec![t as TokenId]].concat(), p * q as f64));
            }
        }
    }
    out
}

/// The chi-square critical value at significance 0.001 (Wilson–Hilferty).
fn chi2_critical(df: f64) -> f64 {
    let z = 3.09;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

#[test]
fn medusa_speculative_sampling_follows_the_targets_distribution() {
    let mut lm = common::model();
    let lm = &mut *lm;
    let prompt = lm
        .tokenizer
        .encode("Once upon a time, in a small village by the sea,")
        .unwrap();
    let exact = exact(lm, &prompt);
    let cfg = DrafterConfig {
        target_path: common::model_path(),
        draft_model: None,
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: None,
        corpus: None,
        seed: 11,
        medusa_heads: None,
    };
    let mut drafter = StrategyKind::Medusa.build(&cfg, &lm.tokenizer).unwrap();
    let mut counts: BTreeMap<Vec<TokenId>, u64> = BTreeMap::new();
    let (mut drafted, mut accepted) = (0u64, 0u64);
    for seed in 0..SAMPLES {
        let params = GenerateParams {
            max_tokens: TOKENS,
            sampling: sampling(),
            seed,
            stop: vec![],
            max_draft_tokens: 2,
            adaptive_k: false,
            row_cost: None,
        };
        let out = generate(
            &mut lm.model,
            &lm.tokenizer,
            &prompt,
            &params,
            drafter.as_mut(),
            |_| {},
        )
        .unwrap();
        drafted += out.stats.drafted;
        accepted += out.stats.accepted;
        *counts.entry(out.token_ids).or_default() += 1;
    }
    // The drafts were judged both ways, so acceptance and the residual both shaped the output.
    assert!(
        accepted > SAMPLES / 20 && drafted - accepted > SAMPLES / 20,
        "drafted {drafted}, accepted {accepted}"
    );
    for outcome in counts.keys() {
        assert!(exact.contains_key(outcome), "impossible output {outcome:?}");
    }
    // Cells expected to hold fewer than 5 samples are pooled.
    let n = SAMPLES as f64;
    let (mut chi2, mut cells, mut pooled_e, mut pooled_o) = (0.0, 0usize, 0.0, 0.0);
    let mut tv = 0.0;
    for (outcome, &p) in &exact {
        let o = counts.get(outcome).copied().unwrap_or(0) as f64;
        tv += (o / n - p).abs() / 2.0;
        if n * p >= 5.0 {
            chi2 += (o - n * p).powi(2) / (n * p);
            cells += 1;
        } else {
            pooled_e += n * p;
            pooled_o += o;
        }
    }
    if pooled_e > 0.0 {
        chi2 += (pooled_o - pooled_e).powi(2) / pooled_e.max(1e-9);
        cells += 1;
    }
    let critical = chi2_critical((cells - 1) as f64);
    eprintln!(
        "{} outcomes, {cells} cells: chi2 {chi2:.1} (critical {critical:.1}), TV {tv:.3}, \
         drafted {drafted}, accepted {accepted}",
        exact.len()
    );
    assert!(cells >= 5, "too few cells to test: {cells}");
    assert!(
        chi2 < critical,
        "speculative sampling departs from the target: chi2 {chi2:.1} ≥ {critical:.1}"
    );
}
