//! The engine: one thread that owns the target model and runs continuous batching over every
//! live sequence. Each step gathers the pending verify rounds (decode steps are rounds with
//! no drafts) and chunks of new prompts into one ragged forward, bounded by a token budget;
//! a sequence's KV cache is freed the moment it ends, is cancelled or its client goes away.
//!
//! Callers hold a cheap [`EngineHandle`] that sends [`Command`]s (TGI's queue shape): the
//! thread owns plain state, no locks on the hot path. Load is published through atomics so
//! planners can read it without a round trip.

mod batch;
mod calibrate;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use specgate_policies::{Load, SpecPlan, StepCosts, WorkloadClass};
use specgate_strategies::{SpecStats, TokenId};
use tokio::sync::mpsc::UnboundedSender;

use crate::generate::GenerateParams;
use crate::loaded::LoadedModel;
use crate::sequence::FinishReason;
use crate::strategy::BoxedDrafter;

pub use batch::Engine;

/// Identifies a request inside the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// Batching and memory limits.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most tokens in one forward (decode, verify and prefill rows together).
    pub max_batch_tokens: usize,
    /// Most prompt tokens of one sequence per step, so a long prompt does not stall others.
    pub prefill_chunk: usize,
    /// Batch slots: most live sequences; occupancy is live / max_sequences.
    pub max_sequences: usize,
    /// KV memory that live sequences may reserve (prompt + max_tokens + drafts each).
    pub kv_budget_bytes: usize,
    /// Requests that may wait for a slot; past that, submissions are refused (429).
    pub queue_capacity: usize,
    /// Occupancy at which speculation turns off (k shrinks linearly from half of it).
    pub spec_off_occupancy: f64,
    /// Injected faults (tests only; none by default).
    pub faults: crate::faults::Faults,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_batch_tokens: 512,
            prefill_chunk: 64,
            max_sequences: 16,
            kv_budget_bytes: 1 << 30,
            queue_capacity: 64,
            spec_off_occupancy: 0.5,
            faults: crate::faults::Faults::default(),
        }
    }
}

/// Whose request this is, for metrics and history.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteLabels {
    pub tenant: String,
    pub class: WorkloadClass,
}

/// A request handed to the engine.
pub struct Submission {
    pub id: RequestId,
    pub prompt: Vec<TokenId>,
    pub params: GenerateParams,
    pub plan: SpecPlan,
    pub drafter: BoxedDrafter,
    pub route: RouteLabels,
    pub events: UnboundedSender<Event>,
    /// A shadow check: record the top-2 logit gap behind every token (see `shadow.rs`).
    pub shadow: bool,
    /// Report each generated token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
}

/// What the engine tells a request, in order: text pieces, then `Done` or `Failed`.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one Done per request
pub enum Event {
    /// Newly committed text (may be empty when held back by a stop string or a partial
    /// character) and how many tokens the request has generated so far.
    Text {
        text: String,
        generated: usize,
        /// The log-probabilities of the tokens generated since the last event (when asked).
        logprobs: Vec<crate::logprobs::TokenLogprob>,
    },
    Done(Summary),
    Failed(String),
}

/// The end of a request.
#[derive(Debug, Clone)]
pub struct Summary {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish_reason: FinishReason,
    pub plan: SpecPlan,
    pub stats: SpecStats,
    /// Time waiting for a batch slot.
    pub queued: Duration,
    /// The mean count of sequences in the steps that ran its rounds (1 without rounds): the
    /// load its acceptance was measured under.
    pub sequences: f64,
    /// The generated token ids (EOS excluded).
    pub token_ids: Vec<TokenId>,
    /// Predicted tokens drafted and accepted or rejected (a request with a `prediction`).
    pub prediction: Option<specgate_strategies::PredictionTokens>,
    /// Shadow checks only: the top-2 logit gap behind each committed token.
    pub top2_gaps: Vec<f32>,
}

pub enum Command {
    Submit(Box<Submission>),
    Cancel(RequestId),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the server is at capacity ({queued} requests waiting); retry later")]
    QueueFull { queued: usize },
    #[error("the request needs {needed} bytes of KV cache; the server's budget is {budget}")]
    TooLarge { needed: usize, budget: usize },
    #[error("the engine is not running")]
    EngineDown,
}

/// Counters the engine publishes for planners, readiness and metrics.
#[derive(Debug, Default)]
pub struct EngineStatus {
    pub alive: AtomicBool,
    /// The engine has timed its steps (or given up trying) and runs at full speed.
    pub warm: AtomicBool,
    pub live: AtomicUsize,
    pub queued: AtomicUsize,
    pub kv_bytes: AtomicUsize,
    pub steps: AtomicU64,
    /// Step time against batch tokens, for the policy's cost model.
    pub step_costs: Mutex<StepCosts>,
}

