//! Medusa heads on the real model: the shipped heads load for the model they were trained
//! for and are refused, with the reason, for any other; chain drafting through the gateway's
//! engine path is exact under greedy decoding (tests/speculative.rs runs every strategy,
//! medusa included, against plain decoding); `calibrate-heads` measures the heads the drafter
//! runs and writes only their calibration.

mod common;

use specgate::drafting::registry::{BuildDrafter, DrafterConfig, StrategyKind, DEFAULT_EXIT_LAYER};
use specgate::engine::generate::{generate, GenerateOutput, GenerateParams};
use specgate::heads::bundle::{self, MedusaError};
use specgate::SamplingParams;

fn config(heads: Option<std::path::PathBuf>) -> DrafterConfig {
    DrafterConfig {
        target_path: common::model_path(),
        draft_model: None,
        exit_layer: DEFAULT_EXIT_LAYER,
        suffix_cache: None,
        corpus: None,
        seed: 0,
        medusa_heads: heads,
        eagle_layer: None,
    }
}

#[test]
fn heads_for_another_model_are_refused_with_the_reason() {
    let shipped = bundle::default_dir(&common::model_path());
    let cfg = bundle::read_config(&shipped, &common::model_path()).expect("shipped heads");
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
    let err = bundle::load(dir.path(), &common::model_path())
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
        bundle::load(dir.path(), &common::model_path()),
        Err(MedusaError::Config { .. })
    ));
}

