//! What one finished request teaches a set of arms: its acceptance evidence (weighed for
//! the load it ran under, decaying older evidence), its draft cost and the drafts its rounds
//! made, in the units the learner values strategies in.

use specgate_strategies::StrategyKind;

use crate::learner::{Arms, Observation, DECAY_OWN, DECAY_STALE, MAX_EVIDENCE, PRIOR};

/// One request's evidence into a set of arms: the observed arm's old evidence decays faster
/// than the others', then the new evidence is added. A request that counts 1/n (see
/// [`load_discount`]) also decays the old evidence as 1/n of a request does: else a long
/// enough busy period would still wash out what the idle route accepts.
pub(crate) fn learn(arms: &mut Arms, obs: &Observation) {
    let judged = judged(obs);
    let observed = (obs.strategy != StrategyKind::Plain && judged > 0).then_some(obs.strategy);
    let share = 1.0 / load_discount(obs);
    for (s, arm) in arms.iter_mut() {
        let d = if Some(*s) == observed {
            DECAY_OWN
        } else {
            DECAY_STALE
        }
        .powf(share);
        arm.accepted = PRIOR.0 + (arm.accepted - PRIOR.0) * d;
        arm.rejected = PRIOR.1 + (arm.rejected - PRIOR.1) * d;
    }
    let Some(strategy) = observed else {
        return;
    };
    let arm = arms.entry(strategy).or_default();
    let weight = (judged as f64).min(MAX_EVIDENCE) / judged as f64 * share;
    arm.accepted += obs.accepted as f64 * weight;
    arm.rejected += (judged - obs.accepted.min(judged)) as f64 * weight;
    if let Some(c) = measured_draft_cost(obs) {
        arm.draft_cost = Some(ema(arm.draft_cost, c));
    }
    if strategy.prices_own_drafts() && obs.rounds > 0 {
        let rows = obs.drafted as f64 / obs.rounds as f64;
        // Rows measured under load say what the load allowed (the drafter stops earlier as
        // rows get dear), so they move the average as much as the acceptance evidence does.
        arm.drafts_per_round = Some(ema_weighted(arm.drafts_per_round, rows, share));
        if let Some(f) = measured_pass_factor(obs) {
            arm.pass_factor = Some(ema_weighted(arm.pass_factor, f, share));
        }
    }
}

/// A request's draft cost relative to its verify pass: per round for a drafter that prices
/// its own drafts, else per drafted token (None: it drafted nothing).
pub(crate) fn measured_draft_cost(obs: &Observation) -> Option<f64> {
    if obs.drafted == 0 || obs.rounds == 0 || obs.verify_secs <= 0.0 {
        return None;
    }
    let pass = obs.verify_secs / obs.rounds as f64;
    let per = if obs.strategy.prices_own_drafts() {
        obs.rounds
    } else {
        obs.drafted
    };
    Some(obs.draft_secs / per as f64 / pass)
}

/// A request's verify passes against the step-cost line: measured seconds per pass over
/// t0 + t1·(1 + rows), the line's time for a step of this round's tokens (None without a fit
/// or a pass). Only a request that ran alone is measured: a shared step also carries other
/// sequences' rows and prompt chunks, and code edits two at a time, measured so, read their
/// suffix passes at several times the line and turned to plain decoding mid-phase. Clamped:
/// one odd request must not make a drafter look free or ruinous.
pub(crate) fn measured_pass_factor(obs: &Observation) -> Option<f64> {
    let (t0, t1) = obs.step?;
    if obs.rounds == 0 || obs.verify_secs <= 0.0 || obs.sequences > 1 {
        return None;
    }
    let rows = obs.drafted as f64 / obs.rounds as f64;
    let predicted = t0 + t1 * (1.0 + rows);
    (predicted > 0.0).then(|| (obs.verify_secs / obs.rounds as f64 / predicted).clamp(0.25, 4.0))
}

/// An average that follows the last few requests.
fn ema(old: Option<f64>, new: f64) -> f64 {
    ema_weighted(old, new, 1.0)
}

/// [`ema`] where the new value counts `weight` of a request (a first value counts whole).
fn ema_weighted(old: Option<f64>, new: f64, weight: f64) -> f64 {
    old.map_or(new, |old| old + 0.2 * weight * (new - old))
}

/// How much less a request's acceptance evidence counts for the load it ran under. A drafter
/// that prices its own drafts drafts less as other sequences make rows dear, and a lookup's
/// k shrinks with load, so their tokens per pass under load say what the load allowed, not
/// what the route's text accepts (16-way load: about 1.0 token per pass, read as α ≈ 0 for
/// the route and its class). Such evidence counts 1/n at n sequences; evidence per judged
/// position (a fixed-k drafter's) does not depend on load and counts whole.
fn load_discount(obs: &Observation) -> f64 {
    if obs.strategy.is_lookup() || obs.strategy.prices_own_drafts() {
        obs.sequences.max(1) as f64
    } else {
        1.0
    }
}

/// The positions a request's evidence counts. A lookup drafts only where it finds a match
/// and a drafter that prices its own tokens only what pays, so their judged positions say
/// little of what they commit: one that finds nothing judges nothing and would never be
/// left, and an ngram lookup's few judged copies looked better than suffix drafting that
/// committed more per pass. Their evidence is accepted tokens against rounds (each round
/// ends with one token the drafter did not supply): the α of a constant-acceptance drafter
/// that commits as many tokens per pass.
pub(crate) fn judged(obs: &Observation) -> u64 {
    if obs.strategy.is_lookup() || obs.strategy.prices_own_drafts() {
        obs.accepted + obs.rounds
    } else {
        obs.judged
    }
}
