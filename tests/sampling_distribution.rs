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
