//! The prefix cache is exact: a sequence started from cached blocks computes the same logits,
//! bit for bit, as one that prefilled everything; rollbacks and tree compaction never write a
//! cached block; the engine reuses a conversation's earlier turns for every strategy and for
//! sampled output without changing a token; over HTTP, a tenant hits only its own scope
//! unless an admin shares one, and usage reports the hits on both endpoints.

mod common;

use specgate::drafting::registry::{BuildDrafter, StrategyKind};
use specgate::engine::generate::GenerateParams;
use specgate::engine::logprobs::TokenLogprob;
use specgate::engine::{EngineConfig, EngineHandle, Event, RouteLabels, Submission, Summary};
use specgate::model::loaded::LoadedModel;
use specgate::model::{LogitRows, TargetBackend};
use specgate::prefix::{BlockId, CacheScope, BLOCK_TOKENS};
use specgate::SamplingParams;
use specgate_policies::{SpecPlan, WorkloadClass};
use specgate_strategies::{argmax, TokenId};
use tokio::sync::mpsc;

use common::server::Server;
use common::{lean_drafter_config, max_abs_diff, model_path, on_every_device};
use serde_json::{json, Value};

/// A prompt of `n` tokens from the model's own text.
fn prompt(lm: &LoadedModel, n: usize) -> Vec<TokenId> {
    let text = common::fixture("prompts/rag.jsonl");
    let ids = lm.tokenizer.encode(&text).expect("encode");
    assert!(ids.len() >= n, "the fixture is shorter than {n} tokens");
    ids[..n].to_vec()
}

/// Greedy decoding of `steps` tokens on `seq` after its last row `row`: every row's logits.
fn decode(
    model: &mut dyn TargetBackend,
    seq: specgate::model::SeqId,
    row: Vec<f32>,
    steps: usize,
) -> Vec<Vec<f32>> {
    let mut rows = vec![row];
    for _ in 0..steps {
        let next = argmax(rows.last().expect("a row"));
        let out = model
            .forward_one(seq, &[next], LogitRows::Last)
            .expect("decode");
        rows.push(out.row(0, 0).to_vec());
    }
    rows
}

#[test]
fn a_sequence_started_from_cached_blocks_computes_the_same_logits_bit_for_bit() {
    on_every_device("prefix cache exactness", |lm| {
        if !lm.model.keeps_blocks() {
            eprintln!(
                "skipped: {} keeps no prefix-cache blocks",
                lm.model.device()
            );
            return;
        }
        let p = prompt(lm, 3 * BLOCK_TOKENS + 5);
        let model = &mut lm.model;
        let full = model.new_sequence();
        let out = model
            .forward_one(full, &p, LogitRows::Last)
            .expect("prefill");
        let blocks: Vec<BlockId> = (0..3).map(|i| BlockId(1000 + i)).collect();
        for (i, &id) in blocks.iter().enumerate() {
            let first = i * BLOCK_TOKENS;
            model
                .store_block(full, id, first, BLOCK_TOKENS)
                .expect("store");
        }
        let want = decode(&mut **model, full, out.row(0, 0).to_vec(), 8);

        let hit = model.new_sequence_from(&blocks).expect("start from blocks");
        assert_eq!(model.seq_len(hit), Some(3 * BLOCK_TOKENS));
        let rest = model
            .forward_one(hit, &p[3 * BLOCK_TOKENS..], LogitRows::Last)
            .expect("rest");
        let got = decode(&mut **model, hit, rest.row(0, 0).to_vec(), 8);
        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                max_abs_diff(a, b),
                0.0,
                "row {i}: a reused prefix changed the logits"
            );
        }
        model.release(full);
        model.release(hit);
        model.drop_blocks(&blocks);
        assert_eq!(model.block_bytes(), 0);
        assert!(
            model.new_sequence_from(&blocks).is_err(),
            "dropped blocks are gone"
        );
    });
}

#[test]
fn rollbacks_and_tree_compaction_never_change_a_cached_block() {
    on_every_device("prefix cache read-only blocks", |lm| {
        if !lm.model.keeps_blocks() {
            eprintln!(
                "skipped: {} keeps no prefix-cache blocks",
                lm.model.device()
            );
            return;
        }
        let p = prompt(lm, 2 * BLOCK_TOKENS);
        let model = &mut lm.model;
        let layers = model.config().n_layers;
        let owner = model.new_sequence();
        model
            .forward_one(owner, &p, LogitRows::None)
            .expect("prefill");
        let blocks = [BlockId(1), BlockId(2)];
        model
            .store_block(owner, blocks[0], 0, BLOCK_TOKENS)
            .expect("store");
        model
            .store_block(owner, blocks[1], BLOCK_TOKENS, BLOCK_TOKENS)
            .expect("store");
        let snapshot = |model: &mut Box<dyn TargetBackend>| {
            let s = model.new_sequence_from(&blocks).expect("start");
            let kv: Vec<_> = (0..layers)
                .map(|l| model.kv_layer(s, l).expect("layer"))
                .collect();
            model.release(s);
            kv
        };
        let before = snapshot(model);
        // The owner and a sequence started from the blocks both roll back into the cached
        // range, compact a tree pass there, append over it and end.
        for seq in [owner, model.new_sequence_from(&blocks).expect("start")] {
            model.truncate(seq, 5).expect("truncate");
            model
                .forward_one(seq, &p[20..26], LogitRows::All)
                .expect("append");
            model.keep_rows(seq, 6, &[0, 2, 4]).expect("keep_rows");
            model
                .forward_one(seq, &p[3..30], LogitRows::None)
                .expect("append");
            model.release(seq);
        }
        assert_eq!(snapshot(model), before, "a cached block was written");
        model.drop_blocks(&blocks);
    });
}

