//! Holding the engine thread still: a request whose first proposal waits for the test.

use std::time::Duration;

use specgate::engine::{EngineHandle, Submission};

/// Wraps a drafter: its first proposal says so on `entered`, then waits until the gate
/// opens (its sender dropped) before drafting as the wrapped one does. The engine thread waits
/// with it, so the test decides what happens before the engine moves on, however fast the
/// tiny model runs.
struct Gated {
    inner: Box<dyn specgate_strategies::Drafter + Send>,
    entered: std::sync::mpsc::SyncSender<()>,
    gate: std::sync::mpsc::Receiver<()>,
}

/// Submits `sub` with its drafter gated and waits until its first proposal holds the engine:
/// the engine thread goes on only once the returned key is dropped.
pub fn submit_gated(engine: &EngineHandle, mut sub: Submission) -> std::sync::mpsc::Sender<()> {
    let (entered, held) = std::sync::mpsc::sync_channel(1);
    let (key, gate) = std::sync::mpsc::channel();
    sub.drafter = Box::new(Gated {
        inner: sub.drafter,
        entered,
        gate,
    });
    engine.submit(sub).unwrap();
    held.recv_timeout(Duration::from_secs(30))
        .expect("the gated request never drafted");
    key
}

impl specgate_strategies::Drafter for Gated {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn propose(
        &mut self,
        ctx: &specgate_strategies::DraftContext<'_>,
        max_draft_tokens: usize,
    ) -> Result<specgate_strategies::Draft, specgate_strategies::DraftError> {
        let _ = self.entered.try_send(());
        // Returns at once from the gate's opening on.
        let _ = self.gate.recv_timeout(Duration::from_secs(30));
        self.inner.propose(ctx, max_draft_tokens)
    }

    fn wrapped(&self) -> Option<&dyn specgate_strategies::Drafter> {
        Some(&*self.inner)
    }

    fn wrapped_mut(&mut self) -> Option<&mut dyn specgate_strategies::Drafter> {
        Some(&mut *self.inner)
    }
}
