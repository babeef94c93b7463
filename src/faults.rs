//! Fault injection for reliability tests: `specgate serve --inject-faults SPEC` (hidden) makes
//! the engine thread panic at a given step or every drafter fail every n-th proposal, so the
//! tests can prove what users rely on — a dead engine answers 503 instead of hanging, a
//! failing drafter costs speculation, never the answer. Off unless asked for: the faults are
//! hooks installed at start ([`Faults::step_hook`], [`Faults::drafter_hook`]), not fields
//! the engine's or the drafters' types carry.

use std::sync::Arc;

use specgate_strategies::{Draft, DraftContext, DraftError, Drafter, TrackRecord};

use crate::drafting::registry::{BoxedDrafter, DrafterHook};
use crate::engine::StepHook;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// The engine thread panics when it runs this step (counted from 1).
    pub engine_panic_at_step: Option<u64>,
    /// Every n-th proposal of every drafter fails, alternating a panic and an error; every
    /// n-th commit panics, and so does the first of every n track-record lookups.
    pub drafter_fail_every: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
#[error("bad fault spec {0:?}: expected engine-panic-at-step=N and/or drafter-fail-every=N, comma-separated, N ≥ 1")]
pub struct FaultSpecError(String);

impl std::str::FromStr for Faults {
    type Err = FaultSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = || FaultSpecError(spec.to_string());
        let mut f = Faults::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, n) = part.split_once('=').ok_or_else(bad)?;
            let n: u64 = n.trim().parse().map_err(|_| bad())?;
            if n == 0 {
                return Err(bad());
            }
            match name.trim() {
                "engine-panic-at-step" => f.engine_panic_at_step = Some(n),
                "drafter-fail-every" => f.drafter_fail_every = Some(n),
                _ => return Err(bad()),
            }
        }
        Ok(f)
    }
}

impl Faults {
    /// The engine's hook: panic when the step asked for runs.
    pub fn step_hook(&self) -> Option<StepHook> {
        let at = self.engine_panic_at_step?;
        Some(Box::new(move |step| {
            if step == at {
                panic!("injected engine fault at step {step}");
            }
        }))
    }

    /// The strategy actors' hook: every drafter fails every n-th proposal.
    pub fn drafter_hook(&self) -> Option<DrafterHook> {
        let every = self.drafter_fail_every?;
        Some(Arc::new(move |drafter| -> BoxedDrafter {
            Box::new(FailingDrafter {
                inner: drafter,
                every,
                calls: 0,
                commits: 0,
                lookups: std::cell::Cell::new(0),
            })
        }))
    }
}

/// A drafter whose every n-th proposal panics or errors (alternately), whose every n-th
/// commit panics, and whose first of every n track-record lookups panics.
pub struct FailingDrafter {
    inner: BoxedDrafter,
    every: u64,
    calls: u64,
    commits: u64,
    lookups: std::cell::Cell<u64>,
}

impl Drafter for FailingDrafter {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        self.calls += 1;
        if self.calls.is_multiple_of(self.every) {
            if (self.calls / self.every) % 2 == 1 {
                panic!("injected drafter fault (proposal {})", self.calls);
            }
            return Err(DraftError(format!(
                "injected drafter fault (proposal {})",
                self.calls
            )));
        }
        self.inner.propose(ctx, k)
    }

    fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
        self.commits += 1;
        if self.commits.is_multiple_of(self.every) {
            panic!("injected drafter fault (commit {})", self.commits);
        }
        self.inner.on_commit(ctx, accepted);
    }

    fn wrapped(&self) -> Option<&dyn Drafter> {
        Some(&*self.inner)
    }

    fn wrapped_mut(&mut self) -> Option<&mut dyn Drafter> {
        Some(&mut *self.inner)
    }

    fn track_record(&self) -> Option<TrackRecord> {
        // The first of every n: a request looks its drafter's record up once, at its start.
        self.lookups.set(self.lookups.get() + 1);
        if (self.lookups.get() - 1).is_multiple_of(self.every) {
            panic!(
                "injected drafter fault (track record {})",
                self.lookups.get()
            );
        }
        self.inner.track_record()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_are_refused() {
        let f: Faults = "engine-panic-at-step=40, drafter-fail-every=3"
            .parse()
            .unwrap();
        assert_eq!(f.engine_panic_at_step, Some(40));
        assert_eq!(f.drafter_fail_every, Some(3));
        assert_eq!("".parse::<Faults>().unwrap(), Faults::default());
        for bad in [
            "engine-panic-at-step",
            "x=1",
            "drafter-fail-every=0",
            "engine-panic-at-step=-1",
        ] {
            assert!(bad.parse::<Faults>().is_err(), "{bad}");
        }
    }
}
