//! One drafter backed by another: the primary drafts whenever it has something to propose;
//! when it proposes nothing, the fallback drafts, at most [`FallbackBudget`] tokens (one
//! budget for greedy requests, another for sampled ones).
//!
//! Why: suffix lookup drafts long and is accepted often where the text repeats (edits,
//! quoted passages) but has nothing confident for most tokens of free text, while Medusa's
//! first head is accepted about a third of the time whatever the text, at a draft cost of
//! a few hundredths of a target pass. Lookup first, heads for the rest, makes each round use
//! the drafter that has something to say. Both drafters see every commit, so both stay in
//! step with the sequence whichever drafted.

use crate::{Draft, DraftContext, DraftError, Drafter};

/// A drafter that can move between threads.
pub type SendDrafter = Box<dyn Drafter + Send>;

/// The most tokens (or tree nodes) the fallback may draft in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FallbackBudget {
    pub greedy: usize,
    pub sampled: usize,
}

pub struct FallbackDrafter {
    name: &'static str,
    primary: SendDrafter,
    fallback: SendDrafter,
    budget: FallbackBudget,
}

impl FallbackDrafter {
    pub fn new(
        name: &'static str,
        primary: SendDrafter,
        fallback: SendDrafter,
        budget: FallbackBudget,
    ) -> Self {
        Self {
            name,
            primary,
            fallback,
            budget,
        }
    }
}

impl Drafter for FallbackDrafter {
    fn name(&self) -> &'static str {
        self.name
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        let draft = self.primary.propose(ctx, k)?;
        if !draft.is_empty() || k == 0 {
            return Ok(draft);
        }
        let cap = match ctx.sampling.is_greedy() {
            true => self.budget.greedy,
            false => self.budget.sampled,
        };
        self.fallback.propose(ctx, k.min(cap))
    }

    fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
        self.primary.on_commit(ctx, accepted);
        self.fallback.on_commit(ctx, accepted);
    }

    fn finish(&mut self) {
        self.primary.finish();
        self.fallback.finish();
    }

    fn kv_bytes_per_token(&self) -> usize {
        self.primary.kv_bytes_per_token() + self.fallback.kv_bytes_per_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SamplingParams, TokenId};
    use std::sync::{Arc, Mutex};

    /// Proposes `tokens` (cut to k) and logs what it is told.
    struct Scripted {
        tokens: Vec<TokenId>,
        log: Arc<Mutex<Vec<String>>>,
        tag: &'static str,
    }

    impl Drafter for Scripted {
        fn name(&self) -> &'static str {
            self.tag
        }
        fn propose(&mut self, _: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
            self.log
                .lock()
                .unwrap()
                .push(format!("{} propose {k}", self.tag));
            let n = k.min(self.tokens.len());
            Ok(Draft::deterministic(self.tokens[..n].to_vec()))
        }
        fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
            let line = format!("{} commit {} {accepted}", self.tag, ctx.tokens.len());
            self.log.lock().unwrap().push(line);
        }
        fn finish(&mut self) {
            self.log
                .lock()
                .unwrap()
                .push(format!("{} finish", self.tag));
        }
    }

    fn pair(primary: Vec<TokenId>) -> (FallbackDrafter, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let p = Scripted {
            tokens: primary,
            log: log.clone(),
            tag: "p",
        };
        let f = Scripted {
            tokens: vec![7, 8, 9],
            log: log.clone(),
            tag: "f",
        };
        (
            FallbackDrafter::new(
                "p-f",
                Box::new(p),
                Box::new(f),
                FallbackBudget {
                    greedy: 2,
                    sampled: 1,
                },
            ),
            log,
        )
    }

    fn ctx<'a>(tokens: &'a [TokenId], sampling: &'a SamplingParams) -> DraftContext<'a> {
        DraftContext {
            tokens,
            prompt_len: 1,
            sampling,
            hidden: None,
            fresh_hidden: &[],
            row_cost: None,
        }
    }

    #[test]
    fn the_primary_drafts_when_it_can_and_the_fallback_within_its_budget_otherwise() {
        let s = SamplingParams::greedy();
        let tokens = [1, 2, 3];
        let (mut d, log) = pair(vec![4, 5, 6]);
        assert_eq!(
            d.propose(&ctx(&tokens, &s), 4).unwrap().tokens,
            vec![4, 5, 6]
        );
        assert_eq!(*log.lock().unwrap(), vec!["p propose 4"]);
        let (mut d, log) = pair(vec![]);
        assert_eq!(d.propose(&ctx(&tokens, &s), 4).unwrap().tokens, vec![7, 8]);
        assert_eq!(*log.lock().unwrap(), vec!["p propose 4", "f propose 2"]);
        // A sampled request gets the sampled budget.
        let sampled = SamplingParams {
            temperature: 0.8,
            ..SamplingParams::greedy()
        };
        let (mut d, log) = pair(vec![]);
        let draft = d.propose(&ctx(&tokens, &sampled), 4).unwrap();
        assert_eq!(draft.tokens, vec![7]);
        assert_eq!(*log.lock().unwrap(), vec!["p propose 4", "f propose 1"]);
        // k = 0 means no draft at all, from either.
        let (mut d, _) = pair(vec![]);
        assert!(d.propose(&ctx(&tokens, &s), 0).unwrap().is_empty());
        assert_eq!(d.name(), "p-f");
    }

    #[test]
    fn both_drafters_see_every_commit_and_the_finish() {
        let s = SamplingParams::greedy();
        let (mut d, log) = pair(vec![4]);
        d.on_commit(&ctx(&[1, 2, 4, 5], &s), 1);
        d.finish();
        assert_eq!(
            *log.lock().unwrap(),
            vec!["p commit 4 1", "f commit 4 1", "p finish", "f finish"]
        );
    }
}
