//! The request actor, one per request: it asks the planner for a plan and a strategy actor
//! for a drafter, submits the sequence to the engine, relays the engine's events to the HTTP
//! response, records latency metrics and history, may start a shadow check, and cancels the
//! sequence when the client goes away. It only moves messages: the plan comes from
//! `specgate_policies`, drafting and verification run in the engine thread on
//! `specgate_strategies` code. (The planner is in `planner.rs`, strategy actors in
//! `strategy.rs`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use specgate_policies::{SpecPlan, RECALL_MIN_TOKENS};
use specgate_strategies::{recall_window, PredictionDrafter, StrategyKind};

use crate::engine::logprobs::TokenLogprob;
use tokio::sync::{mpsc, oneshot};

use crate::drafting::registry::{BoxedDrafter, SUFFIX_MAX_DEPTH};
use crate::engine::generate::GenerateParams;
use crate::engine::{
    EngineHandle, Event, RequestId, RouteLabels, Submission, SubmitError, Summary,
};
use crate::gateway::actors::history_writer::HistoryWriter;
use crate::gateway::actors::planner::{Observe, PlanFor, Planner};
use crate::gateway::actors::strategy::{Checkout, Recall, Strategies};
use crate::gateway::error::ApiError;
use crate::store::history::LatencyHistogram;
use specgate_policies::SpecOverride;
use specgate_strategies::TokenId;

mod record;

/// What a request actor passes on to the HTTP side.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one Done per request
pub enum Outgoing {
    /// Text and the log-probabilities of the tokens behind it (when asked for).
    Text(String, Vec<TokenLogprob>),
    Done(Summary),
    Failed(crate::engine::Failure),
}

/// A tokenized, validated request ready to run.
pub struct Job {
    pub prompt: Vec<TokenId>,
    pub params: GenerateParams,
    pub route: RouteLabels,
    pub speculation: SpecOverride,
    /// The client's predicted output, tokenized (empty: none).
    pub prediction: Vec<TokenId>,
    /// Report log-probabilities with this many alternatives.
    pub logprobs: Option<usize>,
    /// The client reads the answer as it is generated.
    pub stream: bool,
    /// The grammar the output must follow, compiled at admission.
    pub grammar: Option<Box<dyn specgate_strategies::TokenConstraint>>,
    /// The prefix-cache scope (None: the request opted out).
    pub cache: Option<crate::prefix::CacheScope>,
    /// The tenant's weight and tier in the engine's scheduler.
    pub share: crate::scheduler::Share,
}

/// The actors and the engine a request talks to.
#[derive(Clone)]
pub struct Services {
    pub engine: EngineHandle,
    pub planner: Addr<Planner>,
    pub strategies: Strategies,
    pub history: Addr<HistoryWriter>,
}

pub struct RequestActor {
    id: RequestId,
    job: Option<Job>,
    route: RouteLabels,
    engine: EngineHandle,
    planner: Addr<Planner>,
    strategies: Strategies,
    history: Addr<HistoryWriter>,
    /// A greedy request sampled for a shadow check: its prompt and parameters.
    shadow: Option<(Vec<TokenId>, GenerateParams)>,
    admitted: Option<oneshot::Sender<Result<SpecPlan, ApiError>>>,
    out: mpsc::UnboundedSender<Outgoing>,
    started: Instant,
    last_token: Option<(Instant, usize)>,
    ttft: LatencyHistogram,
    itl: LatencyHistogram,
    finished: bool,
    /// Drafted from the client's prediction or a recalled answer (kept from the learner).
    off_route: bool,
}

impl RequestActor {
    /// Start a request; `admitted` answers once it is queued in the engine (or refused), and
    /// the returned receiver yields its text and its end.
    pub fn launch(
        job: Job,
        services: &Services,
    ) -> (
        oneshot::Receiver<Result<SpecPlan, ApiError>>,
        mpsc::UnboundedReceiver<Outgoing>,
    ) {
        let (admit_tx, admit_rx) = oneshot::channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let actor = RequestActor {
            id: services.engine.next_request_id(),
            route: job.route.clone(),
            job: Some(job),
            engine: services.engine.clone(),
            planner: services.planner.clone(),
            strategies: Arc::clone(&services.strategies),
            history: services.history.clone(),
            shadow: None,
            admitted: Some(admit_tx),
            out: out_tx,
            started: Instant::now(),
            last_token: None,
            ttft: LatencyHistogram::default(),
            itl: LatencyHistogram::default(),
            finished: false,
            off_route: false,
        };
        actor.start();
        (admit_rx, out_rx)
    }

