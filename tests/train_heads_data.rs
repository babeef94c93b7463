//! Training data for the Medusa heads: sampled-prefix continuations turn greedy after their
//! prefix (so their labels are what greedy verification checks), differ from the greedy one
//! (real model), and never touch the held-out split (tiny random model: fast).

mod common;

use specgate::heads::training::{self, Continuation, Variants};
use specgate::model::loaded::LoadedModel;
use specgate::model::LogitRows;
use specgate_strategies::{argmax, TokenId};

use common::tiny::load_tiny_llama as tiny_model;

/// Greedy decoding of `n` tokens after `context`, one sequence alone (stops after EOS).
fn greedy_after(lm: &mut LoadedModel, context: &[TokenId], n: usize) -> Vec<TokenId> {
    let seq = lm.model.new_sequence();
    let mut out = Vec::new();
    let mut input = context.to_vec();
    while out.len() < n {
        let logits = lm.model.forward_one(seq, &input, LogitRows::Last).unwrap();
        let y = argmax(logits.row(0, 0));
        out.push(y);
        if y == lm.tokenizer.eos() {
            break;
        }
        input = vec![y];
    }
    lm.model.release(seq);
    out
}

const VARIANTS: Variants = Variants {
    extra: 2,
    max_prefix: 5,
    seed: 7,
};

#[test]
fn sampled_prefix_continuations_turn_greedy_and_skip_held_out_prompts() {
    let mut lm = common::model();
    let prompts: Vec<Vec<TokenId>> = ["Tell me about rivers.", "Write a haiku about snow."]
        .iter()
        .map(|p| {
            let chat = lm.chat_prompt(&[specgate::model::chat_template::ChatMessage {
                role: "user".into(),
                content: (*p).into(),
            }]);
            lm.tokenizer.encode(&chat.unwrap()).unwrap()
        })
        .collect();
    // Holding out every 2nd prompt: prompt 0 is held out, prompt 1 trains.
    let conts: Vec<Continuation> =
        training::continuations(&mut lm, &prompts, 16, 4, VARIANTS, 2).unwrap();
    let mut differs = 0;
    for (p, prompt) in prompts.iter().enumerate() {
        let mine: Vec<&Continuation> = conts.iter().filter(|c| c.prompt == p).collect();
        let want = if p % 2 == 0 { 1 } else { 3 };
        assert_eq!(
            mine.len(),
            want,
            "prompt {p}: held-out prompts get no variants"
        );
        assert_eq!(
            mine[0].greedy_from, 0,
            "prompt {p}: the first is plain greedy"
        );
        for c in &mine {
            assert!(c.greedy_from <= VARIANTS.max_prefix);
            assert_eq!(c.hidden.len(), c.tokens.len());
            let split = c.greedy_from.min(c.tokens.len());
            let context: Vec<TokenId> = prompt.iter().chain(&c.tokens[..split]).copied().collect();
            let rest = &c.tokens[split..];
            assert_eq!(
                greedy_after(&mut lm, &context, rest.len()),
                rest,
                "prompt {p}: after its sampled prefix a continuation is greedy"
            );
            differs += usize::from(c.tokens != mine[0].tokens);
        }
    }
    let shown: Vec<_> = conts
        .iter()
        .map(|c| (c.greedy_from, c.tokens.clone()))
        .collect();
    assert!(
        differs > 0,
        "sampled prefixes must vary the text: {shown:?}"
    );
}

#[test]
fn variants_add_training_pairs_and_leave_the_held_out_pairs_alone() {
    let (_dir, mut lm) = tiny_model();
    let prompts: Vec<Vec<TokenId>> = (0..6u32).map(|p| vec![1, 3 + p % 5, 6]).collect();
    let (train0, held0) = training::collect(&mut lm, &prompts, 10, 2, Variants::NONE, 3).unwrap();
    let (train1, held1) = training::collect(&mut lm, &prompts, 10, 2, VARIANTS, 3).unwrap();
    assert_eq!(held1.labels, held0.labels);
    assert_eq!(held1.hidden, held0.hidden);
    assert!(
        train1.len() > train0.len(),
        "{} vs {}",
        train1.len(),
        train0.len()
    );
}
