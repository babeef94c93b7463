//! `specgate generate` as a user runs it: JSON output, and one-line errors, never a panic.

mod common;

use common::specgate;

#[test]
fn generate_json_has_the_documented_fields() {
    let model = common::model_path();
    let (code, stdout, stderr) = specgate(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "What is 2+2?",
        "--chat",
        "--max-tokens",
        "12",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    for key in [
        "text",
        "token_ids",
        "prompt_tokens",
        "generated_tokens",
        "tokens_per_second",
        "target_passes",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(
        v["generated_tokens"].as_u64(),
        Some(v["token_ids"].as_array().unwrap().len() as u64)
    );
    assert!(v["generated_tokens"].as_u64().unwrap() <= 12);
}

fn assert_one_line_error(args: &[&str], needle: &str) {
    let (code, _, stderr) = specgate(args);
    assert_ne!(code, 0);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
}

#[test]
fn bad_model_files_and_long_prompts_give_one_line_errors() {
    assert_one_line_error(
        &["generate", "--model", "/nonexistent.gguf", "--prompt", "hi"],
        "does not exist",
    );
    let dir = std::env::temp_dir().join(format!("specgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"this is not a gguf file").unwrap();
    assert_one_line_error(
        &[
            "generate",
            "--model",
            junk.to_str().unwrap(),
            "--prompt",
            "hi",
        ],
        "GGUF",
    );
    let model = common::model_path();
    let long = "word ".repeat(9000);
    assert_one_line_error(
        &[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            &long,
        ],
        "exceeds the context",
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn speculative_generate_reports_its_statistics_and_matches_plain() {
    let model = common::model_path();
    let run = |strategy: &str| {
        let (code, stdout, stderr) = specgate(&[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--chat",
            "--max-tokens",
            "24",
            "--json",
            "--prompt",
            "Repeat exactly: the cat sat on the mat, the cat sat on the mat.",
            "--strategy",
            strategy,
            "--k",
            "4",
        ]);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.trim()).expect("one JSON object")
    };
    let plain = run("plain");
    let spec = run("ngram");
    for key in [
        "strategy",
        "k",
        "drafted",
        "accepted",
        "acceptance_rate",
        "tokens_per_pass",
        "target_passes",
    ] {
        assert!(spec.get(key).is_some(), "missing {key} in {spec}");
    }
    assert_eq!(spec["strategy"], "ngram");
    assert_eq!(
        spec["token_ids"], plain["token_ids"],
        "greedy output does not depend on the strategy"
    );
    let (passes, generated) = (
        spec["target_passes"].as_u64().unwrap(),
        spec["generated_tokens"].as_u64().unwrap(),
    );
    assert!(
        passes <= generated + 1,
        "at most one pass per token plus the prompt's"
    );
    assert_eq!(plain["drafted"], 0);
}

/// `--row-cost` fixes the verify-row price: free rows give Medusa trees their whole budget,
/// dear ones cut them, and neither changes the greedy output.
#[test]
fn a_fixed_row_cost_sizes_medusa_trees_and_leaves_the_output_alone() {
    let model = common::model_path();
    let m = model.to_str().unwrap();
    let run = |cost: &str| {
        let (code, stdout, stderr) = specgate(&[
            "generate",
            "--model",
            m,
            "--chat",
            "--max-tokens",
            "24",
            "--json",
            "--prompt",
            "Write a short poem about rain.",
            "--strategy",
            "medusa-tree",
            "--k",
            "16",
            "--row-cost",
            cost,
        ]);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.trim()).expect("one JSON object")
    };
    let (free, dear) = (run("0"), run("0.9"));
    assert_eq!(free["token_ids"], dear["token_ids"]);
    let drafted = |v: &serde_json::Value| v["drafted"].as_u64().unwrap();
    assert!(
        drafted(&free) > 4 * drafted(&dear).max(1),
        "free rows {} vs dear rows {}",
        drafted(&free),
        drafted(&dear)
    );
    let (code, _, stderr) = specgate(&[
        "generate",
        "--model",
        m,
        "--prompt",
        "hi",
        "--row-cost",
        "nan",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a share of a plain pass"), "{stderr}");
}

#[test]
fn strategy_errors_are_clear() {
    let model = common::model_path();
    let m = model.to_str().unwrap();
    // An unknown strategy is a usage error: clap's message (plus its help hint), exit 2.
    let (code, _, stderr) = specgate(&[
        "generate",
        "--model",
        m,
        "--prompt",
        "hi",
        "--strategy",
        "hydra",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown strategy") && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert_one_line_error(
        &[
            "generate",
            "--model",
            m,
            "--prompt",
            "hi",
            "--strategy",
            "draft",
        ],
        "--draft-model",
    );
}

#[test]
fn serve_refuses_engine_sizes_it_cannot_run_with() {
    // At 0 the engine could never admit, step or prefill: refused before the model loads.
    for flag in ["--max-sequences", "--max-batch-tokens", "--prefill-chunk"] {
        let (code, _, stderr) = specgate(&["serve", flag, "0", "--port", "1"]);
        assert_eq!(code, 2, "{flag}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("at least 1"),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn bench_spec_runs_the_chosen_sets_and_reports_both_speed_ups() {
    let model = common::model_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_str().unwrap();
    let (code, stdout, stderr) = specgate(&[
        "bench",
        "spec",
        "--model",
        model.to_str().unwrap(),
        "--sets",
        "code_edit",
        "--strategies",
        "suffix",
        "--k",
        "4",
        "--prompts-per-set",
        "2",
        "--max-tokens",
        "24",
        "--repeats",
        "2",
        "--out",
        out,
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Two repeats of two prompts each, and only the chosen set.
    assert_eq!(
        stderr.matches("code_edit repeat 1 prompt").count(),
        2,
        "{stderr}"
    );
    assert!(!stderr.contains("rag "), "{stderr}");
    let csv = std::fs::read_to_string(dir.path().join("spec.csv")).expect("spec.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 1, "one set × one strategy × one k: {csv}");
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let row = &rows[0];
    assert_eq!(
        (row[col("set")], row[col("strategy")]),
        ("code_edit", "suffix")
    );
    for name in ["speed-up (median)", "set speed-up (median)", "tokens/pass"] {
        let v: f64 = row[col(name)].parse().expect(name);
        assert!(v.is_finite() && v > 0.0, "{name} = {v}");
    }
    assert!(stdout.contains("| code_edit | suffix | 4 |"), "{stdout}");
    // A set nobody ships is a usage error naming the known ones.
    let (code, _, stderr) = specgate(&["bench", "spec", "--sets", "poetry"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("known: code_edit"), "{stderr}");
}

#[test]
fn device_cuda_without_a_gpu_is_one_clear_line_and_auto_falls_back_to_the_cpu() {
    if specgate::model::device::cuda_devices() > 0 {
        eprintln!("skipped: this machine has a CUDA device (tests/engine.rs runs on it)");
        return;
    }
    let model = common::model_path();
    let m = model.to_str().unwrap();
    let why = if cfg!(feature = "cuda") {
        "no CUDA driver found"
    } else {
        "built without CUDA"
    };
    let gen = |device: &str| {
        vec![
            "generate",
            "--model",
            m,
            "--prompt",
            "Hi",
            "--max-tokens",
            "3",
            "--device",
        ]
        .into_iter()
        .chain([device])
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    for device in ["cuda", "cuda:1"] {
        let args = gen(device);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line_error(&args, why);
    }
    let args = gen("auto");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = specgate(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("serving on the CPU"), "{stderr}");
    assert!(!stdout.trim().is_empty());
    let args = gen("tpu");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = specgate(&args);
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(
        stderr.contains("expected cpu, cuda, cuda:N or auto"),
        "{stderr}"
    );
}