    fn refuse(&mut self, err: ApiError, ctx: &mut Context<Self>) {
        if let Some(tx) = self.admitted.take() {
            let _ = tx.send(Err(err));
        }
        self.finished = true;
        ctx.stop();
    }

    fn labels(&self) -> [(&'static str, String); 2] {
        [
            ("tenant", self.route.tenant.clone()),
            ("class", self.route.class.name().to_string()),
        ]
    }
}

fn submit_error(e: SubmitError) -> ApiError {
    match e {
        SubmitError::QueueFull { .. } | SubmitError::TenantQueueFull { .. } => {
            ApiError::rate_limited(e.to_string(), 1)
        }
        SubmitError::TooLarge { .. } => ApiError::invalid(Some("max_tokens"), e.to_string())
            .with_code("context_length_exceeded"),
        SubmitError::EngineDown => ApiError::unavailable(e.to_string()),
    }
}

impl Actor for RequestActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(job) = self.job.take() else {
            return ctx.stop();
        };
        let planner = self.planner.clone();
        let strategies = Arc::clone(&self.strategies);
        let route = job.route.clone();
        let speculation = job.speculation;
        let seed = job.params.seed;
        let predicted = !job.prediction.is_empty();
        // Only a plan of the planner's own can turn to a recalled answer, and only for a
        // greedy request: a sampled one's answer differs from the earlier by design (at
        // temperature 0.7-1.0 a repeat committed 1.1-2.4 tokens a pass from k = 8 drafts).
        let recall = (!predicted
            && matches!(speculation, SpecOverride::Default)
            && job.params.sampling.is_greedy())
        .then(|| strategies.get(&StrategyKind::Suffix).cloned())
        .flatten()
        .map(|actor| {
            let msg = Recall {
                tenant: route.tenant.clone(),
                prompt: recall_window(&job.prompt, SUFFIX_MAX_DEPTH).to_vec(),
                limit: RECALL_MIN_TOKENS,
            };
            (actor, msg)
        });
        let prepare = async move {
            let recalled = match recall {
                // A lost answer only loses the recall.
                Some((actor, msg)) => actor.send(msg).await.unwrap_or(0),
                None => 0,
            };
            let planned = planner
                .send(PlanFor {
                    route: route.clone(),
                    speculation,
                    predicted,
                    recalled,
                })
                .await
                .map_err(|e| ApiError::internal(format!("planner: {e}")))??;
            let plan = planned.plan;
            let actor = strategies
                .get(&plan.strategy)
                .ok_or_else(|| ApiError::internal(format!("no actor for {}", plan.strategy)))?;
            let drafter = actor
                .send(Checkout {
                    tenant: route.tenant,
                    seed,
                })
                .await
                .map_err(|e| ApiError::internal(format!("strategy actor: {e}")))?;
            Ok::<_, ApiError>((planned, drafter))
        };
        ctx.wait(prepare.into_actor(self).map(move |prepared, act, ctx| {
            let (planned, drafter) = match prepared {
                Ok(p) => p,
                Err(e) => return act.refuse(e, ctx),
            };
            let plan = planned.plan;
            act.off_route = planned.recalled;
            // Sampled here, so only the requests that will be checked keep a copy of their
            // prompt.
            // A constrained answer is not plain decoding's: the check would see a divergence.
            if job.params.sampling.is_greedy()
                && job.grammar.is_none()
                && !plan.is_plain()
                && rand::random::<f64>() < planned.shadow_rate
            {
                act.shadow = Some((job.prompt.clone(), job.params.clone()));
            }
            // A drafter that cannot be built costs the request its speculation, not its answer.
            let (plan, drafter) = match drafter {
                Ok(d) => (plan, d),
                Err(unavailable) => {
                    metrics::counter!("specgate_drafter_build_failures_total").increment(1);
                    log_drafter_unavailable(&unavailable.why);
                    (SpecPlan::PLAIN, unavailable.plain)
                }
            };
            // A prediction drafts first wherever the plan drafts at all (the planner plans a
            // predicted request to draft where that pays, not where load, the policy or the
            // client turned speculation off). Its rounds say nothing about the route's
            // strategy, so the learner does not see them.
            let drafter = if job.prediction.is_empty() || plan.k == 0 {
                drafter
            } else {
                act.off_route = true;
                Box::new(PredictionDrafter::new(job.prediction, drafter)) as BoxedDrafter
            };
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut params = job.params;
            params.max_draft_tokens = plan.k;
            params.adaptive_k = plan.adaptive && plan.k > 0;
            let sub = Submission {
                id: act.id,
                prompt: job.prompt,
                params,
                plan,
                drafter,
                route: job.route,
                events: tx,
                shadow: false,
                logprobs: job.logprobs,
                stream: job.stream,
                grammar: job.grammar,
                cache: job.cache,
                share: job.share,
            };
            if let Err(e) = act.engine.submit(sub) {
                return act.refuse(submit_error(e), ctx);
            }
            Self::add_stream(
                futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)),
                ctx,
            );
            if let Some(admit) = act.admitted.take() {
                let _ = admit.send(Ok(plan));
            }
        }));
        // A client that went away while nothing was being sent (a long prompt, a queue).
        ctx.run_interval(Duration::from_millis(100), |act, ctx| {
            if act.out.is_closed() {
                ctx.stop();
            }
        });
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        if !self.finished {
            self.engine.cancel(self.id);
            metrics::counter!("specgate_requests_total", &self.status_labels("cancelled"))
                .increment(1);
        }
    }
}

