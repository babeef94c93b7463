//! Generation on the real model: determinism, seeded sampling, stop strings, EOS.

mod common;

use specgate::engine::generate::{generate, FinishReason, GenerateParams};
use specgate::model::chat_template::ChatMessage;
use specgate::SamplingParams;
use specgate_strategies::PlainDrafter;

fn params(sampling: SamplingParams, seed: u64, max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampling,
        seed,
        stop: vec![],
        max_draft_tokens: 0,
        adaptive_k: false,
        row_cost: None,
        penalties: Default::default(),
    }
}

fn chat_ids(text: &str) -> Vec<u32> {
    let lm = common::model();
    let prompt = lm.chat_prompt(&[ChatMessage::new("user", text)]).unwrap();
    lm.tokenizer.encode(&prompt).unwrap()
}

#[test]
fn greedy_is_deterministic() {
    let ids = chat_ids("Name three colours.");
    let mut lm = common::model();
    let lm = &mut *lm;
    let p = params(SamplingParams::greedy(), 0, 40);
    let a = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &p,
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    let b = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &p,
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    assert!(!a.token_ids.is_empty());
    assert_eq!(
        lm.model.live_sequences(),
        0,
        "generation frees its sequence"
    );
}

#[test]
fn seeded_sampling_is_reproducible_and_seeds_differ() {
    let ids = chat_ids("Write a poem about the sea.");
    let mut lm = common::model();
    let lm = &mut *lm;
    let s = SamplingParams {
        temperature: 1.0,
        top_k: 50,
        top_p: 0.95,
        min_p: 0.0,
    };
    let run = |lm: &mut specgate::model::loaded::LoadedModel, seed| {
        generate(
            &mut lm.model,
            &lm.tokenizer,
            &ids,
            &params(s, seed, 32),
            &mut PlainDrafter,
            |_| {},
        )
        .unwrap()
        .token_ids
    };
    let a = run(lm, 42);
    assert_eq!(a, run(lm, 42));
    let others: Vec<_> = (43..46).map(|seed| run(lm, seed)).collect();
    assert!(
        others.iter().any(|o| *o != a),
        "different seeds should give different text"
    );
}

#[test]
fn stop_strings_end_generation_before_the_stop() {
    let ids = chat_ids("Count from one to ten.");
    let mut lm = common::model();
    let lm = &mut *lm;
    let full = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &params(SamplingParams::greedy(), 0, 48),
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    // Stop at a three-character string taken from the middle of the unstopped output.
    let stop: String = full.text.chars().skip(8).take(3).collect();
    assert_eq!(stop.chars().count(), 3, "output too short: {:?}", full.text);
    let comma = full.text.find(&stop).unwrap();
    let mut p = params(SamplingParams::greedy(), 0, 48);
    p.stop = vec![stop, "never appears §§".into()];
    let mut streamed = String::new();
    let out = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &p,
        &mut PlainDrafter,
        |s| streamed += s,
    )
    .unwrap();
    assert_eq!(out.text, full.text[..comma]);
    assert_eq!(streamed, out.text);
    assert_eq!(out.finish_reason, FinishReason::Stop);
}

#[test]
fn eos_ends_generation_and_max_tokens_bounds_it() {
    let ids = chat_ids("Say just the word yes.");
    let mut lm = common::model();
    let lm = &mut *lm;
    let out = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &params(SamplingParams::greedy(), 0, 64),
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    assert_eq!(out.finish_reason, FinishReason::Stop, "{:?}", out.text);
    assert!(
        !out.token_ids.contains(&lm.tokenizer.eos()),
        "EOS is not part of the output"
    );
    let short = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &params(SamplingParams::greedy(), 0, 1),
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    assert_eq!(
        (short.generated_tokens, short.finish_reason),
        (1, FinishReason::Length)
    );
    assert_eq!(short.token_ids[..], out.token_ids[..1]);
}
