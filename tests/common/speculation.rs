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
    let plain = generate(
        &mut lm.model,
        &lm.tokenizer,
        ids,
        &GenerateParams::greedy(tokens, 0),
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    let (mut runs, mut ties) = (0, 0);
    for (kind, drafter) in drafters.iter_mut() {
        for (k, adaptive) in K_CHOICES {
            let p = GenerateParams {
                adaptive_k: adaptive,
                row_cost: None,
                ..GenerateParams::greedy(tokens, k)
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
            if *kind == StrategyKind::Draft {
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
    (runs, ties)
}
