//! Agreement with llama.cpp on the same GGUF: 128 greedy tokens for 6 chat prompts
//! (tests/fixtures/greedy_reference.json, made by scripts/make_reference_fixtures.py).
//! The only divergence allowed is at a near-tie of llama.cpp's own top-2 logits; the
//! comparison ends there (after it the two continuations legitimately differ).
//!
//! How near is near: the fixture records where llama.cpp departs from its own default run
//! when only its arithmetic changes (an f32 KV cache, or the prompt fed one token at a time),
//! and its top-2 gap there. Those self-divergences reach gaps of 0.30 logit units on these
//! prompts, so a 1e-3 band (what the foundation issue asked for) is not met by llama.cpp
//! against itself. The band used here is the largest gap at which llama.cpp departs from
//! itself on the fixture prompts. Our linear layers, norms and RoPE reproduce its arithmetic;
//! attention rounds where ggml's does (f16 query, f16 weights) but sums in another order and
//! uses libm's expf, which is where the remaining drift comes from.

mod common;

use std::collections::HashMap;

use serde::Deserialize;
use specgate::chat::ChatMessage;
use specgate::generate::{generate, GenerateParams};
use specgate::SamplingParams;
use specgate_strategies::PlainDrafter;

#[derive(Deserialize)]
struct Reference {
    greedy_tokens: usize,
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    messages: Vec<ChatMessage>,
    prompt_ids: Vec<u32>,
    output_ids: Vec<u32>,
    top2_gaps: Vec<f32>,
    llama_cpp_self_divergence: HashMap<String, Option<Divergence>>,
}

#[derive(Deserialize)]
struct Divergence {
    top2_gap: f32,
}

/// The largest top-2 gap at which llama.cpp's own variants leave its default output.
fn self_divergence_band(r: &Reference) -> f32 {
    r.prompts
        .iter()
        .flat_map(|p| p.llama_cpp_self_divergence.values().flatten())
        .map(|d| d.top2_gap)
        .fold(0.0, f32::max)
}

#[test]
fn greedy_tokens_equal_llama_cpp_except_at_ties() {
    let reference: Reference =
        serde_json::from_str(&common::fixture("greedy_reference.json")).expect("fixture");
    assert!(reference.prompts.len() >= 5);
    let band = self_divergence_band(&reference);
    assert!(
        band > 0.0 && band < 0.5,
        "implausible self-divergence band {band}"
    );
    eprintln!("near-tie band (llama.cpp against itself): top-2 gap < {band}");
    let mut lm = common::model();
    let lm = &mut *lm;
    let params = GenerateParams {
        max_tokens: reference.greedy_tokens,
        sampling: SamplingParams::greedy(),
        seed: 0,
        stop: vec![],
        max_draft_tokens: 0,
        adaptive_k: false,
    };
    for (n, p) in reference.prompts.iter().enumerate() {
        let text = lm.chat_prompt(&p.messages).unwrap();
        let ids = lm.tokenizer.encode(&text).unwrap();
        assert_eq!(
            ids, p.prompt_ids,
            "prompt {n}: template + tokenizer differ from llama.cpp"
        );
        let out = generate(
            &mut lm.model,
            &lm.tokenizer,
            &ids,
            &params,
            &mut PlainDrafter,
            |_| {},
        )
        .unwrap();
        let same = out
            .token_ids
            .iter()
            .zip(&p.output_ids)
            .take_while(|(a, b)| a == b)
            .count();
        let expected_len = p
            .output_ids
            .iter()
            .filter(|&&t| t != lm.tokenizer.eos())
            .count();
        if same == expected_len && out.token_ids.len() == expected_len {
            eprintln!("prompt {n}: all {same} tokens equal llama.cpp");
            continue;
        }
        let gap = p.top2_gaps[same];
        assert!(
            gap <= band,
            "prompt {n}: diverged from llama.cpp at token {same} where its top-2 gap is {gap} (beyond the near-tie band {band})"
        );
        eprintln!(
            "prompt {n}: equal for {same} tokens, then a near-tie (llama.cpp's top-2 gap {gap:.3})"
        );
    }
}
