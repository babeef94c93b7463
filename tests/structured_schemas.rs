//! 20 JSON schemas (nested objects, arrays, enums, bounded numbers, optional fields, `$ref`,
//! anyOf/oneOf, patterns, nullable, const, a top-level array): every output, greedy and
//! sampled, with and without speculation, parses and validates against its schema by an
//! independent validator (Python's `jsonschema`). Greedy speculation gives plain greedy's
//! tokens under the schema.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{json, Value};
use specgate::constraint::{GrammarSpec, Grammars};
use specgate::drafting::registry::{BuildDrafter, StrategyKind};
use specgate::engine::generate::{generate_constrained, FinishReason, GenerateParams};
use specgate::SamplingParams;
use specgate_strategies::{Drafter, PlainDrafter};

const JSONSCHEMA: &str = "jsonschema==4.26.0";

#[test]
fn every_output_validates_against_its_schema() {
    let Some(python) = common::outside::python_with("jsonschema", JSONSCHEMA) else {
        return common::outside::skip(
            "the jsonschema Python package",
            &format!("pip install {JSONSCHEMA}"),
        );
    };
    let cases: Vec<Value> =
        serde_json::from_str(&common::fixture("structured/schemas.json")).unwrap();
    assert_eq!(cases.len(), 20);
    let mut lm = common::model();
    let lm = &mut *lm;
    let grammars = Grammars::new(Arc::clone(&lm.tokenizer), lm.model.config().vocab_size).unwrap();
    let cfg = common::lean_drafter_config(common::model_path(), 3);
    // A lookup-then-heads drafter for greedy requests, the heads' sampled chain (with q)
    // for sampled ones.
    let mut greedy_drafter = StrategyKind::SuffixMedusa
        .build(&cfg, &lm.tokenizer)
        .unwrap();
    let mut sampled_drafter = StrategyKind::Medusa.build(&cfg, &lm.tokenizer).unwrap();
    let sampled = SamplingParams {
        temperature: 0.8,
        top_k: 0,
        top_p: 0.95,
        min_p: 0.0,
    };
    let mut lines = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let schema = &case["schema"];
        let prompt = lm.prompt_ids(case["prompt"].as_str().unwrap()).unwrap();
        let spec = GrammarSpec::JsonSchema(schema.clone());
        let mut greedy_plain = Vec::new();
        for (what, k, sampling) in [
            ("greedy plain", 0, SamplingParams::greedy()),
            ("greedy speculative", 4, SamplingParams::greedy()),
            ("sampled plain", 0, sampled),
            ("sampled speculative", 3, sampled),
        ] {
            let drafter: &mut dyn Drafter = match (k, sampling.is_greedy()) {
                (0, _) => &mut PlainDrafter,
                (_, true) => greedy_drafter.as_mut(),
                (_, false) => sampled_drafter.as_mut(),
            };
            let params = GenerateParams {
                sampling,
                seed: 7,
                ..GenerateParams::greedy(200, k)
            };
            let grammar = grammars.compile(&spec).unwrap();
            let out = generate_constrained(
                &mut lm.model,
                &lm.tokenizer,
                &prompt,
                &params,
                drafter,
                Some(grammar),
                |_| {},
            )
            .unwrap();
            assert_eq!(
                out.finish_reason,
                FinishReason::Stop,
                "{name} {what} ran out of tokens: {}",
                out.text
            );
            match what {
                "greedy plain" => greedy_plain = out.token_ids.clone(),
                "greedy speculative" => {
                    assert_eq!(out.token_ids, greedy_plain, "{name}: {}", out.text)
                }
                _ => {}
            }
            lines.push(
                json!({"what": format!("{name} {what}"), "schema": schema, "output": out.text})
                    .to_string(),
            );
        }
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/validate_json.py"
    );
    let mut child = Command::new(&python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the validator");
    child
        .stdin
        .take()
        .unwrap()
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("0 failed") && report.matches("ok: ").count() == 80,
        "{report}"
    );
}
