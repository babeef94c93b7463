//! Speculative sampling on the real model follows the target's own distribution. The first
//! three tokens sampled after a prompt (temperature 1, top-k 3: at most 27 outcomes) are drawn
//! thousands of times with Medusa (and EAGLE) drafting — its q covers only the heads' draft vocabulary and
//! is zero elsewhere, and its drafts are often rejected, so the residual max(0, p − q) is
//! exercised — and compared with the exact joint distribution computed from the model's
//! logits by a chi-square goodness-of-fit test. (strategies/tests/distribution.rs shows on
//! toy models that the same test catches resampling from p after a rejection.)

mod common;

use common::distribution::Samples;
use specgate::drafting::registry::{BuildDrafter, StrategyKind};
use specgate::SamplingParams;

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

/// Sample with `kind` drafting (seeded), then check the drafts were judged both ways and the
/// output fits the exact distribution.
fn sampling_with_follows_the_targets_distribution(kind: StrategyKind, seed: u64) {
    let mut lm = common::model();
    let lm = &mut *lm;
    let prompt = lm
        .tokenizer
        .encode("Once upon a time, in a small village by the sea,")
        .unwrap();
    let exact = common::distribution::exact(lm, &sampling(), &prompt, TOKENS);
    let cfg = common::lean_drafter_config(common::model_path(), seed);
    let mut drafter = kind.build(&cfg, &lm.tokenizer).unwrap();
    let Samples {
        counts,
        drafted,
        accepted,
    } = common::distribution::sample(
        lm,
        drafter.as_mut(),
        &prompt,
        &sampling(),
        (TOKENS, 2, SAMPLES),
    );
    // The drafts were judged both ways, so acceptance and the residual both shaped the output.
    assert!(
        accepted > SAMPLES / 20 && drafted - accepted > SAMPLES / 20,
        "{kind}: drafted {drafted}, accepted {accepted}"
    );
    common::distribution::assert_fits(&counts, &exact);
}

#[test]
fn medusa_speculative_sampling_follows_the_targets_distribution() {
    sampling_with_follows_the_targets_distribution(StrategyKind::Medusa, 11);
}

/// Sampled requests get the EAGLE layer's chains with its q.
#[test]
fn eagle_speculative_sampling_follows_the_targets_distribution() {
    sampling_with_follows_the_targets_distribution(StrategyKind::Eagle, 13);
}

/// With presence, frequency and repetition penalties and a logit bias, speculative sampling
/// follows the penalised distribution: each row is penalised after the draft prefix it
/// verifies. The prompt repeats itself, so n-gram drafts propose the very tokens the
/// penalties turn against, and both acceptance and the residual shape the output. The penalties move the exact distribution far from the unpenalised one, so a
/// sampler that ignored them, or counted the wrong tokens, would fail the fit.
#[test]
fn speculative_sampling_with_penalties_follows_the_penalised_distribution() {
    use specgate::engine::generate::GenerateParams;
    use specgate_strategies::{Penalties, TokenTally};
    let mut lm = common::model();
    let lm = &mut *lm;
    let prompt = lm.tokenizer.encode("ha ha ha ha ha ha ha ha").unwrap();
    let plain = common::distribution::exact(lm, &sampling(), &prompt, TOKENS);
    let likeliest = plain
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(o, _)| o[0])
        .unwrap();
    let penalties = Penalties {
        presence: 0.3,
        frequency: 0.6,
        repetition: 1.1,
        logit_bias: vec![(likeliest, -0.5)],
    };
    let mut shape = |generated: &[u32], row: &mut [f32]| {
        let mut tally = TokenTally::new(&prompt);
        tally.add(generated);
        penalties.apply(row, &tally, &[]);
    };
    let exact = common::distribution::exact_shaped(lm, &sampling(), &prompt, TOKENS, &mut shape);
    let moved: f64 = exact
        .iter()
        .map(|(o, p)| (p - plain.get(o).copied().unwrap_or(0.0)).abs())
        .sum::<f64>()
        + plain
            .iter()
            .filter(|(o, _)| !exact.contains_key(*o))
            .map(|(_, p)| p)
            .sum::<f64>();
    assert!(
        moved / 2.0 > 0.15,
        "penalties moved only TV {:.3}",
        moved / 2.0
    );
    let cfg = common::lean_drafter_config(common::model_path(), 17);
    let mut drafter = StrategyKind::EarlyExit.build(&cfg, &lm.tokenizer).unwrap();
    let base = GenerateParams {
        sampling: sampling(),
        penalties,
        ..GenerateParams::greedy(TOKENS, 2)
    };
    let s = common::distribution::sample_with(lm, drafter.as_mut(), &prompt, &base, SAMPLES);
    assert!(
        s.accepted > SAMPLES / 20 && s.drafted - s.accepted > SAMPLES / 20,
        "drafted {}, accepted {}",
        s.drafted,
        s.accepted
    );
    common::distribution::assert_fits(&s.counts, &exact);
}
