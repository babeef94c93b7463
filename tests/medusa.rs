//! Medusa heads on the real model: the shipped heads load for the model they were trained
//! for and are refused, with the reason, for any other; chain drafting through the gateway's
//! engine path is exact under greedy decoding (tests/speculative.rs runs every strategy,
//! medusa included, against plain decoding).

mod common;

use specgate::generate::{generate, GenerateOutput, GenerateParams};
use specgate::medusa_heads::{self, MedusaError};
use specgate::strategy::{BuildDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER};
use specgate::SamplingParams;

fn config(heads: Option<std::path::PathBuf>) -> DrafterConfig {
    DrafterConfig {
        target_path: common::model_path(),
        draft_model: None,
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: None,
        seed: 0,
        medusa_heads: heads,
    }
}

#[test]
fn heads_for_another_model_are_refused_with_the_reason() {
    let shipped = medusa_heads::default_dir(&common::model_path());
    let cfg = medusa_heads::read_config(&shipped, &common::model_path()).expect("shipped heads");
    assert!(cfg.num_heads >= 3);
    // The same heads, claimed for a different file.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        shipped.join("heads.safetensors"),
        dir.path().join("heads.safetensors"),
    )
    .unwrap();
    let mut other = cfg.clone();
    other.target = "some-other-model.gguf".into();
    other.target_sha256 = "00".repeat(32);
    std::fs::write(
        dir.path().join("heads.json"),
        serde_json::to_string(&other).unwrap(),
    )
    .unwrap();
    let err = medusa_heads::load(dir.path(), &common::model_path())
        .err()
        .expect("refused");
    assert!(matches!(err, MedusaError::WrongModel { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("some-other-model.gguf") && msg.contains("train-heads"),
        "{msg}"
    );
    // Through the strategy, as `generate --strategy medusa --medusa-heads DIR` builds it.
    let lm = common::model();
    let built = StrategyKind::Medusa.build(&config(Some(dir.path().into())), &lm.tokenizer);
    assert!(built.is_err());
    // A config that is not ours is refused too.
    std::fs::write(dir.path().join("heads.json"), "{\"format\": \"x\"}").unwrap();
    assert!(matches!(
        medusa_heads::load(dir.path(), &common::model_path()),
        Err(MedusaError::Config { .. })
    ));
}

/// Greedy generation of `prompt` with `kind` drafting up to `k` tokens a round.
fn greedy(
    lm: &mut specgate::loaded::LoadedModel,
    prompt: &[u32],
    kind: StrategyKind,
    k: usize,
) -> GenerateOutput {
    let params = GenerateParams {
        max_tokens: 64,
        sampling: SamplingParams::greedy(),
        seed: 0,
        stop: Vec::new(),
        max_draft_tokens: k,
        adaptive_k: false,
    };
    let mut drafter = kind.build(&config(None), &lm.tokenizer).unwrap();
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

#[test]
fn medusa_drafts_are_accepted_and_greedy_output_is_unchanged() {
    let mut guard = common::model();
    let lm = &mut *guard;
    let prompt = lm
        .tokenizer
        .encode(
            &lm.chat_prompt(&[specgate::chat::ChatMessage {
                role: "user".into(),
                content: "Explain how a rainbow forms.".into(),
            }])
            .unwrap(),
        )
        .unwrap();
    let want = greedy(lm, &prompt, StrategyKind::Plain, 0);
    let got = greedy(lm, &prompt, StrategyKind::Medusa, 4);
    assert_eq!(got.token_ids, want.token_ids);
    assert_eq!(got.stats.drafter_failures, 0);
    assert!(got.stats.drafted > 0);
    // Trained heads do far better than chance (1 in 49 152): the first head is accepted in
    // a tenth of the rounds at least (measured: about a fifth).
    let first = got.stats.accepted_per_pos.first().copied().unwrap_or(0) as f64;
    let rounds = got.stats.rounds as f64;
    assert!(
        first / rounds > 0.1,
        "head 1 accepted in {first} of {rounds} rounds"
    );
    // suffix-medusa: on chat text the lookup rarely has a draft, and in those rounds the
    // heads draft, so it commits more drafted tokens than suffix alone; still plain's output.
    let suffix = greedy(lm, &prompt, StrategyKind::Suffix, 4);
    let both = greedy(lm, &prompt, StrategyKind::SuffixMedusa, 4);
    assert_eq!(both.token_ids, want.token_ids);
    assert_eq!(both.stats.drafter_failures, 0);
    assert!(
        both.stats.accepted > suffix.stats.accepted,
        "suffix-medusa accepted {} drafted tokens, suffix alone {}",
        both.stats.accepted,
        suffix.stats.accepted
    );
}

#[test]
fn shipped_heads_chain_read_the_rows_training_used_and_older_formats_still_load() {
    let model = common::model_path();
    let shipped = medusa_heads::load(&medusa_heads::default_dir(&model), &model).expect("heads");
    assert_eq!(shipped.config.format, medusa_heads::FORMAT);
    assert!(shipped.heads.token_conditioned() && shipped.heads.chained());
    // The drafter's pending-token rows are the rows training embedded: the dequantized LM
    // head's, and none past the draft vocabulary (training used zeros there).
    let lm = specgate::train_heads::lm_head_f32(&model).unwrap();
    for t in [0u32, 17, 2000, (medusa_heads::EMBED_VOCAB - 1) as u32] {
        let want = lm.get(t as usize).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(
            shipped.lm_head.token_row(t).unwrap(),
            Some(want),
            "token {t}"
        );
    }
    assert_eq!(
        shipped
            .lm_head
            .token_row(medusa_heads::EMBED_VOCAB as u32)
            .unwrap(),
        None
    );
    // Older formats round-trip and load: 2 (no V) and 1 (no U either).
    let dir = tempfile::tempdir().unwrap();
    let mut older = (*shipped.heads).clone();
    let mut cfg = shipped.config.clone();
    for format in [medusa_heads::FORMAT_2, medusa_heads::FORMAT_1] {
        older.v.clear();
        if format == medusa_heads::FORMAT_1 {
            older.u.clear();
        }
        assert!(
            medusa_heads::save(dir.path(), &older, &cfg).is_err(),
            "{} claimed for {format} heads",
            cfg.format
        );
        cfg.format = format.into();
        medusa_heads::save(dir.path(), &older, &cfg).unwrap();
        let back = medusa_heads::load(dir.path(), &model).unwrap();
        assert_eq!(back.config.format, format);
        assert_eq!(back.heads.w, older.w);
        assert!(!back.heads.chained());
        assert_eq!(
            back.heads.token_conditioned(),
            format == medusa_heads::FORMAT_2
        );
    }
}
