//! The EAGLE layer on the real model: the shipped layer loads for the model it was trained for
//! and is refused, with the reason, for any other; its drafts are accepted far above chance
//! and greedy output stays plain's (tests/speculative.rs runs every strategy, eagle included,
//! on every shipped prompt; tests/sampling_distribution.rs its sampled output); `train-eagle`
//! writes a layer that loads and drafts.

mod common;

use specgate::drafting::registry::{BuildDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER};
use specgate::engine::generate::{generate, GenerateOutput, GenerateParams};
use specgate::heads::eagle_bundle::{self, EagleError};
use specgate::SamplingParams;

fn config(layer: Option<std::path::PathBuf>) -> DrafterConfig {
    DrafterConfig {
        target_path: common::model_path(),
        draft_model: None,
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: None,
        corpus: None,
        seed: 0,
        medusa_heads: None,
        eagle_layer: layer,
    }
}

/// Greedy generation of `prompt`, `kind` drafting up to `k` tokens a round at `row_cost`.
fn greedy(
    lm: &mut specgate::model::loaded::LoadedModel,
    prompt: &[u32],
    (kind, k, row_cost): (StrategyKind, usize, f32),
    layer: Option<std::path::PathBuf>,
) -> GenerateOutput {
    let params = GenerateParams {
        max_tokens: 64,
        sampling: SamplingParams::greedy(),
        seed: 0,
        stop: Vec::new(),
        max_draft_tokens: k,
        adaptive_k: false,
        // A fixed price per verified row, so the machine's load does not change the drafts.
        row_cost: Some(row_cost),
        penalties: Default::default(),
    };
    let mut drafter = kind.build(&config(layer), &lm.tokenizer).unwrap();
    generate(
        &mut lm.model,
        &lm.tokenizer,
        prompt,
        &params,
        &mut *drafter,
        |_| {},
    )
    .unwrap()
}

fn prompt(lm: &specgate::model::loaded::LoadedModel, text: &str) -> Vec<u32> {
    let chat = lm
        .chat_prompt(&[specgate::model::chat_template::ChatMessage::new(
            "user", text,
        )])
        .unwrap();
    lm.tokenizer.encode(&chat).unwrap()
}

#[test]
fn eagle_trees_are_accepted_and_greedy_output_is_unchanged() {
    let mut guard = common::model();
    let lm = &mut *guard;
    let ids = prompt(
        lm,
        "Write a short story about a lighthouse keeper and a storm.",
    );
    let want = greedy(lm, &ids, (StrategyKind::Plain, 0, 0.0), None);
    // Rows priced free (the GPU regime): the tree takes its whole budget.
    let got = greedy(lm, &ids, (StrategyKind::Eagle, 16, 0.0), None);
    assert_eq!(got.token_ids, want.token_ids);
    assert_eq!(got.stats.drafter_failures, 0);
    // Trained, the layer is far above chance (1 in 49 152): more than one token per pass.
    let per_pass = got.token_ids.len() as f64 / got.stats.rounds.max(1) as f64;
    assert!(per_pass > 1.5, "{per_pass} tokens per target pass");
    // Priced as a CPU prices rows, it drafts less and is still exact.
    let priced = greedy(lm, &ids, (StrategyKind::Eagle, 8, 0.2), None);
    assert_eq!(priced.token_ids, want.token_ids);
    assert!(priced.stats.drafted < got.stats.drafted);
}

#[test]
fn a_layer_for_another_model_is_refused_with_the_reason() {
    let shipped = eagle_bundle::default_dir(&common::model_path());
    let cfg = eagle_bundle::read_config(&shipped, &common::model_path()).expect("shipped layer");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        shipped.join("eagle.safetensors"),
        dir.path().join("eagle.safetensors"),
    )
    .unwrap();
    let mut other = cfg.clone();
    other.target = "some-other-model.gguf".into();
    other.target_sha256 = "00".repeat(32);
    std::fs::write(
        dir.path().join("eagle.json"),
        serde_json::to_string(&other).unwrap(),
    )
    .unwrap();
    let err = eagle_bundle::load(dir.path(), &common::model_path())
        .err()
        .expect("refused");
    assert!(matches!(err, EagleError::WrongModel { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("some-other-model.gguf") && msg.contains("train-eagle"),
        "{msg}"
    );
    let lm = common::model();
    assert!(StrategyKind::Eagle
        .build(&config(Some(dir.path().into())), &lm.tokenizer)
        .is_err());
    // A tensor missing is refused by name.
    std::fs::write(
        dir.path().join("eagle.json"),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("eagle.safetensors"), b"not tensors").unwrap();
    let err = eagle_bundle::load(dir.path(), &common::model_path())
        .err()
        .expect("refused");
    assert!(matches!(err, EagleError::Config { .. }), "{err}");
}

#[test]
fn train_eagle_writes_a_layer_that_loads_and_drafts_exactly() {
    let model = common::model_path();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("eagle");
    let work = dir.path().join("work");
    // 15 of the training prompts, 24 tokens each, data kept in `work` for the second run.
    let train = |more: &[&str]| {
        let mut args = vec![
            "train-eagle",
            "--model",
            model.to_str().unwrap(),
            "--every",
            "120",
            "--max-new-tokens",
            "24",
            "--sampled-variants",
            "1",
            "--work",
            work.to_str().unwrap(),
        ];
        args.extend_from_slice(more);
        common::specgate(&args)
    };
    let (code, _, err) = train(&[
        "--steps",
        "3",
        "--batch",
        "4",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("held-out top-1"), "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["steps"], 3);
    assert!(report["held_out_sequences"].as_u64().unwrap() >= 1);
    // 15 prompts, 2 held out: a sampled-prefix variant beside each of the 13 greedy ones.
    assert!(report["train_sequences"].as_u64().unwrap() > 13, "{report}");
    eagle_bundle::load(&out_dir, &model).expect("the new layer loads");
    // Resumed for no steps, the layer is written back unchanged: resume starts from its
    // weights, not the target's layer.
    let again = dir.path().join("again");
    let (code, _, err) = train(&[
        "--steps",
        "0",
        "--resume",
        out_dir.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let resumed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("report.json")).unwrap()).unwrap();
    assert_eq!(resumed["resumed_from"], out_dir.to_str().unwrap());
    let weights = |d: &std::path::Path| {
        let cfg = eagle_bundle::read_config(d, &model).expect("config");
        eagle_bundle::load_weights(d, &cfg)
            .expect("weights")
            .tensors
    };
    assert!(
        weights(&again) == weights(&out_dir),
        "resume changed the layer"
    );
    // Barely trained, its drafts are mostly rejected: output is still plain's.
    let mut guard = common::model();
    let lm = &mut *guard;
    let ids = prompt(lm, "Name three rivers in Europe.");
    let want = greedy(lm, &ids, (StrategyKind::Plain, 0, 0.0), None);
    let got = greedy(lm, &ids, (StrategyKind::Eagle, 4, 0.0), Some(out_dir));
    assert_eq!(got.token_ids, want.token_ids);
    assert!(got.stats.drafted > 0);
}
