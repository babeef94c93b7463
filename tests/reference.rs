//! Agreement with llama.cpp on the same GGUF: its 128 greedy tokens for 8 chat prompts
//! (tests/fixtures/greedy_reference.json, made by scripts/make_reference_fixtures.py).
//!
//! The comparison is teacher-forced: we feed llama.cpp's own output and check, at each of
//! its 1 024 positions, that our argmax is the token llama.cpp chose. (Comparing free-running
//! generations only tells where the first near-tie falls; after it the continuations
//! legitimately differ.)
//!
//! Why not every position: two engines that round differently disagree at near-ties, and
//! 8-bit activation quantization turns last-bit differences upstream into logit shifts of a
//! few tenths (a value that lands on a rounding boundary moves by a whole quantization step).
//! llama.cpp against itself shows it: the fixture records where llama.cpp leaves its own
//! default output when only its arithmetic changes (an f32 KV cache, or the prompt fed one
//! token at a time), at top-2 gaps of up to 0.30 logit units on these prompts. Our kernels
//! sum in another order than ggml's (blocks in one chain per output feature rather than in
//! eight lanes; attention likewise) and use libm's expf. So: at least 96% of positions agree,
//! and every disagreement is at a position where llama.cpp's own top-2 gap is under twice
//! the self-divergence band (measured: 998 of 1 024 agree; the largest gap at a disagreement
//! is 0.50, the others at most 0.18). A broken forward pass agrees on far fewer.

mod common;

use std::collections::HashMap;

use serde::Deserialize;
use specgate::model::chat_template::ChatMessage;
use specgate::model::LogitRows;

#[derive(Deserialize)]
struct Reference {
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
fn greedy_argmax_equals_llama_cpp_except_at_near_ties() {
    let reference: Reference =
        serde_json::from_str(&common::fixture("greedy_reference.json")).expect("fixture");
    assert!(reference.prompts.len() >= 5);
    let band = 2.0 * self_divergence_band(&reference);
    assert!(
        band > 0.0 && band < 1.0,
        "implausible self-divergence band {band}"
    );
    let mut lm = common::model();
    let lm = &mut *lm;
    let (mut positions, mut disagreements) = (0usize, Vec::new());
    for (n, p) in reference.prompts.iter().enumerate() {
        let text = lm.chat_prompt(&p.messages).unwrap();
        let ids = lm.tokenizer.encode(&text).unwrap();
        assert_eq!(
            ids, p.prompt_ids,
            "prompt {n}: template + tokenizer differ from llama.cpp"
        );
        let fed: Vec<u32> = ids.iter().chain(&p.output_ids).copied().collect();
        let seq = lm.model.new_sequence();
        let out = lm.model.forward_one(seq, &fed, LogitRows::All).unwrap();
        lm.model.release(seq);
        for (i, &want) in p.output_ids.iter().enumerate() {
            let row = &out.logits[(ids.len() - 1 + i) * out.vocab..][..out.vocab];
            let ours = (0..row.len())
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap() as u32;
            positions += 1;
            if ours != want {
                disagreements.push((n, i, p.top2_gaps[i]));
            }
        }
    }
    let agree = positions - disagreements.len();
    eprintln!(
        "{agree} of {positions} positions agree with llama.cpp; disagreements (prompt, \
         position, llama.cpp's top-2 gap): {disagreements:?}"
    );
    assert!(
        agree * 100 >= positions * 96,
        "only {agree} of {positions} positions agree with llama.cpp"
    );
    for (n, i, gap) in disagreements {
        assert!(
            gap < band,
            "prompt {n}, position {i}: we disagree with llama.cpp where its top-2 gap is {gap} \
             (not a near-tie: the band is {band})"
        );
    }
}
