//! A drafter's fault costs speculation, never the request or the engine: its calls run
//! under `catch_unwind`, a malformed draft is dropped, and each fault is counted.

use std::panic::{catch_unwind, AssertUnwindSafe};

use specgate_strategies::{Draft, DraftContext, Drafter, SpecStats};

/// Run a drafter's bookkeeping call. A panic in it is counted as a drafter failure and
/// yields None: a drafter's fault costs speculation, never the request or the engine.
pub(crate) fn guarded<T>(stats: &mut SpecStats, call: impl FnOnce() -> T) -> Option<T> {
    let out = catch_unwind(AssertUnwindSafe(call)).ok();
    if out.is_none() {
        stats.drafter_failures += 1;
    }
    out
}

/// Ask the drafter for up to k tokens. An error, a panic or a malformed draft (a token
/// outside the vocabulary, a q row of the wrong size) becomes an empty draft, so the round
/// runs as plain decoding, and is counted.
pub(crate) fn propose_checked(
    drafter: &mut dyn Drafter,
    ctx: &DraftContext<'_>,
    k: usize,
    vocab: usize,
    stats: &mut SpecStats,
) -> Draft {
    if k == 0 {
        return Draft::empty();
    }
    let well_formed = |d: &Draft| {
        d.tokens.iter().all(|&t| (t as usize) < vocab)
            && d.q
                .as_ref()
                .is_none_or(|q| q.len() == d.tokens.len() && q.iter().all(|r| r.len() == vocab))
    };
    match catch_unwind(AssertUnwindSafe(|| drafter.propose(ctx, k))) {
        Ok(Ok(d)) if d.parents.is_some() => {
            // A tree: greedy only (its verification follows the argmax), well formed, at most
            // k nodes (k counts drafted tokens, chain or tree: a pass verifies k + 1 rows).
            let ok = ctx.sampling.is_greedy()
                && d.q.is_none()
                && d.len() <= k
                && d.tokens.iter().all(|&t| (t as usize) < vocab)
                // Depth ≤ nodes ≤ k in a well-formed tree, so no separate depth bound.
                && d.as_tree().is_some_and(|t| t.is_well_formed());
            if ok {
                return d;
            }
            stats.drafter_failures += 1;
            Draft::empty()
        }
        Ok(Ok(mut d)) => {
            d.tokens.truncate(k);
            if let Some(q) = d.q.as_mut() {
                q.truncate(d.tokens.len());
            }
            if well_formed(&d) {
                return d;
            }
            stats.drafter_failures += 1;
            Draft::empty()
        }
        Ok(Err(_)) | Err(_) => {
            stats.drafter_failures += 1;
            Draft::empty()
        }
    }
}
