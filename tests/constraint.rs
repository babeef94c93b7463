//! Constrained decoding on the real model: grammars compile for its vocabulary, the output
//! follows them, constrained speculative decoding equals constrained plain decoding for
//! every strategy (greedy), and constrained speculative sampling follows the constrained
//! distribution (χ² against the exact one computed from the model's masked logits).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use serde_json::{json, Value};
use specgate::constraint::{GrammarSpec, Grammars};
use specgate::drafting::registry::{
    BoxedDrafter, BuildDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER,
};
use specgate::engine::generate::{generate_constrained, GenerateOutput, GenerateParams};
use specgate::model::loaded::LoadedModel;
use specgate::{SamplingParams, TokenId};
use specgate_strategies::{mask_rows, PlainDrafter, SuffixCache};

fn grammars(lm: &LoadedModel) -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| {
        let t = Instant::now();
        let g = Grammars::new(Arc::clone(&lm.tokenizer), lm.model.config().vocab_size).unwrap();
        eprintln!("grammar engine for the vocabulary: {:?}", t.elapsed());
        g
    })
}

fn drafters(lm: &LoadedModel) -> Vec<(StrategyKind, BoxedDrafter)> {
    let cfg = DrafterConfig {
        target_path: common::model_path(),
        draft_model: Some(common::model_path()),
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: Some(Arc::new(Mutex::new(SuffixCache::new(8, 1 << 16)))),
        corpus: None,
        seed: 0,
        medusa_heads: None,
        eagle_layer: None,
    };
    common::every_drafter(&cfg, &lm.tokenizer)
}

fn run(
    lm: &mut LoadedModel,
    prompt: &[TokenId],
    params: &GenerateParams,
    drafter: &mut dyn specgate_strategies::Drafter,
    spec: &GrammarSpec,
) -> GenerateOutput {
    let grammar = grammars(lm).compile(spec).unwrap();
    generate_constrained(
        &mut lm.model,
        &lm.tokenizer,
        prompt,
        params,
        drafter,
        Some(grammar),
        |_| {},
    )
    .unwrap()
}

fn cat_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
            "indoor": {"type": "boolean"},
            "toys": {"type": "array", "items": {"enum": ["ball", "mouse", "string"]}, "maxItems": 3}
        },
        "required": ["name", "age", "indoor", "toys"],
        "additionalProperties": false
    })
}

fn chat(lm: &LoadedModel, text: &str) -> Vec<TokenId> {
    lm.prompt_ids(text).unwrap()
}

#[test]
fn constrained_greedy_speculation_equals_constrained_plain_for_every_strategy() {
    let mut lm = common::model();
    let lm = &mut *lm;
    let spec = GrammarSpec::JsonSchema(cat_schema());
    let prompt = chat(
        lm,
        "Describe my cat Tom as JSON: his name, age, whether he stays indoors and his toys.",
    );
    let plain = run(
        lm,
        &prompt,
        &GenerateParams::greedy(96, 0),
        &mut PlainDrafter,
        &spec,
    );
    assert_eq!(
        plain.stats.drafted, 0,
        "plain decoding drafts nothing, forced tokens included"
    );
    let v: Value =
        serde_json::from_str(&plain.text).unwrap_or_else(|e| panic!("{e}: {}", plain.text));
    assert!(
        v["age"].as_i64().is_some_and(|a| (0..=30).contains(&a)),
        "{v}"
    );
    assert!(
        v["name"].as_str().is_some_and(|n| n.chars().count() <= 24),
        "{v}"
    );
    eprintln!("plain: {} ({} tokens)", plain.text, plain.generated_tokens);
    for (kind, mut drafter) in drafters(lm) {
        for k in [1, 4, 8] {
            let out = run(
                lm,
                &prompt,
                &GenerateParams::greedy(96, k),
                drafter.as_mut(),
                &spec,
            );
            assert_eq!(out.stats.drafter_failures, 0, "{kind}");
            assert_eq!(out.token_ids, plain.token_ids, "{kind} k={k}: {}", out.text);
            eprintln!(
                "{kind} k={k}: {} passes for {} tokens, {} drafted ({} forced), {} accepted",
                out.target_passes,
                out.generated_tokens,
                out.stats.drafted,
                out.stats.forced,
                out.stats.accepted
            );
        }
    }
}

#[test]
fn forced_tokens_are_drafted_and_accepted() {
    let mut lm = common::model();
    let lm = &mut *lm;
    let spec = GrammarSpec::JsonSchema(cat_schema());
    let prompt = chat(lm, "Describe a cat as JSON.");
    let mut g = grammars(lm).compile(&spec).unwrap();
    let forced = g.forced();
    // Up to where the tokenization of what follows is still open (` "` may merge with the
    // name's first letters).
    let text = lm.tokenizer.decode(&forced).unwrap();
    assert!(text.starts_with("{\"name\":"), "forced {text:?}");
    assert!("{\"name\": \"".starts_with(&text), "forced {text:?}");
    let out = run(
        lm,
        &prompt,
        &GenerateParams::greedy(96, 4),
        &mut PlainDrafter,
        &spec,
    );
    // The plain drafter drafts nothing itself: every draft is a forced token.
    assert!(out.stats.forced >= 10, "{:?}", out.stats);
    assert_eq!(out.stats.forced, out.stats.drafted);
    assert!(
        out.stats.accepted * 10 >= out.stats.forced * 9,
        "{:?}",
        out.stats
    );
    assert!(
        out.target_passes < out.generated_tokens,
        "{} passes",
        out.target_passes
    );
}

