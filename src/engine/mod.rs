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
pub mod constrained;
mod failure;
pub mod generate;
pub mod logprobs;
pub use failure::Failure;
pub mod params;
mod penalised;
mod prefix;
pub mod queues;
pub mod sequence;
pub mod stop;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use specgate_policies::{Load, SpecPlan, StepCosts};
use specgate_strategies::{PlainDrafter, SpecStats, TokenId};
use tokio::sync::mpsc::UnboundedSender;

use crate::drafting::registry::BoxedDrafter;
use crate::engine::generate::GenerateParams;
use crate::engine::sequence::FinishReason;
use crate::model::loaded::LoadedModel;

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
    /// Batch slots: most sequences in one step (more may hold KV, paused, under fair
    /// scheduling); occupancy is busy sequences / max_sequences.
    pub max_sequences: usize,
    /// KV memory that live sequences may reserve (prompt + max_tokens + drafts each).
    pub kv_budget_bytes: usize,
    /// Requests that may wait in all; past that, a tenant that already has requests waiting
    /// is refused (429).
    pub queue_capacity: usize,
    /// Requests one tenant may have waiting; past that, its submissions are refused (429).
    pub tenant_queue_capacity: usize,
    /// Whom each step serves: tenants' fair shares and tiers, or arrival order.
    pub scheduling: crate::scheduler::Scheduling,
    /// While an interactive tenant is active, lower tiers' rows may make its steps at most
    /// this many times longer than its own rows would (by the fitted step cost).
    pub interactive_slowdown: f64,
    /// Occupancy at which speculation turns off (k shrinks linearly from half of it).
    pub spec_off_occupancy: f64,
    /// Most bytes of KV the prefix cache keeps (0: off).
    pub prefix_cache_bytes: usize,
    /// The share of the prefix cache (0–1) past which a scope makes room only by evicting
    /// its own blocks.
    pub prefix_cache_scope_share: f64,
}

/// Called on the engine thread before each step with the step's number (from 1): a hook
/// for fault injection in tests; the engine runs without one.
pub type StepHook = Box<dyn FnMut(u64) + Send>;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_batch_tokens: 512,
            prefill_chunk: 64,
            max_sequences: 16,
            kv_budget_bytes: 1 << 30,
            queue_capacity: 64,
            tenant_queue_capacity: 32,
            scheduling: crate::scheduler::Scheduling::Fair,
            interactive_slowdown: 1.5,
            spec_off_occupancy: 0.5,
            prefix_cache_bytes: 512 << 20,
            prefix_cache_scope_share: 0.5,
        }
    }
}

pub use crate::telemetry::RouteLabels;

/// A request handed to the engine.
pub struct Submission {
    pub id: RequestId,
    pub prompt: Vec<TokenId>,
    pub params: GenerateParams,
    pub plan: SpecPlan,
    pub drafter: BoxedDrafter,
    pub route: RouteLabels,
    pub events: UnboundedSender<Event>,
    /// A shadow check: record the top-2 logit gap behind every token (see `specgate_policies::shadow_verdict`).
    pub shadow: bool,
    /// Report each generated token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// The grammar the output must follow (a schema, a regex, tool calls).
    pub grammar: Option<Box<dyn specgate_strategies::TokenConstraint>>,
    /// The prefix-cache scope the prompt may hit and fill (None: no caching), derived by the
    /// server from the tenant, never from a request field.
    pub cache: Option<crate::prefix::CacheScope>,
    /// Whose share of the engine it draws on (tenant, weight, tier), from the tenant's limits.
    pub share: crate::scheduler::Share,
    /// Deliver text as each step commits it (a streamed answer). Otherwise the engine holds
    /// it until the end: every delivery wakes a gateway thread, which takes a core from the
    /// forward. Plain decoding of 256 tokens at c = 1, 2 vCPUs: 4.2 → 3.7 ms a step without
    /// the deliveries (medians of 6); on a noisier run, held 5.07 against streamed 5.20.
    pub stream: bool,
}

/// What the engine tells a request, in order: text pieces, then `Done` or `Failed`.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one Done per request
pub enum Event {
    /// Newly committed text (may be empty when held back by a stop string or a partial
    /// character).
    Text {
        text: String,
        /// The log-probabilities of the tokens whose text this event completes (when asked;
        /// the last event carries any left, such as tokens a stop string cut).
        logprobs: Vec<crate::engine::logprobs::TokenLogprob>,
        /// When each step behind this text committed, with the tokens generated by then
        /// (one step when streamed; all of them when held to the end), for latency metrics.
        steps: Vec<(std::time::Instant, usize)>,
    },
    Done(Summary),
    Failed(Failure),
}