fn params(max_tokens: usize, k: usize, sampling: SamplingParams) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampling,
        seed: 7,
        stop: Vec::new(),
        max_draft_tokens: k,
        adaptive_k: false,
        row_cost: None,
        penalties: Default::default(),
    }
}

/// Run one request to its end: its tokens, logprobs and summary.
fn run(
    engine: &EngineHandle,
    prompt: &[TokenId],
    kind: StrategyKind,
    drafter: specgate::drafting::registry::BoxedDrafter,
    sampling: SamplingParams,
    cache: Option<CacheScope>,
) -> (Vec<TokenLogprob>, Summary) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let k = if kind == StrategyKind::Plain { 0 } else { 4 };
    let plan = SpecPlan {
        strategy: kind,
        k,
        adaptive: false,
    };
    engine
        .submit(Submission {
            id: engine.next_request_id(),
            prompt: prompt.to_vec(),
            params: params(24, k, sampling),
            plan,
            drafter,
            route: RouteLabels {
                tenant: "t".into(),
                class: WorkloadClass::Chat,
            },
            events: tx,
            shadow: false,
            logprobs: Some(2),
            stream: false,
            grammar: None,
            cache,
            share: specgate::scheduler::Share::standard("t"),
        })
        .expect("submit");
    let mut logprobs = Vec::new();
    loop {
        match rx.blocking_recv().expect("an event") {
            Event::Text { logprobs: l, .. } => logprobs.extend(l),
            Event::Done(s) => return (logprobs, s),
            Event::Failed(e) => panic!("{kind:?}: {e}"),
        }
    }
}