#[test]
fn grammars_that_cannot_be_used_are_refused() {
    let lm = common::model();
    let g = grammars(&lm);
    for (spec, why) in [
        (
            GrammarSpec::JsonSchema(json!("object")),
            "must be an object",
        ),
        (
            GrammarSpec::JsonSchema(
                json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]}),
            ),
            "",
        ),
        (GrammarSpec::Regex("(unclosed".into()), ""),
        (GrammarSpec::Lark("start: undefined_rule".into()), ""),
        (
            GrammarSpec::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})),
            "",
        ),
    ] {
        let Err(e) = g.compile(&spec) else {
            panic!("{spec:?} compiled");
        };
        assert!(e.to_string().contains(why), "{spec:?}: {e}");
    }
}

#[test]
fn constrained_speculative_sampling_follows_the_constrained_distribution() {
    let mut lm = common::model();
    let lm = &mut *lm;
    // Medusa drafts with a q, mostly tokens the regex forbids: the forbidden-draft path and
    // the residual both shape the output.
    let spec = GrammarSpec::Regex("(yes|no|maybe|sure)(, (yes|no|maybe|sure))*".into());
    let sampling = SamplingParams {
        temperature: 1.0,
        top_k: 4,
        top_p: 1.0,
        min_p: 0.0,
    };
    let prompt = chat(lm, "Will it rain tomorrow? Answer yes, no or maybe.");
    let tokens = 3;
    // The exact distribution under the grammar: the model's rows masked by the grammar's
    // state after each prefix.
    let vocab = lm.model.config().vocab_size;
    let g = grammars(lm);
    let mut mask = |generated: &[TokenId], row: &mut [f32]| {
        let mut c = g.compile(&spec).unwrap();
        c.consume(generated).unwrap();
        let masked = mask_rows(row, &[c.mask().unwrap()], vocab);
        row.copy_from_slice(&masked);
    };
    let exact = common::distribution::exact_shaped(lm, &sampling, &prompt, tokens, &mut mask);
    let cfg = common::lean_drafter_config(common::model_path(), 5);
    let mut drafter = StrategyKind::Medusa.build(&cfg, &lm.tokenizer).unwrap();
    let mut counts: BTreeMap<Vec<TokenId>, u64> = BTreeMap::new();
    let (mut drafted, mut accepted) = (0, 0);
    for seed in 0..1500 {
        let params = GenerateParams {
            sampling,
            seed,
            ..GenerateParams::greedy(tokens, 2)
        };
        let out = run(lm, &prompt, &params, drafter.as_mut(), &spec);
        drafted += out.stats.drafted;
        accepted += out.stats.accepted;
        *counts.entry(out.token_ids).or_default() += 1;
    }
    eprintln!(
        "drafted {drafted}, accepted {accepted}, outcomes {}",
        counts.len()
    );
    assert!(drafted > accepted + 100, "drafts were rejected too");
    common::distribution::assert_fits(&counts, &exact);
}

#[test]
fn gemma_constrained_speculation_equals_constrained_plain() {
    // A SentencePiece vocabulary of 262k tokens: the grammar engine and forced tokens on
    // the second model the engine serves.
    let mut lm = common::gemma();
    let lm = &mut *lm;
    let t = Instant::now();
    let grammars = Grammars::new(Arc::clone(&lm.tokenizer), lm.model.config().vocab_size).unwrap();
    eprintln!("grammar engine for Gemma's vocabulary: {:?}", t.elapsed());
    let spec = GrammarSpec::JsonSchema(cat_schema());
    let prompt = lm
        .prompt_ids("A JSON description of a cat named Tom:\n")
        .unwrap();
    let cfg = common::lean_drafter_config(common::gemma_path(), 0);
    let go = |lm: &mut LoadedModel, k: usize, d: &mut dyn specgate_strategies::Drafter| {
        let g = grammars.compile(&spec).unwrap();
        let p = GenerateParams::greedy(96, k);
        generate_constrained(
            &mut lm.model,
            &lm.tokenizer,
            &prompt,
            &p,
            d,
            Some(g),
            |_| {},
        )
        .unwrap()
    };
    let plain = go(lm, 0, &mut PlainDrafter);
    let v: Value =
        serde_json::from_str(&plain.text).unwrap_or_else(|e| panic!("{e}: {}", plain.text));
    assert!(
        v["age"].as_i64().is_some_and(|a| (0..=30).contains(&a)),
        "{v}"
    );
    for kind in [
        StrategyKind::Ngram,
        StrategyKind::Suffix,
        StrategyKind::MedusaTree,
    ] {
        let mut d = kind.build(&cfg, &lm.tokenizer).unwrap();
        let out = go(lm, 4, d.as_mut());
        assert_eq!(out.token_ids, plain.token_ids, "{kind}: {}", out.text);
        assert!(
            out.stats.forced > 0 && out.target_passes < plain.target_passes,
            "{kind}: {:?}",
            out.stats
        );
    }
}