/// The end of a request.
#[derive(Debug, Clone)]
pub struct Summary {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache (not computed again).
    pub cached_tokens: usize,
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
    /// A request, and when it was sent: its queue time counts from then, the step in
    /// flight included.
    Submit(Box<Submission>, std::time::Instant),
    Cancel(RequestId),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the server is at capacity ({queued} requests waiting); retry later")]
    QueueFull { queued: usize },
    #[error("this tenant already has {limit} requests waiting (its queue's limit); retry later")]
    TenantQueueFull { limit: usize },
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
    /// Who the waiting requests belong to.
    pub queues: queues::QueueCounts,
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

/// The KV budget admission may promise: the configured one, within a fixed pool where the
/// target's caches live in one (a GPU's), so a pass is never refused for want of blocks.
pub fn budget_within(budget: usize, pool: Option<usize>) -> usize {
    pool.map_or(budget, |p| budget.min(p))
}

/// KV bytes a request reserves: its prompt, its output and one round of drafts (a round
/// appends at most k drafts, chain or tree, before rolling back), in the target's cache
/// (`target_per_token`) and in its drafter's, if it keeps one (a draft model).
pub fn kv_reservation(sub: &Submission, target_per_token: usize) -> usize {
    let tokens = sub.prompt.len() + sub.params.max_tokens + sub.plan.k + 1;
    tokens * (target_per_token + sub.drafter.kv_bytes_per_token())
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
        Self::start_with_hook(lm, config, None)
    }

    /// Start the engine thread, calling `hook` before each step.
    pub fn start_with_hook(
        lm: LoadedModel,
        config: EngineConfig,
        hook: Option<StepHook>,
    ) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(EngineStatus::default());
        status.alive.store(true, Ordering::SeqCst);
        let mut config = config;
        let pool = lm.model.kv_capacity_bytes(config.max_sequences);
        let budget = budget_within(config.kv_budget_bytes, pool);
        if budget < config.kv_budget_bytes {
            eprintln!(
                "specgate: the KV budget ({} MiB) is more than {}'s KV pool holds; admitting \
                 up to {} MiB",
                config.kv_budget_bytes >> 20,
                lm.model.device(),
                budget >> 20
            );
            config.kv_budget_bytes = budget;
        }
        let cfg = lm.model.config();
        let kv_bytes_per_token = cfg.kv_bytes_per_token();
        let context_length = cfg.context_length;
        let config = Arc::new(config);
        let engine = Engine::new(lm, Arc::clone(&config), Arc::clone(&status), rx, hook);
        // The gauges exist (at zero) from start-up, before the first step sets them.
        engine.publish();
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

    /// Whether the engine has room to spare: nothing waiting and at most half the slots
    /// busy (background work such as shadow checks runs only then).
    pub fn is_idle_enough(&self) -> bool {
        self.status.queued.load(Ordering::Relaxed) == 0
            && self.status.live.load(Ordering::Relaxed) * 2 < self.config.max_sequences
    }

    /// Queue a request; refused at once when the queue is full or it could never fit. One
    /// that fits only without its draft model's cache is decoded plainly instead (its usage
    /// says so): speculation is an optimisation, not a reason to refuse.
    pub fn submit(&self, mut sub: Submission) -> Result<(), SubmitError> {
        if !self.is_alive() {
            return Err(SubmitError::EngineDown);
        }
        let budget = self.config.kv_budget_bytes;
        let mut needed = kv_reservation(&sub, self.kv_bytes_per_token);
        if needed > budget && sub.drafter.kv_bytes_per_token() > 0 {
            // Plain, but the drafter still sees the sequence (the tenant's suffix recorder).
            let drafter = std::mem::replace(&mut sub.drafter, Box::new(PlainDrafter));
            sub.drafter = Box::new(specgate_strategies::NoDrafts(drafter));
            sub.plan = SpecPlan::PLAIN;
            sub.params.max_draft_tokens = 0;
            needed = kv_reservation(&sub, self.kv_bytes_per_token);
        }
        if needed > budget {
            return Err(SubmitError::TooLarge { needed, budget });
        }
        let tenant = sub.share.tenant.clone();
        let status = &self.status;
        status.queues.enter(
            &tenant,
            self.config.tenant_queue_capacity,
            self.config.queue_capacity,
            &status.queued,
        )?;
        let sent = std::time::Instant::now();
        self.tx
            .send(Command::Submit(Box::new(sub), sent))
            .map_err(|_| {
                status.queues.leave(&tenant, &status.queued);
                SubmitError::EngineDown
            })
    }

    /// Stop a request and free its cache at the next step (a no-op when it already ended).
    pub fn cancel(&self, id: RequestId) {
        let _ = self.tx.send(Command::Cancel(id));
    }
}

#[cfg(test)]
mod budget_tests {
    use super::budget_within;

    #[test]
    fn a_fixed_pool_caps_the_kv_budget_and_host_memory_does_not() {
        assert_eq!(budget_within(1 << 30, None), 1 << 30);
        assert_eq!(budget_within(1 << 30, Some(256 << 20)), 256 << 20);
        assert_eq!(budget_within(1 << 20, Some(256 << 20)), 1 << 20);
    }
}
