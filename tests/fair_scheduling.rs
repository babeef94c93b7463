//! The engine's scheduler on a tiny random model (fast): a newcomer is served beside a
//! tenant's flood instead of behind it (and behind it under first come, first served), a
//! higher tier's requests pause a lower tier's without changing their output, and a tenant's
//! full queue refuses only that tenant.

mod common;

use std::time::Instant;

use specgate::engine::generate::generate;
use specgate::engine::{EngineConfig, EngineHandle, Event, Submission, SubmitError, Summary};
use specgate::scheduler::{Priority, Scheduling, Share};
use specgate_policies::SpecPlan;
use specgate_strategies::{StrategyKind, TokenId};
use tokio::sync::mpsc;

use common::gated::submit_gated;
use common::tiny::load_tiny_llama as tiny_model;

use common::submit::{drafting, params};

struct Req {
    prompt: Vec<TokenId>,
    max_tokens: usize,
    ngram: bool,
    seed: Option<u64>,
}

impl Req {
    fn new(i: usize, max_tokens: usize) -> Req {
        Req {
            prompt: (0..4 + i)
                .map(|j| 3 + ((i * 7 + j * 3) % 5) as u32)
                .collect(),
            max_tokens,
            ngram: i.is_multiple_of(2),
            seed: (i % 3 == 1).then_some(7 + i as u64),
        }
    }

    fn k(&self) -> usize {
        if self.ngram {
            3
        } else {
            0
        }
    }

    fn submission(
        &self,
        engine: &EngineHandle,
        share: &Share,
    ) -> (Submission, mpsc::UnboundedReceiver<Event>) {
        let (prompt, n) = (self.prompt.clone(), self.max_tokens);
        common::submit::submission(engine, prompt, n, self.ngram, self.seed, share)
    }

    /// Its output decoded alone, outside the engine.
    fn alone(&self, lm: &mut specgate::model::loaded::LoadedModel) -> String {
        let (_, mut drafter) = drafting(self.ngram);
        let p = params(self.max_tokens, self.k(), self.seed);
        generate(
            &mut lm.model,
            &lm.tokenizer,
            &self.prompt,
            &p,
            &mut *drafter,
            |_| {},
        )
        .expect("generate")
        .text
    }
}

/// One request's text, summary, and when the engine committed its first and last tokens
/// (the engine's own clock: the order of steps, not of the threads reading them).
struct Finished {
    text: String,
    summary: Summary,
    first: Instant,
    last: Instant,
}

