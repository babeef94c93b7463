//! Speculative decoding on the real model: greedy output equals plain greedy output token for
//! token for every strategy and k (fixed or adaptive) on every shipped prompt, and rollback leaves the target's
//! cache exactly as if the final sequence had been fed from scratch.

mod common;

use std::path::PathBuf;

use specgate::drafting::registry::{BoxedDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER};
use specgate::engine::generate::{generate, generate_in, GenerateParams};
use specgate::model::chat_template::ChatMessage;
use specgate::model::LogitRows;
use specgate::tools::prompts::load_prompt_sets;
use specgate_strategies::{NgramDrafter, PlainDrafter, SuffixCache};
use std::sync::{Arc, Mutex};

const TOKENS: usize = 40;
/// A numerical tie: where plain decoding's top-2 logits are this close, either is greedy.
const TIE: f32 = 1e-3;

fn params(k: usize) -> GenerateParams {
    GenerateParams::greedy(TOKENS, k)
}

/// One drafter per strategy, built once (model drafters load weights) and reused.
/// The separate draft model is the target's own file: same vocabulary, and a check that a
/// draft which computes exactly the target's argmax is always accepted.
fn drafters(lm: &specgate::model::loaded::LoadedModel) -> Vec<(StrategyKind, BoxedDrafter)> {
    let cfg = DrafterConfig {
        target_path: common::model_path(),
        draft_model: Some(common::model_path()),
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: Some(Arc::new(Mutex::new(SuffixCache::new(8, 1 << 16)))),
        // The shipped answer corpus, as the gateway serves with it.
        corpus: specgate::drafting::answer_corpus::CorpusSource::Default
            .load(&common::model_path(), &lm.tokenizer, 8)
            .unwrap(),
        seed: 0,
        medusa_heads: None,
        eagle_layer: None,
    };
    common::every_drafter(&cfg, &lm.tokenizer)
}

#[test]
fn greedy_speculative_equals_plain_for_every_strategy_and_k() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prompts");
    let sets = load_prompt_sets(&dir).unwrap();
    let mut lm = common::model();
    let lm = &mut *lm;
    let mut drafters = drafters(lm);
    // scripts/gpu-check runs a few prompts a set on the GPU within its time limit.
    let per_set = std::env::var("SPECGATE_TEST_PROMPTS_PER_SET")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    let (mut checked, mut ties, mut prompts) = (0, 0, 0);
    for set in &sets {
        assert!(
            set.prompts.len() >= 10,
            "{} has {} prompts",
            set.name,
            set.prompts.len()
        );
        for (n, prompt) in set.prompts.iter().enumerate().take(per_set) {
            prompts += 1;
            let text = lm.chat_prompt(&[ChatMessage::new("user", prompt)]).unwrap();
            let ids = lm.tokenizer.encode(&text).unwrap();
            let (runs, t) = common::speculation::every_drafter_equals_plain(
                lm,
                &ids,
                TOKENS,
                &mut drafters,
                TIE,
                &format!("{} #{n}", set.name),
            );
            checked += runs;
            ties += t;
        }
    }
    eprintln!(
        "{checked} speculative runs equal plain greedy over {prompts} prompts on {}; {ties} \
         ended at numerical ties",
        lm.model.device()
    );
    assert!(checked >= 12 * prompts && prompts >= 4);
}