impl EngineStatus {
    /// The fitted step cost (t0, t1) around the step sizes `sequences` sequences' rounds
    /// produce, once the engine has run steps of two sizes.
    pub fn step_fit(&self, sequences: usize) -> Option<(f64, f64)> {
        self.step_costs.lock().ok()?.fit_for(sequences)
    }

    /// The cost model's view of `sequences` sharing the engine.
    pub fn load_view(&self, sequences: usize) -> specgate_policies::LoadView {
        specgate_policies::LoadView {
            sequences,
            step: self.step_fit(sequences),
        }
    }
}

/// Occupancy: busy sequences (live and waiting) over the batch slots.
pub fn load_of(busy: usize, slots: usize) -> Load {
    Load {
        occupancy: busy as f64 / slots.max(1) as f64,
    }
}

/// A cheap, cloneable way to talk to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
    status: Arc<EngineStatus>,
    config: Arc<EngineConfig>,
    kv_bytes_per_token: usize,
    context_length: usize,
    next_id: Arc<AtomicU64>,
}

impl EngineHandle {
    /// Start the engine thread over a loaded model.
    pub fn start(lm: LoadedModel, config: EngineConfig) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(EngineStatus::default());
        status.alive.store(true, Ordering::SeqCst);
        let cfg = lm.model.config();
        let kv_bytes_per_token = cfg.n_layers * cfg.kv_width() * 2 * 2; // K and V, f16
        let context_length = cfg.context_length;
        let config = Arc::new(config);
        let engine = Engine::new(lm, Arc::clone(&config), Arc::clone(&status), rx);
        std::thread::Builder::new()
            .name("specgate-engine".into())
            .spawn(move || engine.run())?;
        Ok(EngineHandle {
            tx,
            status,
            config,
            kv_bytes_per_token,
            context_length,
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    pub fn next_request_id(&self) -> RequestId {
        RequestId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn status(&self) -> &EngineStatus {
        &self.status
    }

    pub fn context_length(&self) -> usize {
        self.context_length
    }

    pub fn is_alive(&self) -> bool {
        self.status.alive.load(Ordering::SeqCst)
    }

    /// Past its start-up timing: requests submitted before are queued, not refused.
    pub fn is_warm(&self) -> bool {
        self.status.warm.load(Ordering::SeqCst)
    }

    /// Live plus waiting sequences over the batch slots.
    pub fn load(&self) -> Load {
        let busy = self
            .status
            .live
            .load(Ordering::Relaxed)
            .saturating_add(self.status.queued.load(Ordering::Relaxed));
        load_of(busy, self.config.max_sequences)
    }

    /// KV bytes a request reserves: its prompt, its output and one round of drafts.
    pub fn kv_reservation(&self, prompt: usize, max_tokens: usize, k: usize) -> usize {
        (prompt + max_tokens + k + 1) * self.kv_bytes_per_token
    }

    /// Whether the engine has room to spare: nothing waiting and at most half the slots
    /// busy (background work such as shadow checks runs only then).
    pub fn is_idle_enough(&self) -> bool {
        self.status.queued.load(Ordering::Relaxed) == 0
            && self.status.live.load(Ordering::Relaxed) * 2 < self.config.max_sequences
    }

    /// Queue a request; refused at once when the queue is full or it could never fit.
    pub fn submit(&self, sub: Submission) -> Result<(), SubmitError> {
        if !self.is_alive() {
            return Err(SubmitError::EngineDown);
        }
        let needed = self.kv_reservation(sub.prompt.len(), sub.params.max_tokens, sub.plan.k);
        if needed > self.config.kv_budget_bytes {
            return Err(SubmitError::TooLarge {
                needed,
                budget: self.config.kv_budget_bytes,
            });
        }
        let queued = self.status.queued.fetch_add(1, Ordering::SeqCst);
        if queued >= self.config.queue_capacity {
            self.status.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueueFull { queued });
        }
        self.tx.send(Command::Submit(Box::new(sub))).map_err(|_| {
            self.status.queued.fetch_sub(1, Ordering::SeqCst);
            SubmitError::EngineDown
        })
    }

    /// Stop a request and free its cache at the next step (a no-op when it already ended).
    pub fn cancel(&self, id: RequestId) {
        let _ = self.tx.send(Command::Cancel(id));
    }
}
