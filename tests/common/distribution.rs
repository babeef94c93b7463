//! The statistics of the sampled-distribution tests: the exact joint distribution of a
//! model's first few sampled tokens, and a chi-square goodness-of-fit test of samples
//! against it.

use std::collections::BTreeMap;

use specgate::engine::generate::GenerateParams;
use specgate::model::loaded::LoadedModel;
use specgate::model::LogitRows;
use specgate::{SamplingParams, TokenId};

/// The target's next-token distribution after `ctx` (sampling parameters applied after
/// `shape` rewrote the row: [vocab]).
fn next_probs(
    lm: &mut LoadedModel,
    sampling: &SamplingParams,
    ctx: &[TokenId],
    generated: &[TokenId],
    shape: &mut dyn FnMut(&[TokenId], &mut [f32]),
) -> Vec<f32> {
    let seq = lm.model.new_sequence();
    let out = lm.model.forward_one(seq, ctx, LogitRows::Last).unwrap();
    let mut row = out.row(0, 0).to_vec();
    shape(generated, &mut row);
    lm.model.release(seq);
    sampling.probs(&row)
}

/// Exact probabilities of every output of up to `tokens` tokens (EOS ends one early and is
/// not part of it, as in `generate`).
pub fn exact(
    lm: &mut LoadedModel,
    sampling: &SamplingParams,
    prompt: &[TokenId],
    tokens: usize,
) -> BTreeMap<Vec<TokenId>, f64> {
    exact_shaped(lm, sampling, prompt, tokens, &mut |_, _| {})
}

/// [`exact`] with every row rewritten by `shape(generated so far, row)` before sampling (an
/// output grammar's mask).
pub fn exact_shaped(
    lm: &mut LoadedModel,
    sampling: &SamplingParams,
    prompt: &[TokenId],
    tokens: usize,
    shape: &mut dyn FnMut(&[TokenId], &mut [f32]),
) -> BTreeMap<Vec<TokenId>, f64> {
    let eos = lm.tokenizer.eos();
    let mut out = BTreeMap::new();
    let mut frontier = vec![(Vec::<TokenId>::new(), 1.0f64)];
    while let Some((prefix, p)) = frontier.pop() {
        if prefix.len() == tokens {
            out.insert(prefix, p);
            continue;
        }
        let ctx = [prompt, &prefix].concat();
        for (t, &q) in next_probs(lm, sampling, &ctx, &prefix, shape)
            .iter()
            .enumerate()
        {
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

/// What speculative sampling drew: outcome counts, drafted and accepted tokens.
pub struct Samples {
    pub counts: BTreeMap<Vec<TokenId>, u64>,
    pub drafted: u64,
    pub accepted: u64,
}

/// `n` outputs of up to `tokens` tokens after `prompt`, seeds 0..n, drafting k tokens a
/// round with `drafter`.
pub fn sample(
    lm: &mut LoadedModel,
    drafter: &mut dyn specgate_strategies::Drafter,
    prompt: &[TokenId],
    sampling: &SamplingParams,
    (tokens, k, n): (usize, usize, u64),
) -> Samples {
    let base = GenerateParams {
        sampling: *sampling,
        ..GenerateParams::greedy(tokens, k)
    };
    sample_with(lm, drafter, prompt, &base, n)
}

/// [`sample`] with `base` params (their sampling, penalties, max_tokens and k), seeds 0..n.
pub fn sample_with(
    lm: &mut LoadedModel,
    drafter: &mut dyn specgate_strategies::Drafter,
    prompt: &[TokenId],
    base: &GenerateParams,
    n: u64,
) -> Samples {
    use specgate::engine::generate::generate;
    let mut s = Samples {
        counts: BTreeMap::new(),
        drafted: 0,
        accepted: 0,
    };
    for seed in 0..n {
        let params = GenerateParams {
            seed,
            ..base.clone()
        };
        let out = generate(
            &mut lm.model,
            &lm.tokenizer,
            prompt,
            &params,
            drafter,
            |_| {},
        )
        .unwrap();
        s.drafted += out.stats.drafted;
        s.accepted += out.stats.accepted;
        *s.counts.entry(out.token_ids).or_default() += 1;
    }
    s
}

/// The chi-square critical value at significance 0.001 (Wilson–Hilferty).
fn chi2_critical(df: f64) -> f64 {
    let z = 3.09;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Asserts `counts` (n samples) fit `exact`: no impossible outcome, and chi-square under
/// its 0.001 critical value with cells expected to hold fewer than 5 samples pooled.
pub fn assert_fits(counts: &BTreeMap<Vec<TokenId>, u64>, exact: &BTreeMap<Vec<TokenId>, f64>) {
    for outcome in counts.keys() {
        assert!(exact.contains_key(outcome), "impossible output {outcome:?}");
    }
    let n = counts.values().sum::<u64>() as f64;
    let (mut chi2, mut cells, mut pooled_e, mut pooled_o) = (0.0, 0usize, 0.0, 0.0);
    let mut tv = 0.0;
    for (outcome, &p) in exact {
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
        "{} outcomes, {cells} cells: chi2 {chi2:.1} (critical {critical:.1}), TV {tv:.3}",
        exact.len()
    );
    assert!(cells >= 5, "too few cells to test: {cells}");
    assert!(
        chi2 < critical,
        "speculative sampling departs from the target: chi2 {chi2:.1} ≥ {critical:.1}"
    );
}