#[test]
fn rollback_leaves_the_cache_as_if_fed_from_scratch() {
    let mut lm = common::model();
    let lm = &mut *lm;
    let text = lm
        .chat_prompt(&[ChatMessage::new(
            "user",
            "Repeat this list twice: apple, banana, cherry, date, elderberry, fig, grape.",
        )])
        .unwrap();
    let ids = lm.tokenizer.encode(&text).unwrap();
    let seq = lm.model.new_sequence();
    let p = GenerateParams {
        max_tokens: 96,
        ..params(6)
    };
    let out = generate_in(
        &mut lm.model,
        seq,
        &lm.tokenizer,
        &ids,
        &p,
        &mut NgramDrafter::default(),
        |_| {},
    )
    .unwrap();
    assert!(
        out.stats.accepted > 0 && out.stats.drafted > out.stats.accepted,
        "drafts were both accepted and rejected"
    );
    let fresh = lm.model.new_sequence();
    let mut all = ids.clone();
    all.extend_from_slice(&out.token_ids);
    // The last committed token was never fed to the target (nothing followed it).
    let in_cache = lm.model.seq_len(seq).unwrap();
    assert!(
        in_cache == all.len() - 1 || in_cache == all.len(),
        "cache holds {in_cache} of {}",
        all.len()
    );
    lm.model
        .forward_one(fresh, &all[..in_cache], LogitRows::None)
        .unwrap();
    for layer in 0..lm.model.config().n_layers {
        let (a, b) = (
            lm.model.kv_layer(seq, layer),
            lm.model.kv_layer(fresh, layer),
        );
        assert_eq!(a.unwrap(), b.unwrap(), "layer {layer}");
    }
    lm.model.release(seq);
    lm.model.release(fresh);
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    use specgate::drafting::model_drafter::ModelDrafter;
    use specgate::model::loaded::LoadedModel;
    let dir = std::env::temp_dir().join(format!("specgate-tiny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tiny = dir.join("tiny.gguf");
    common::tiny::write_tiny_llama(&tiny);
    // The file itself is a working model: the refusal is about its vocabulary alone.
    let mut small = LoadedModel::load(&tiny).unwrap();
    let p = GenerateParams {
        max_tokens: 5,
        ..params(0)
    };
    let ids = small.tokenizer.encode("ab c").unwrap();
    let out = generate(
        &mut small.model,
        &small.tokenizer,
        &ids,
        &p,
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    assert!(out.token_ids.iter().all(|&t| t < 8));
    let lm = common::model();
    let err = ModelDrafter::separate(&tiny, &lm.tokenizer, 0)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("vocabulary"), "{err}");
    // Through the CLI: one line, non-zero exit.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
        .args([
            "generate",
            "--model",
            common::model_path().to_str().unwrap(),
            "--prompt",
            "hi",
        ])
        .args([
            "--strategy",
            "draft",
            "--draft-model",
            tiny.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(
        !cli.status.success()
            && stderr.trim().lines().count() == 1
            && stderr.contains("vocabulary"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_long_prompt_reaches_the_draft_model_a_chunk_a_round_and_drafts_as_if_fed_at_once() {
    use specgate::drafting::model_drafter::{ModelDrafter, CATCH_UP_CHUNK};
    use specgate_strategies::{DraftContext, Drafter, SamplingParams};
    let lm = common::model();
    let text = "fn area(w: u32, h: u32) -> u32 { w * h }\n".repeat(40);
    let tokens = lm.tokenizer.encode(&text).unwrap();
    assert!(tokens.len() > 2 * CATCH_UP_CHUNK, "{}", tokens.len());
    let sampling = SamplingParams::greedy();
    let ctx = DraftContext {
        tokens: &tokens,
        prompt_len: tokens.len(),
        sampling: &sampling,
        hidden: None,
        fresh_hidden: &[],
        row_cost: None,
    };
    let early_exit = || ModelDrafter::early_exit(&common::model_path(), DEFAULT_EXIT_LAYER, 0);
    // Each round takes one chunk in and drafts nothing, until the last chunk.
    let mut chunked = early_exit().unwrap();
    let mut rounds = 1;
    let draft = loop {
        let d = chunked.propose(&ctx, 4).unwrap();
        if !d.is_empty() {
            break d;
        }
        rounds += 1;
        assert!(rounds <= tokens.len(), "never drafted");
    };
    assert_eq!(rounds, tokens.len().div_ceil(CATCH_UP_CHUNK));
    assert_eq!(draft.len(), 4);
    // The same draft as a drafter that took the whole prompt at once.
    let mut whole = early_exit().unwrap().with_catch_up_chunk(usize::MAX);
    assert_eq!(whole.propose(&ctx, 4).unwrap().tokens, draft.tokens);
    // Rounds that draft nothing (adaptive k on plain) carry the catch-up on at each commit,
    // so the next proposal drafts at once.
    let mut on_plain = early_exit().unwrap();
    assert!(on_plain.propose(&ctx, 4).unwrap().is_empty());
    for _ in 2..rounds {
        on_plain.on_commit(&ctx, 0);
    }
    assert_eq!(on_plain.propose(&ctx, 4).unwrap().tokens, draft.tokens);
}

/// Penalties and logit bias shape every verify row as plain decoding's own row after the
/// same tokens: greedy speculation with each setting equals plain greedy with it, for every
/// strategy and k, and each setting changes the answer (so the check has something to see).
#[test]
fn greedy_speculation_with_penalties_equals_plain_with_the_same_penalties() {
    use specgate_strategies::Penalties;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prompts");
    let sets = load_prompt_sets(&dir).unwrap();
    let mut lm = common::model();
    let lm = &mut *lm;
    let mut drafters = drafters(lm);
    let penalties = |presence, frequency, repetition| Penalties {
        presence,
        frequency,
        repetition,
        logit_bias: vec![],
    };
    let mut settings = vec![
        ("presence 1.5", penalties(1.5, 0.0, 1.0)),
        ("frequency 1.0", penalties(0.0, 1.0, 1.0)),
        ("repetition 1.5", penalties(0.0, 0.0, 1.5)),
        ("all three", penalties(0.4, 0.6, 1.2)),
    ];
    // The bias bans the tokens of the unpenalised answer's first line but one.
    settings.push(("logit_bias", Penalties::none()));
    for (n, (name, p)) in settings.iter_mut().enumerate() {
        let set = &sets[n % sets.len()];
        let text = lm
            .chat_prompt(&[ChatMessage::new("user", &set.prompts[1])])
            .unwrap();
        let ids = lm.tokenizer.encode(&text).unwrap();
        let unpenalised = generate(
            &mut lm.model,
            &lm.tokenizer,
            &ids,
            &params(0),
            &mut PlainDrafter,
            |_| {},
        )
        .unwrap();
        if p.is_none() {
            p.logit_bias = unpenalised.token_ids[1..8]
                .iter()
                .map(|&t| (t, -100.0))
                .collect();
        }
        let base = GenerateParams {
            penalties: p.clone(),
            ..params(0)
        };
        let label = format!("{name} on {} #1", set.name);
        let (plain, (runs, _)) = common::speculation::every_drafter_equals_plain_with(
            lm,
            &ids,
            &base,
            &mut drafters,
            TIE,
            &label,
        );
        assert_ne!(plain, unpenalised.token_ids, "{label}: changed nothing");
        assert_eq!(runs, drafters.len() * 4, "{label}");
    }
}
