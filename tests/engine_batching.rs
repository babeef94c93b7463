//! The engine thread on a tiny random model (fast): continuous batching gives every sequence
//! exactly what it gets alone, caches are freed when sequences end or are abandoned, and
//! admission refuses what cannot fit.

mod common;

use std::time::{Duration, Instant};

use specgate::engine::generate::{generate, GenerateParams};
use specgate::engine::{EngineConfig, EngineHandle, Event, Submission, SubmitError, Summary};
use specgate::scheduler::Share;
use specgate_policies::SpecPlan;
use specgate_strategies::{StrategyKind, TokenId};
use tokio::sync::mpsc;

use common::gated::submit_gated;
use common::tiny::load_tiny_llama as tiny_model;

/// A greedy request of tenant "t".
fn submission(
    engine: &EngineHandle,
    prompt: Vec<TokenId>,
    max_tokens: usize,
    ngram: bool,
) -> (Submission, mpsc::UnboundedReceiver<Event>) {
    common::submit::submission(
        engine,
        prompt,
        max_tokens,
        ngram,
        None,
        &Share::standard("t"),
    )
}

fn params(max_tokens: usize, k: usize) -> GenerateParams {
    common::submit::params(max_tokens, k, None)
}

/// Text and summary of one request.
fn collect(rx: &mut mpsc::UnboundedReceiver<Event>) -> (String, Summary) {
    let mut text = String::new();
    loop {
        match rx.blocking_recv().expect("the engine hung up") {
            Event::Text { text: t, .. } => text += &t,
            Event::Done(s) => return (text, s),
            Event::Failed(why) => panic!("request failed: {why}"),
        }
    }
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_batch_equals_each_sequence_alone_and_frees_every_cache() {
    let (_dir, mut alone) = tiny_model();
    let (_dir2, lm) = tiny_model();
    let engine = EngineHandle::start(
        lm,
        EngineConfig {
            max_batch_tokens: 12,
            prefill_chunk: 3,
            max_sequences: 3,
            // Keep speculating however full: this test is about batching, not load.
            spec_off_occupancy: 10.0,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    // Six prompts for three slots: some wait, long ones prefill in chunks of 3.
    let prompts: Vec<Vec<TokenId>> = (0..6)
        .map(|i| {
            (0..3 + 2 * i)
                .map(|j| 3 + ((i * 7 + j * 3) % 5) as u32)
                .collect()
        })
        .collect();
    // The first request's first draft holds the engine until all six are in, so they share
    // steps however fast the tiny model runs.
    let mut pending = Vec::new();
    let mut open = None;
    for (i, p) in prompts.iter().enumerate() {
        let (sub, rx) = submission(&engine, p.clone(), 20, i % 2 == 0);
        if i == 0 {
            open = Some(submit_gated(&engine, sub));
        } else {
            engine.submit(sub).unwrap();
        }
        pending.push((p.clone(), i % 2 == 0, rx));
    }
    drop(open);
    let mut shared = 0;
    for (prompt, ngram, mut rx) in pending {
        let (text, summary) = collect(&mut rx);
        // The load its rounds ran under, for the learner: 1 to 3 sequences per step.
        assert!(
            (1.0..=3.0).contains(&summary.sequences),
            "{prompt:?}: {} sequences",
            summary.sequences
        );
        shared += usize::from(summary.sequences > 1.0);
        let (plan, mut drafter) = common::submit::drafting(ngram);
        let k = plan.k;
        let lm = &mut alone;
        let want = generate(
            &mut lm.model,
            &lm.tokenizer,
            &prompt,
            &params(20, k),
            &mut *drafter,
            |_| {},
        )
        .unwrap();
        assert_eq!(
            text, want.text,
            "prompt {prompt:?}: batched output differs from alone"
        );
        assert_eq!(summary.completion_tokens, want.generated_tokens);
        assert_eq!(summary.prompt_tokens, prompt.len());
        if ngram {
            assert!(
                summary.stats.drafted > 0,
                "{prompt:?}: the ngram drafter never drafted"
            );
        }
    }
    assert!(shared >= 3, "only {shared} of 6 requests shared a step");
    let status = engine.status();
    wait_until("every cache freed", || {
        status.live.load(std::sync::atomic::Ordering::SeqCst) == 0
            && status.kv_bytes.load(std::sync::atomic::Ordering::SeqCst) == 0
    });
    // Alone, a request's rounds ran with no company.
    let (sub, mut rx) = submission(&engine, prompts[0].clone(), 20, true);
    engine.submit(sub).unwrap();
    assert_eq!(collect(&mut rx).1.sequences, 1.0);
}

/// Before any request the engine has timed its own steps, so the cost model and the drafts'
/// verify-row price start from this machine's figures, and its scratch sequence is gone.
#[test]
fn the_engine_times_its_steps_before_serving() {
    let (_dir, lm) = tiny_model();
    let engine = EngineHandle::start(lm, EngineConfig::default()).unwrap();
    let status = engine.status();
    wait_until("the step-cost fit", || status.step_fit(1).is_some());
    let (t0, t1) = status.step_fit(1).unwrap();
    assert!(t0 > 0.0 && t1 >= 0.0, "{t0} {t1}");
    assert_eq!(status.kv_bytes.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn an_abandoned_request_is_freed_and_admission_refuses_what_cannot_fit() {
    let (_dir, lm) = tiny_model();
    let engine = EngineHandle::start(
        lm,
        EngineConfig {
            max_sequences: 1,
            queue_capacity: 1,
            // Draft however full the engine is, so the gated request reaches its drafter.
            spec_off_occupancy: 10.0,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let status = engine.status();
    let live = || status.live.load(std::sync::atomic::Ordering::SeqCst);

    // A client that goes away after its first piece of text.
    let (sub, mut rx) = submission(&engine, vec![3, 4, 5], 60, false);
    engine.submit(sub).unwrap();
    assert!(matches!(rx.blocking_recv(), Some(Event::Text { .. })));
    drop(rx);
    wait_until("the abandoned sequence to leave", || live() == 0);

    // One slot, one queue place: the third request at once is refused. The first holds
    // the slot until the gate opens (the tiny model would otherwise finish it at once).
    let (sub, rx) = submission(&engine, vec![3, 4, 5], 60, true);
    // Once it drafts, it holds the only slot (the abandoned request is gone) and the engine
    // waits on it.
    let open = submit_gated(&engine, sub);
    let mut keep = vec![rx];
    let mut refused = 0;
    for _ in 0..2 {
        let (sub, rx) = submission(&engine, vec![3, 4, 5], 60, true);
        match engine.submit(sub) {
            Ok(()) => keep.push(rx),
            Err(SubmitError::QueueFull { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(refused, 1, "one slot and one queue place cannot take three");
    drop(open);
    for mut rx in keep {
        collect(&mut rx);
    }

    // A request whose KV reservation exceeds the whole budget is refused outright.
    let small = EngineHandle::start(
        tiny_model().1,
        EngineConfig {
            kv_budget_bytes: 1024,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let (sub, _rx) = submission(&small, vec![3, 4, 5], 60, false);
    assert!(matches!(
        small.submit(sub),
        Err(SubmitError::TooLarge { .. })
    ));
}

#[test]
fn a_draft_models_cache_counts_against_the_kv_budget() {
    let (dir, lm) = tiny_model();
    let per_token = lm.model.config().kv_bytes_per_token();
    let drafter = || {
        specgate::drafting::model_drafter::ModelDrafter::separate(
            &dir.path().join("tiny.gguf"),
            &lm.tokenizer,
            0,
        )
        .expect("the tiny model drafts for itself")
    };
    assert_eq!(
        specgate_strategies::Drafter::kv_bytes_per_token(&drafter()),
        per_token,
        "the draft model is the same tiny model"
    );
    // Room for one request's tokens in the target's cache, not in both caches.
    let (prompt, max_tokens) = (vec![3, 4, 5], 60);
    let tokens = prompt.len() + max_tokens + 1;
    let engine = EngineHandle::start(
        tiny_model().1,
        EngineConfig {
            kv_budget_bytes: tokens * per_token + per_token / 2,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let (plain, mut rx) = submission(&engine, prompt.clone(), max_tokens, false);
    engine.submit(plain).expect("fits the target's cache alone");
    collect(&mut rx);
    let (mut drafted, mut rx) = submission(&engine, prompt.clone(), max_tokens, false);
    // Recorded for the tenant's suffix cache, as the gateway's strategies are.
    let cache = std::sync::Arc::new(std::sync::Mutex::new(
        specgate_strategies::suffix::SuffixCache::new(8, 1 << 12),
    ));
    drafted.drafter = Box::new(specgate_strategies::SuffixRecorder::new(
        Box::new(drafter()),
        cache.clone(),
    ));
    drafted.plan = SpecPlan {
        strategy: StrategyKind::Draft,
        k: 0,
        adaptive: false,
    };
    // Both caches do not fit, the target's does: decoded plainly rather than refused.
    engine
        .submit(drafted)
        .expect("runs without its draft model");
    let (_, summary) = collect(&mut rx);
    assert_eq!(summary.plan, SpecPlan::PLAIN);
    // Its text still reached the tenant's cache: the prompt and every token it generated.
    let cached = cache.lock().unwrap().len_tokens();
    assert_eq!(cached, prompt.len() + summary.stats.committed as usize + 1);
    // Too large even for the target's cache alone: refused outright.
    let (mut huge, _rx) = submission(&engine, prompt, max_tokens + 1, false);
    huge.drafter = Box::new(drafter());
    match engine.submit(huge) {
        Err(SubmitError::TooLarge { needed, .. }) => assert_eq!(needed, (tokens + 1) * per_token),
        other => panic!("expected TooLarge, got {:?}", other.map(|_| ())),
    }
}
