//! Every weight format the engine promises (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, F16,
//! F32) loads and runs, on tiny random models the test writes, and agrees with
//! candle-transformers' `quantized_llama` on the same file.

mod common;

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use specgate::model::loaded::LoadedModel;
use specgate::model::LogitRows;
use specgate::tools::candle_reference::CandleReference;
use specgate_strategies::argmax;

#[test]
fn every_supported_format_loads_and_agrees_with_quantized_llama() {
    let dir = std::env::temp_dir().join(format!("specgate-formats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let formats = [
        (GgmlDType::F32, 32),
        (GgmlDType::F16, 32),
        (GgmlDType::Q8_0, 32),
        (GgmlDType::Q4_0, 32),
        (GgmlDType::Q4_1, 32),
        (GgmlDType::Q4K, 256),
        (GgmlDType::Q5K, 256),
        (GgmlDType::Q6K, 256),
        (GgmlDType::F32, 256),
    ];
    let ids = [3u32, 4, 5, 6, 7, 3, 5];
    for (dtype, hidden) in formats {
        let path = dir.join(format!("tiny-{dtype:?}.gguf"));
        common::tiny::write_tiny_llama_as(&path, dtype, hidden);
        let mut lm = LoadedModel::load(&path).unwrap_or_else(|e| panic!("{dtype:?}: {e}"));
        let s = lm.model.new_sequence();
        let ours = lm.model.forward_one(s, &ids, LogitRows::Last).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let mut reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap();
        let x = Tensor::new(&ids[..], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let theirs: Vec<f32> = reference
            .forward(&x, 0)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let diff = common::max_abs_diff(ours.row(0, 0), &theirs);
        let span = theirs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        eprintln!("{dtype:?}: max |Δlogit| vs quantized_llama {diff:.2e} (max |logit| {span:.1})");
        // Our f16 KV cache and f16-rounded attention weights (llama.cpp's rounding) differ from
        // candle's f32 attention by float rounding; on random 256-wide models that reached
        // 2.5% of the largest logit across draws, so the bound is 5%. K-quants add candle's
        // coarser activations (one 8-bit scale per 256 values, where our kernel keeps one per
        // 32): measured 2.6% (Q4_K) and 3.6% (Q6_K).
        assert!(diff < 0.05 * span, "{dtype:?}: {diff} of {span}");
        assert_eq!(argmax(ours.row(0, 0)), argmax(&theirs), "{dtype:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// qwen2 (Q/K/V biases), qwen3 (Q/K norms) and gemma3 (Q/K norms, post-norms, GELU, the
/// embedding scale, a sliding-window layer's own rotary base) agree with candle-transformers'
/// own quantized model of each, on tiny random models in several weight types. In F32,
/// qwen2 and qwen3 agree to 3.3e-4 of logits near 8. candle's `quantized_gemma3` gates its
/// MLP with SiLU where Gemma (and llama.cpp) use GELU-tanh: with our GELU swapped for SiLU
/// the gemma3 models agreed to 3.9e-4 (F32) and 4.8e-7 (Q8_0); as it is they differ by
/// 0.2 of 7, which the bound below allows. The real check of gemma3 is against llama.cpp
/// (tests/gemma_reference.rs).
#[test]
fn every_architecture_agrees_with_candle_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [3u32, 4, 5, 6, 7, 3, 5];
    for arch in ["qwen2", "qwen3", "gemma3"] {
        for (dtype, hidden) in [
            (GgmlDType::F32, 32),
            (GgmlDType::Q8_0, 32),
            (GgmlDType::Q5_0, 64),
            (GgmlDType::Q4K, 256),
        ] {
            let path = dir.path().join(format!("tiny-{arch}-{dtype:?}.gguf"));
            common::tiny::write_tiny(&path, arch, dtype, hidden);
            let mut lm = LoadedModel::load(&path).unwrap_or_else(|e| panic!("{arch}: {e}"));
            let s = lm.model.new_sequence();
            let ours = lm.model.forward_one(s, &ids, LogitRows::Last).unwrap();
            let mut reference = CandleReference::load(&path).unwrap();
            let theirs = reference.forward(&ids, 0).unwrap();
            let diff = common::max_abs_diff(ours.row(0, 0), &theirs);
            let span = theirs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            eprintln!(
                "{arch} {dtype:?}: max |Δlogit| vs candle {diff:.2e} (max |logit| {span:.1})"
            );
            assert!(diff < 0.05 * span, "{arch} {dtype:?}: {diff} of {span}");
            assert_eq!(argmax(ours.row(0, 0)), argmax(&theirs), "{arch} {dtype:?}");
        }
    }
}

/// A file of an architecture or weight type the engine does not run is refused at load,
/// in one line naming what is supported.
#[test]
fn unsupported_architectures_and_types_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-q5k.gguf");
    common::tiny::write_tiny(&path, "llama", GgmlDType::Q2K, 256);
    let e = LoadedModel::load(&path)
        .err()
        .expect("Q2_K is refused")
        .to_string();
    assert!(
        e.contains("Q2K") && e.contains("supported: F32, F16"),
        "{e}"
    );
    let path = dir.path().join("tiny-phi.gguf");
    common::tiny::write_tiny(&path, "phi3", GgmlDType::F32, 32);
    let e = LoadedModel::load(&path)
        .err()
        .expect("phi3 is refused")
        .to_string();
    assert!(
        e.contains("\"phi3\"") && e.contains("supported: llama, mistral"),
        "{e}"
    );
}