/// A conversation's second turn hits its first (prompt and answer), and the answer with the
/// hit equals the answer without, token for token and log-probability for log-probability.
fn second_turns_equal(path: &std::path::Path, kinds: &[StrategyKind], what: &str) {
    let lm = LoadedModel::load(path).expect("load");
    let tok = lm.tokenizer.clone();
    let first = prompt(&lm, 100);
    let engine = EngineHandle::start(
        lm,
        EngineConfig {
            spec_off_occupancy: 10.0,
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let cfg = lean_drafter_config(path.to_path_buf(), 0);
    let follow_up = tok.encode(" Summarise that in one line.").expect("encode");
    for (n, &kind) in kinds.iter().enumerate() {
        let scope = Some(CacheScope(n as u64 + 1));
        let build = || kind.build(&cfg, &tok).expect("drafter");
        let sampled = SamplingParams {
            temperature: 0.8,
            top_p: 0.95,
            ..SamplingParams::greedy()
        };
        // Sampled answers are compared seed for seed where the drafts cannot depend on the
        // engine's measured step times (other drafters size their drafts by them, and other
        // drafts draw other, equally distributed, samples): plain decoding, the target's own
        // distribution, and n-grams.
        let timing_free = matches!(kind, StrategyKind::Plain | StrategyKind::Ngram);
        let samplings = if timing_free {
            vec![SamplingParams::greedy(), sampled]
        } else {
            vec![SamplingParams::greedy()]
        };
        for sampling in samplings {
            let (_, turn1) = run(&engine, &first, kind, build(), sampling, scope);
            let second = [&first[..], &turn1.token_ids, &follow_up].concat();
            let (want_lp, want) = run(&engine, &second, kind, build(), sampling, None);
            let (got_lp, got) = run(&engine, &second, kind, build(), sampling, scope);
            let label = format!("{what} {kind:?} temperature {}", sampling.temperature);
            assert_eq!(want.cached_tokens, 0);
            assert!(
                got.cached_tokens >= first.len() / BLOCK_TOKENS * BLOCK_TOKENS,
                "{label}: {} tokens cached of {}",
                got.cached_tokens,
                second.len()
            );
            assert_eq!(
                got.token_ids, want.token_ids,
                "{label}: the answer changed with the cache"
            );
            let bits = |l: &[TokenLogprob]| {
                l.iter()
                    .map(|t| (t.token, t.logprob.to_bits()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                bits(&got_lp),
                bits(&want_lp),
                "{label}: log-probabilities changed"
            );
        }
    }
}

#[test]
fn every_strategy_answers_a_cached_conversation_exactly_as_an_uncached_one() {
    let mut kinds = StrategyKind::ALL.to_vec();
    kinds.retain(|k| *k != StrategyKind::Draft); // no draft model in the lean config
    second_turns_equal(&model_path(), &kinds, "default model");
}

#[test]
fn gemma_answers_a_cached_conversation_exactly_as_an_uncached_one() {
    let kinds = [
        StrategyKind::Plain,
        StrategyKind::Ngram,
        StrategyKind::EarlyExit,
    ];
    second_turns_equal(&common::gemma_path(), &kinds, "gemma");
}

fn cached(usage: &Value) -> u64 {
    usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("usage without cached_tokens: {usage}"))
}

#[test]
fn a_tenant_hits_only_its_own_cached_prompts_unless_an_admin_shares_a_scope() {
    let server = Server::start(&[]);
    let (a, b, c) = (server.tenant("a"), server.tenant("b"), server.tenant("c"));
    let system = common::fixture("prompts/rag.jsonl");
    let body = |question: &str, extra: Value| {
        let mut body = json!({
            "model": server.model_id,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "max_tokens": 4,
            "temperature": 0,
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        body
    };
    let chat = |key: &str, question: &str, extra: Value| {
        let (status, r) = server.post("/v1/chat/completions", key, &body(question, extra));
        assert_eq!(status, 200, "{r}");
        r["usage"].clone()
    };
    let first = chat(&a, "Who wrote it?", json!({}));
    assert_eq!(cached(&first), 0);
    let again = chat(&a, "When?", json!({}));
    let prompt = again["prompt_tokens"].as_u64().expect("prompt_tokens");
    assert!(
        cached(&again) >= 300,
        "a's second question reused {} of {prompt}",
        cached(&again)
    );
    assert!(cached(&again) < prompt);
    // Another tenant sending the very same prompt computes all of it.
    assert_eq!(cached(&chat(&b, "When?", json!({}))), 0, "b hit a's cache");
    // A request may opt out: nothing reused.
    assert_eq!(
        cached(&chat(&a, "When?", json!({"cache_prompt": false}))),
        0
    );
    // A field of the body cannot name a scope.
    let (status, _) = server.post(
        "/v1/chat/completions",
        &b,
        &body("When?", json!({"cache_salt": "a"})),
    );
    assert_eq!(status, 400);

    // An admin puts b and c in one scope: c hits what b sent there.
    for t in ["b", "c"] {
        let (status, r) = server.admin(
            "PUT",
            &format!("/admin/v1/tenants/{t}/limits"),
            Some(json!({"cache_scope": "team"})),
        );
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["overrides"]["cache_scope"], "team");
    }
    let (status, _) = server.admin(
        "PUT",
        "/admin/v1/tenants/c/limits",
        Some(json!({"cache_scope": ""})),
    );
    assert_eq!(status, 400);
    assert_eq!(
        cached(&chat(&b, "Where?", json!({}))),
        0,
        "the shared scope starts empty"
    );
    assert!(
        cached(&chat(&c, "Where?", json!({}))) >= 300,
        "c missed what b sent in their scope"
    );
    assert_eq!(cached(&chat(&a, "Where?", json!({}))) % 16, 0);

    // Structured output over a cached prompt: the same JSON as over a computed one.
    let schema = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "who",
        "schema": {"type": "object", "properties": {"author": {"type": "string"}},
                   "required": ["author"], "additionalProperties": false}}},
        "max_tokens": 24});
    let structured = |extra: Value| {
        let mut extra = extra;
        extra
            .as_object_mut()
            .unwrap()
            .extend(schema.as_object().unwrap().clone());
        let (status, r) = server.post("/v1/chat/completions", &a, &body("Who wrote it?", extra));
        assert_eq!(status, 200, "{r}");
        (
            r["choices"][0]["message"]["content"].clone(),
            cached(&r["usage"]),
        )
    };
    let (computed, none) = structured(json!({"cache_prompt": false}));
    let (reused, hit) = structured(json!({}));
    assert_eq!((none, &reused), (0, &computed));
    assert!(hit >= 300, "the structured request reused {hit}");

    // Streamed usage (both endpoints) carries the field too.
    let streamed = server.stream(
        "/v1/chat/completions",
        &a,
        &body(
            "When?",
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
    );
    assert!(cached(&streamed.usage.expect("usage chunk")) >= 300);
    let text = json!({"model": server.model_id, "prompt": system, "max_tokens": 2, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true}});
    server.stream("/v1/completions", &a, &text);
    let again = server.stream("/v1/completions", &a, &text);
    assert!(cached(&again.usage.expect("usage chunk")) >= 300);

    let (queried, hits) = (
        server.metric("specgate_prefix_cache_queries_total"),
        server.metric("specgate_prefix_cache_hits_total"),
    );
    assert!(
        hits >= 1200.0 && queried > hits,
        "queried {queried}, hit {hits}"
    );
    assert!(server.metric("specgate_prefix_cache_bytes") > 0.0);
}