/// Greedy generation of `prompt` with `kind` drafting up to `k` tokens a round.
fn greedy(
    lm: &mut specgate::model::loaded::LoadedModel,
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
        // A fixed price per verified row: the engine's timed fit rises when the machine is
        // busy (another build beside the tests) and would stop drafts this test counts on.
        row_cost: Some(0.2),
        penalties: Default::default(),
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
            &lm.chat_prompt(&[specgate::model::chat_template::ChatMessage {
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
    let shipped = bundle::load(&bundle::default_dir(&model), &model).expect("heads");
    assert_eq!(shipped.config.format, bundle::FORMAT);
    assert!(shipped.heads.token_conditioned() && shipped.heads.chained());
    // The drafter's pending-token rows are the rows training embedded: the dequantized LM
    // head's, and none past the draft vocabulary (training used zeros there).
    let lm = specgate::heads::training::lm_head_f32(&model).unwrap();
    for t in [0u32, 17, 2000, (bundle::EMBED_VOCAB - 1) as u32] {
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
            .token_row(bundle::EMBED_VOCAB as u32)
            .unwrap(),
        None
    );
    // Older formats round-trip and load: 2 (no V) and 1 (no U either).
    let dir = tempfile::tempdir().unwrap();
    let mut older = (*shipped.heads).clone();
    let mut cfg = shipped.config.clone();
    for format in [bundle::FORMAT_2, bundle::FORMAT_1] {
        older.v.clear();
        if format == bundle::FORMAT_1 {
            older.u.clear();
        }
        assert!(
            bundle::save(dir.path(), &older, &cfg).is_err(),
            "{} claimed for {format} heads",
            cfg.format
        );
        cfg.format = format.into();
        bundle::save(dir.path(), &older, &cfg).unwrap();
        let back = bundle::load(dir.path(), &model).unwrap();
        assert_eq!(back.config.format, format);
        assert_eq!(back.heads.w, older.w);
        assert!(!back.heads.chained());
        assert_eq!(back.heads.token_conditioned(), format == bundle::FORMAT_2);
    }
}

/// Draft-vocabulary logits of head `i`, as the drafter computes them.
fn drafter_logits(
    bundle: &bundle::MedusaBundle,
    i: usize,
    h: &[f32],
    pending: u32,
    before: u32,
) -> Vec<f32> {
    let row = |t: u32| bundle.lm_head.token_row(t).unwrap();
    let e = row(pending);
    let prev = if i == 0 { e.clone() } else { row(before) };
    let state = bundle.heads.state(i, h, e.as_deref(), prev.as_deref());
    bundle.lm_head.logits(&state).unwrap()
}

#[test]
fn calibration_measures_the_heads_the_drafter_runs_and_temperatures_round_trip() {
    use specgate::heads::training::{HeadsData, Trainer};
    let model = common::model_path();
    let shipped = bundle::load(&bundle::default_dir(&model), &model).expect("heads");
    let n = shipped.config.num_heads;
    assert_eq!(
        shipped.heads.temperatures.len(),
        n,
        "shipped heads are calibrated"
    );
    assert_eq!(shipped.heads.temperatures, shipped.config.temperatures);
    assert_eq!(shipped.heads.coverage, shipped.config.coverage);
    assert_eq!(shipped.heads.coverage.len(), n);
    // `calibrate-heads` fits on the trainer's logits of the loaded heads: they must be the
    // drafter's (up to the 8-bit activations of the drafter's LM-head kernel).
    let frozen = specgate::heads::training::frozen_head(&model, &shipped.draft_vocab).unwrap();
    let trainer = Trainer::from_heads(&shipped.heads).unwrap();
    let dim = shipped.config.hidden_size;
    let hidden: Vec<f32> = (0..3 * dim)
        .map(|j| ((j * 7919) % 1000) as f32 / 250.0 - 2.0)
        .collect();
    let pending = vec![17u32, 9000, 20_000]; // the last one past the embedding vocabulary
    let labels: Vec<u32> = (0..3 * n).map(|j| [30u32, 1500, 25_000][j % 3]).collect();
    let data = HeadsData {
        hidden: hidden.clone(),
        pending: pending.clone(),
        labels: labels.clone(),
        dim,
        heads: n,
    };
    let batch = data.rows(&[0, 1, 2], &frozen).unwrap();
    let logits = trainer.logits(&batch, &frozen.lm).unwrap();
    let mut worst = 0.0f32;
    for (i, l) in logits.iter().enumerate() {
        for (j, want) in l.to_vec2::<f32>().unwrap().iter().enumerate() {
            let before = if i == 0 { 0 } else { labels[j * n + i - 1] };
            let got = drafter_logits(
                &shipped,
                i,
                &hidden[j * dim..(j + 1) * dim],
                pending[j],
                before,
            );
            assert_eq!(got.len(), want.len());
            // Relative to the row's largest logit: 8-bit activations err in proportion.
            let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let diff = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            worst = worst.max(diff / scale);
            assert_eq!(
                specgate_strategies::argmax(&got),
                specgate_strategies::argmax(want),
                "head {i} pair {j}"
            );
        }
    }
    // Measured 0.013: an 8-bit activation errs by up to 1/254 of its block's largest value.
    assert!(
        worst < 0.03,
        "trainer and drafter logits differ by {worst} of the largest"
    );
    // The calibration round-trips through `save`, and a config with the wrong count of
    // values, a non-positive temperature or a coverage past 1 is refused with the reason.
    let dir = tempfile::tempdir().unwrap();
    let mut heads = (*shipped.heads).clone();
    heads.temperatures = (0..n).map(|i| 1.0 + i as f32 / 3.0).collect();
    heads.coverage = (0..n).map(|i| 0.9 - i as f32 / 10.0).collect();
    bundle::save(dir.path(), &heads, &shipped.config).unwrap();
    let back = bundle::load(dir.path(), &model).unwrap();
    assert_eq!(back.heads.temperatures, heads.temperatures);
    assert_eq!(back.heads.coverage, heads.coverage);
    let ok = (
        shipped.config.temperatures.clone(),
        shipped.config.coverage.clone(),
    );
    for (temperatures, coverage, why) in [
        (vec![1.3; n - 1], ok.1.clone(), "temperatures values for"),
        (vec![0.0; n], ok.1.clone(), "not a positive"),
        (ok.0.clone(), vec![0.9; n + 1], "coverage values for"),
        (ok.0.clone(), vec![1.5; n], "not a share"),
    ] {
        let cfg = bundle::HeadsConfig {
            temperatures,
            coverage,
            ..shipped.config.clone()
        };
        let err = bundle::write_config(dir.path(), &cfg).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
        std::fs::write(
            dir.path().join("heads.json"),
            serde_json::to_string(&cfg).unwrap(),
        )
        .unwrap();
        let err = bundle::load(dir.path(), &model).err().expect("refused");
        assert!(err.to_string().contains(why), "{err}");
    }
}

#[test]
fn calibrate_heads_writes_temperatures_and_leaves_the_weights_alone() {
    let model = common::model_path();
    let shipped = bundle::default_dir(&model);
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&shipped).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let mut cfg = bundle::read_config(dir.path(), &model).unwrap();
    cfg.temperatures.clear();
    cfg.coverage.clear();
    bundle::write_config(dir.path(), &cfg).unwrap();
    // 16 training prompts: 0 and 8 are held out, as train-heads splits them.
    let train = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("strategies/data/medusa/train_prompts.jsonl"),
    )
    .unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    let lines: Vec<&str> = train.lines().take(16).collect();
    std::fs::write(&prompts, lines.join("\n")).unwrap();
    let run = |heads: &std::path::Path, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
            .args(["calibrate-heads", "--max-new-tokens", "48", "--model"])
            .arg(&model)
            .arg("--heads")
            .arg(heads)
            .arg("--prompts")
            .arg(&prompts)
            .args(extra)
            .output()
            .expect("run")
    };
    let out = run(dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = bundle::read_config(dir.path(), &model).unwrap();
    assert_eq!(back.temperatures.len(), cfg.num_heads);
    assert_eq!(back.coverage.len(), cfg.num_heads);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let cal = &report["calibration"];
    assert!(cal["pairs"].as_u64().unwrap() > 0);
    for i in 0..cfg.num_heads {
        let (before, after) = (cal["nll_before"][i].as_f64(), cal["nll_after"][i].as_f64());
        assert!(after.unwrap() <= before.unwrap() + 1e-9, "head {i}: {cal}");
        assert_eq!(
            cal["temperatures"][i].as_f64(),
            Some(f64::from(back.temperatures[i]))
        );
        assert_eq!(
            cal["coverage"][i].as_f64(),
            Some(f64::from(back.coverage[i]))
        );
    }
    assert_eq!(
        std::fs::read(dir.path().join("heads.safetensors")).unwrap(),
        std::fs::read(shipped.join("heads.safetensors")).unwrap(),
        "the weights are untouched"
    );
    // --rank-vocab ranks the draft vocabulary on the 14 training prompts' continuations,
    // writes it beside the heads, and the drafter then drafts those ids.
    std::fs::remove_file(dir.path().join("draft_vocab.json")).ok();
    let out = run(dir.path(), &["--rank-vocab"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file: specgate::heads::draft_vocab::DraftVocabFile = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("draft_vocab.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file.ids.len(), bundle::DRAFT_VOCAB);
    assert!(file.ranked_on > 0 && file.source.contains("prompts.jsonl"));
    let ranked = bundle::load(dir.path(), &model).unwrap();
    assert_eq!(
        ranked.config.draft_vocab.as_deref(),
        Some("draft_vocab.json")
    );
    assert_eq!(ranked.draft_vocab.ids(), file.ids);
    assert_eq!(ranked.lm_head.token_id(0), Some(file.ids[0]));
    assert_ne!(file.ids, (0..file.ids.len() as u32).collect::<Vec<_>>());
    // A draft vocabulary that repeats an id, or a config that names a path, is refused.
    let mut bad = file.clone();
    bad.ids[1] = bad.ids[0];
    bundle::save_draft_vocab(dir.path(), &bad).unwrap();
    let err = bundle::load(dir.path(), &model).err().expect("refused");
    assert!(err.to_string().contains("appears twice"), "{err}");
    let mut escape = ranked.config.clone();
    escape.draft_vocab = Some("../draft_vocab.json".into());
    bundle::write_config(dir.path(), &escape).unwrap();
    let err = bundle::load(dir.path(), &model).err().expect("refused");
    assert!(err.to_string().contains("not a file name"), "{err}");
    // Heads for another model: one line on stderr, a non-zero exit, nothing written.
    cfg.target_sha256 = "00".repeat(32);
    bundle::write_config(dir.path(), &cfg).unwrap();
    let out = run(dir.path(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("train-heads"),
        "{err}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("heads.json")).unwrap())
            .unwrap();
    assert!(
        json.get("temperatures").is_none() && json.get("coverage").is_none(),
        "{json}"
    );
}

#[test]
fn train_heads_with_a_ranked_draft_vocabulary_writes_heads_that_draft_its_ids() {
    let model = common::model_path();
    let dir = tempfile::tempdir().unwrap();
    let train = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("strategies/data/medusa/train_prompts.jsonl"),
    )
    .unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    std::fs::write(
        &prompts,
        train.lines().take(16).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let out_dir = dir.path().join("heads");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
        .args([
            "train-heads",
            "--max-new-tokens",
            "32",
            "--steps",
            "4",
            "--batch",
            "16",
        ])
        .args([
            "--sampled-variants",
            "0",
            "--draft-vocab",
            "ranked",
            "--model",
        ])
        .arg(&model)
        .arg("--prompts")
        .arg(&prompts)
        .arg("--work")
        .arg(dir.path().join("work"))
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = bundle::load(&out_dir, &model).expect("the new heads load");
    let file: specgate::heads::draft_vocab::DraftVocabFile =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("draft_vocab.json")).unwrap())
            .unwrap();
    // Ranked on the 14 training prompts' labels; ids never seen follow in id order.
    assert!(file.ranked_on > 0);
    assert_eq!(bundle.draft_vocab.ids(), file.ids);
    assert_eq!(bundle.draft_vocab.len(), bundle::DRAFT_VOCAB);
    assert_ne!(file.ids[..16], (0..16).collect::<Vec<u32>>()[..]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    // Coverage is measured on held-out prompts 0 and 8 against that vocabulary.
    let coverage = report["calibration"]["coverage"][0].as_f64().unwrap();
    assert!((0.5..=1.0).contains(&coverage), "{report}");
}