/// Collect every request, each on its own thread.
fn finish_all(rxs: Vec<mpsc::UnboundedReceiver<Event>>) -> Vec<Finished> {
    let handles: Vec<_> = rxs
        .into_iter()
        .map(|mut rx| {
            std::thread::spawn(move || {
                let (mut text, mut commits) = (String::new(), Vec::new());
                loop {
                    match rx.blocking_recv().expect("the engine hung up") {
                        Event::Text { text: t, steps, .. } => {
                            text += &t;
                            commits.extend(steps.into_iter().map(|(at, _)| at));
                        }
                        Event::Done(summary) => {
                            return Finished {
                                text,
                                summary,
                                first: *commits.iter().min().expect("a commit"),
                                last: *commits.iter().max().expect("a commit"),
                            }
                        }
                        Event::Failed(why) => panic!("request failed: {why}"),
                    }
                }
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("collector"))
        .collect()
}

fn engine(scheduling: Scheduling, slots: usize) -> (tempfile::TempDir, EngineHandle) {
    let (dir, lm) = tiny_model();
    let engine = EngineHandle::start(
        lm,
        EngineConfig {
            max_sequences: slots,
            max_batch_tokens: 64,
            prefill_chunk: 8,
            // Draft however full: the gate is a drafter.
            spec_off_occupancy: 10.0,
            scheduling,
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    (dir, engine)
}

/// Tenant a's first request holds the engine while a queues five more and b sends one.
fn flood_then_one(scheduling: Scheduling) -> (Vec<Instant>, Instant) {
    let (_dir, engine) = engine(scheduling, 2);
    let (a, b) = (Share::standard("a"), Share::standard("b"));
    let first = Req {
        ngram: true,
        ..Req::new(0, 40)
    };
    let (sub, rx) = first.submission(&engine, &a);
    let gate = submit_gated(&engine, sub);
    let mut rxs = vec![rx];
    for i in 1..6 {
        let (sub, rx) = Req::new(i, 40).submission(&engine, &a);
        engine.submit(sub).expect("a's request");
        rxs.push(rx);
    }
    let (sub, rx) = Req::new(9, 5).submission(&engine, &b);
    engine.submit(sub).expect("b's request");
    rxs.push(rx);
    drop(gate);
    let mut ends: Vec<Instant> = finish_all(rxs).into_iter().map(|f| f.last).collect();
    let b_end = ends.pop().expect("b's end");
    (ends, b_end)
}

#[test]
fn a_newcomer_runs_beside_a_flood_not_behind_it() {
    let (a_ends, b_end) = flood_then_one(Scheduling::Fair);
    // b took the second slot at once: it ended before a's second request, which waited
    // for it.
    assert!(b_end < a_ends[1], "b ended after a's second request");
    let (a_ends, b_end) = flood_then_one(Scheduling::Fcfs);
    assert!(
        b_end > a_ends[1] && b_end > a_ends[3],
        "first come, first served: b waits behind a's queue"
    );
}

#[test]
fn a_higher_tier_pauses_a_lower_one_and_changes_none_of_its_output() {
    let (_dir, mut alone) = tiny_model();
    let (_dir2, engine) = engine(Scheduling::Fair, 2);
    let bulk = Share {
        tenant: "bulk".into(),
        weight: 5,
        priority: Priority::Batch,
    };
    let chat = Share {
        tenant: "chat".into(),
        weight: 1,
        priority: Priority::Interactive,
    };
    let batch: Vec<Req> = (0..4).map(|i| Req::new(i, 30)).collect();
    let (sub, rx) = batch[0].submission(&engine, &bulk);
    let gate = submit_gated(
        &engine,
        Submission {
            plan: SpecPlan {
                strategy: StrategyKind::Ngram,
                k: 3,
                adaptive: false,
            },
            ..sub
        },
    );
    let mut rxs = vec![rx];
    for r in &batch[1..] {
        let (sub, rx) = r.submission(&engine, &bulk);
        engine.submit(sub).expect("bulk request");
        rxs.push(rx);
    }
    // The interactive requests arrive while the batch tier runs; both slots go to them.
    let interactive: Vec<Req> = (4..6).map(|i| Req::new(i, 6)).collect();
    for r in &interactive {
        let (sub, rx) = r.submission(&engine, &chat);
        engine.submit(sub).expect("interactive request");
        rxs.push(rx);
    }
    drop(gate);
    let done = finish_all(rxs);
    // While both interactive requests lived, both slots were theirs: the batch requests
    // that were still waiting committed nothing before one of them ended.
    let interactive_end = done[4..].iter().map(|d| d.last).min().expect("ends");
    for d in &done[1..4] {
        assert!(
            d.first > interactive_end,
            "a batch request ran before the interactive tier"
        );
    }
    for (r, d) in batch.iter().chain(&interactive).zip(&done) {
        assert_eq!(
            d.text,
            r.alone(&mut alone),
            "prompt {:?} (seed {:?}): paused or not, the output is the one it has alone",
            r.prompt,
            r.seed
        );
        assert!(d.summary.completion_tokens <= r.max_tokens);
    }
}

#[test]
fn a_full_tenant_queue_refuses_that_tenant_only() {
    let (_dir, lm) = tiny_model();
    let engine = EngineHandle::start(
        lm,
        EngineConfig {
            max_sequences: 1,
            tenant_queue_capacity: 2,
            queue_capacity: 2,
            spec_off_occupancy: 10.0,
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let (a, b) = (Share::standard("a"), Share::standard("b"));
    let first = Req {
        ngram: true,
        ..Req::new(0, 20)
    };
    let (sub, rx) = first.submission(&engine, &a);
    // Holds the only slot: everything after it waits.
    let gate = submit_gated(&engine, sub);
    let mut rxs = vec![rx];
    for i in 1..3 {
        let (sub, rx) = Req::new(i, 5).submission(&engine, &a);
        engine.submit(sub).expect("within a's queue");
        rxs.push(rx);
    }
    let (sub, _rx) = Req::new(3, 5).submission(&engine, &a);
    assert_eq!(
        engine.submit(sub).err(),
        Some(SubmitError::TenantQueueFull { limit: 2 })
    );
    // The server's queue is full too, but b has nothing waiting: b is not turned away.
    let (sub, rx) = Req::new(4, 5).submission(&engine, &b);
    engine.submit(sub).expect("b has a queue of its own");
    rxs.push(rx);
    drop(gate);
    let done = finish_all(rxs);
    // b's request, last to arrive, started before a's queued ones.
    assert!(done[3].first < done[1].first && done[3].first < done[2].first);
}
