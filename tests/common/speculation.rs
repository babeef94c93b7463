//! The greedy-exactness check both models run: every drafter, at k = 1, 4, 8 and adaptive
//! (up to 8), gives plain greedy decoding's output, or leaves it only at a numerical tie.

use specgate::drafting::registry::{BoxedDrafter, StrategyKind};
use specgate::engine::generate::{generate, GenerateParams};
use specgate::model::loaded::LoadedModel;
use specgate_strategies::PlainDrafter;

/// k = 1, 4, 8, then k chosen per round (up to 8) by the adaptive controller.
const K_CHOICES: [(usize, bool); 4] = [(1, false), (4, false), (8, false), (8, true)];

/// Runs `tokens` greedy tokens after `ids` plainly, then with every drafter at every k, and
/// asserts each equals plain decoding (or ties, top-2 gap under `tie`). Returns (runs, ties).
pub fn every_drafter_equals_plain(
    lm: &mut LoadedModel,
    ids: &[u32],
    tokens: usize,
    drafters: &mut [(StrategyKind, BoxedDrafter)],
    tie: f32,
    label: &str,
) -> (usize, usize) {
    let base = GenerateParams::greedy(tokens, 0);
    every_drafter_equals_plain_with(lm, ids, &base, drafters, tie, label).1
}

/// [`every_drafter_equals_plain`] with greedy `base` params (their penalties, max_tokens);
/// also returns plain decoding's tokens.
pub fn every_drafter_equals_plain_with(
    lm: &mut LoadedModel,
    ids: &[u32],
    base: &GenerateParams,
    drafters: &mut [(StrategyKind, BoxedDrafter)],
    tie: f32,
    label: &str,
) -> (Vec<u32>, (usize, usize)) {
    let plain_params = GenerateParams {
        max_draft_tokens: 0,
        adaptive_k: false,
        ..base.clone()
    };
    let plain = generate(
        &mut lm.model,
        &lm.tokenizer,
        ids,
        &plain_params,
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    let (mut runs, mut ties) = (0, 0);
    for (kind, drafter) in drafters.iter_mut() {
        for (k, adaptive) in K_CHOICES {
            let p = GenerateParams {
                adaptive_k: adaptive,
                max_draft_tokens: k,
                row_cost: None,
                ..base.clone()
            };
            let spec = generate(
                &mut lm.model,
                &lm.tokenizer,
                ids,
                &p,
                drafter.as_mut(),
                |_| {},
            )
            .unwrap();
            runs += 1;
            assert_eq!(spec.stats.drafter_failures, 0, "{kind} failed to draft");
            // Drafters do not see penalties: then even a self-draft can be rejected.
            if *kind == StrategyKind::Draft && base.penalties.is_none() {
                assert_eq!(
                    spec.stats.accepted, spec.stats.drafted,
                    "a self-draft is always accepted"
                );
            }
            let what = format!("{label} {kind} k={k}");
            if super::assert_equal_or_tie(lm, ids, &plain.token_ids, &spec.token_ids, tie, &what) {
                ties += 1;
            }
        }
    }
    (plain.token_ids, (runs, ties))
}
