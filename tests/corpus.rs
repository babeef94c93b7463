//! The answer corpus on the real model: the shipped corpus was made for the default model and
//! loads; one made for another model is refused; a tenant with no history of its own commits
//! more tokens per target pass with it than without, and greedy output stays plain's.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use specgate::drafting::answer_corpus::{self, CorpusAnswer, CorpusError, CorpusSource};
use specgate::drafting::registry::{suffix_drafter, SUFFIX_MAX_DEPTH};
use specgate::engine::generate::{generate, GenerateParams};
use specgate::model::chat_template::ChatMessage;
use specgate::tools::prompts::load_prompt_sets;
use specgate_strategies::{PlainDrafter, SharedCorpus, SuffixCache};

fn shipped() -> SharedCorpus {
    let lm = common::model();
    CorpusSource::Default
        .load(&common::model_path(), &lm.tokenizer, SUFFIX_MAX_DEPTH)
        .expect("loading the shipped corpus")
        .expect("a corpus ships for the default model")
}

#[test]
fn the_shipped_corpus_answers_every_training_prompt_for_the_default_model() {
    let path = answer_corpus::default_path(&common::model_path());
    let (header, answers) = answer_corpus::read(&path).unwrap();
    let prompts = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("strategies/data/medusa/train_prompts.jsonl"),
    )
    .unwrap();
    assert_eq!(answers.len(), prompts.lines().count(), "{header:?}");
    let corpus = shipped();
    // Every answer is indexed with the assistant header and end of turn around it.
    let words: usize = answers
        .iter()
        .map(|a| a.answer.split_whitespace().count())
        .sum();
    assert!(
        corpus.len_tokens() > words,
        "{} tokens for {words} words",
        corpus.len_tokens()
    );
}

#[test]
fn only_answers_the_model_ended_end_with_its_end_of_turn_token() {
    let lm = common::model();
    let tok = &lm.tokenizer;
    let answer = |text: String| CorpusAnswer {
        class: "code".into(),
        answer: text,
    };
    let (header, shipped) =
        answer_corpus::read(&answer_corpus::default_path(&common::model_path())).unwrap();
    let mut answers = vec![
        answer("Hello there.".into()),
        answer("#include <vector>\n".repeat(40)),
    ];
    answers.extend(shipped);
    let docs = answer_corpus::answer_tokens(tok, &answers, header.max_tokens).unwrap();
    assert_eq!(docs[0].last(), Some(&tok.eos()), "an ended answer");
    assert_ne!(
        docs[1].last(),
        Some(&tok.eos()),
        "an answer cut at max_tokens"
    );
    let cut = docs[2..]
        .iter()
        .filter(|d| d.last() != Some(&tok.eos()))
        .count();
    eprintln!("{cut} of {} shipped answers were cut off", docs.len() - 2);
    assert!(cut > 0 && cut < docs.len() - 2);
}

#[test]
fn a_corpus_made_for_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut header, answers) =
        answer_corpus::read(&answer_corpus::default_path(&common::model_path())).unwrap();
    header.target_sha256 = "0".repeat(64);
    let path = dir.path().join("other.jsonl");
    answer_corpus::write(&path, &header, &answers[..3]).unwrap();
    // Written whole through a temporary file, which is gone.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["other.jsonl"]);
    let lm = common::model();
    let model = common::model_path();
    let err = CorpusSource::Path(path.clone())
        .load(&model, &lm.tokenizer, SUFFIX_MAX_DEPTH)
        .expect_err("a corpus for another model must be refused");
    assert!(matches!(err, CorpusError::WrongModel { .. }), "{err}");
    assert!(err.to_string().contains("build-corpus"), "{err}");
    assert!(CorpusSource::Off
        .load(&model, &lm.tokenizer, SUFFIX_MAX_DEPTH)
        .unwrap()
        .is_none());
    // A model with no shipped corpus simply has none.
    let elsewhere = dir.path().join("another-model.gguf");
    std::fs::copy(&model, &elsewhere).unwrap();
    assert!(CorpusSource::Default
        .load(&elsewhere, &lm.tokenizer, SUFFIX_MAX_DEPTH)
        .unwrap()
        .is_none());
}

/// Greedy suffix decoding of every prompt of `set` by one new tenant (an empty cache that
/// learns from its own earlier requests): (generated tokens, target passes), each output
/// checked against plain decoding.
fn tenant_run(set: &str, corpus: Option<SharedCorpus>) -> (usize, usize) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prompts");
    let sets = load_prompt_sets(&dir).unwrap();
    let prompts = &sets.iter().find(|s| s.name == set).unwrap().prompts;
    let mut lm = common::model();
    let lm = &mut *lm;
    let cache = Arc::new(Mutex::new(SuffixCache::new(SUFFIX_MAX_DEPTH, 1 << 16)));
    let mut drafter = suffix_drafter(Some(cache), corpus);
    // A fixed row price, so both runs draft by the same rule whatever the machine's timing.
    let params = |k| GenerateParams {
        row_cost: Some(0.2),
        penalties: Default::default(),
        ..GenerateParams::greedy(64, k)
    };
    let (mut tokens, mut passes) = (0, 0);
    for prompt in prompts {
        let text = lm.chat_prompt(&[ChatMessage::new("user", prompt)]).unwrap();
        let ids = lm.tokenizer.encode(&text).unwrap();
        let tok = lm.tokenizer.clone();
        let plain = generate(
            &mut lm.model,
            &tok,
            &ids,
            &params(0),
            &mut PlainDrafter,
            |_| {},
        )
        .unwrap();
        let spec = generate(&mut lm.model, &tok, &ids, &params(8), &mut drafter, |_| {}).unwrap();
        assert_eq!(spec.token_ids, plain.token_ids, "{set}: {prompt}");
        tokens += spec.generated_tokens;
        passes += spec.target_passes;
    }
    (tokens, passes)
}

#[test]
fn a_new_tenant_commits_more_per_pass_with_the_corpus_and_stays_exact() {
    let corpus = shipped();
    for set in ["code_edit", "chat"] {
        let (t0, p0) = tenant_run(set, None);
        let (t1, p1) = tenant_run(set, Some(corpus.clone()));
        assert_eq!(t0, t1, "{set}: the same output");
        let (without, with) = (t0 as f64 / p0 as f64, t1 as f64 / p1 as f64);
        eprintln!("{set}: tokens per pass {without:.3} without the corpus, {with:.3} with it");
        assert!(with > without, "{set}: {with:.3} ≤ {without:.3}");
    }
}