fn log_drafter_unavailable(why: &str) {
    eprintln!("specgate: drafter unavailable, running plain: {why}");
}

impl RequestActor {
    fn status_labels(&self, status: &'static str) -> Vec<(&'static str, String)> {
        let mut l = self.labels().to_vec();
        l.push(("status", status.to_string()));
        l
    }

    /// Latency metrics for a step that committed at `now` and brought the total to
    /// `generated`.
    fn observe_tokens(&mut self, now: Instant, generated: usize) {
        let labels = self.labels();
        match self.last_token {
            None if generated > 0 => {
                let secs = (now - self.started).as_secs_f64();
                metrics::histogram!("specgate_time_to_first_token_seconds", &labels).record(secs);
                self.ttft.record(secs);
            }
            Some((at, before)) if generated > before => {
                // A round commits several tokens at once: each is charged its share.
                let n = generated - before;
                let each = (now - at).as_secs_f64() / n as f64;
                for _ in 0..n {
                    metrics::histogram!("specgate_inter_token_latency_seconds", &labels)
                        .record(each);
                    self.itl.record(each);
                }
            }
            _ => return,
        }
        self.last_token = Some((now, generated));
    }
}

impl StreamHandler<Event> for RequestActor {
    fn handle(&mut self, event: Event, ctx: &mut Context<Self>) {
        let outgoing = match event {
            Event::Text {
                text,
                logprobs,
                steps,
            } => {
                for (at, generated) in steps {
                    self.observe_tokens(at, generated);
                }
                Outgoing::Text(text, logprobs)
            }
            Event::Done(summary) => {
                self.finished = true;
                if !self.off_route {
                    self.planner.do_send(Observe {
                        route: self.route.clone(),
                        summary: summary.clone(),
                    });
                }
                self.history.do_send(self.history_record(&summary));
                self.maybe_shadow_check(&summary);
                let labels = self.labels();
                metrics::histogram!("specgate_e2e_request_latency_seconds", &labels)
                    .record(self.started.elapsed().as_secs_f64());
                metrics::counter!("specgate_prompt_tokens_total", &labels)
                    .increment(summary.prompt_tokens as u64);
                metrics::counter!("specgate_generation_tokens_total", &labels)
                    .increment(summary.completion_tokens as u64);
                metrics::counter!("specgate_requests_total", &self.status_labels("ok"))
                    .increment(1);
                if let Some(p) = summary.prediction {
                    for (outcome, n) in [("accepted", p.accepted), ("rejected", p.rejected)] {
                        let mut l = self.labels().to_vec();
                        l.push(("outcome", outcome.to_string()));
                        metrics::counter!("specgate_prediction_tokens_total", &l).increment(n);
                    }
                }
                Outgoing::Done(summary)
            }
            Event::Failed(why) => {
                self.finished = true;
                metrics::counter!("specgate_requests_total", &self.status_labels("error"))
                    .increment(1);
                Outgoing::Failed(why)
            }
        };
        let end = self.finished;
        if self.out.send(outgoing).is_err() || end {
            ctx.stop();
        }
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        if !self.finished {
            self.finished = true;
            let failure = crate::engine::Failure::server("the engine stopped");
            let _ = self.out.send(Outgoing::Failed(failure));
        }
        ctx.stop();
    }
}
