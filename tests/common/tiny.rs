//! A tiny random-weight llama GGUF written by the tests themselves (8-token vocabulary,
//! 1 layer, hidden 32): fast to load, and a model whose vocabulary differs from the target's.

use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

/// The tiny model loaded, with the temporary folder that holds its file.
pub fn load_tiny_llama() -> (tempfile::TempDir, specgate::model::loaded::LoadedModel) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tiny.gguf");
    write_tiny_llama(&path);
    let lm = specgate::model::loaded::LoadedModel::load(&path).expect("the tiny model loads");
    (dir, lm)
}

pub fn write_tiny_llama(path: &Path) {
    write_tiny_llama_as(path, GgmlDType::Q8_0, 32);
}

/// The same tiny model with every matrix in `dtype` and width `hidden` (K-quants need 256).
pub fn write_tiny_llama_as(path: &Path, dtype: GgmlDType, hidden: usize) {
    use rand::{Rng, SeedableRng};
    let dev = Device::Cpu;
    // Seeded, so every run writes the same model.
    let rng = std::cell::RefCell::new(rand_chacha::ChaCha8Rng::seed_from_u64(7));
    let q = |shape: (usize, usize), scale: f32| {
        let data: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| rng.borrow_mut().random_range(-0.5f32..0.5) * scale)
            .collect();
        let t = Tensor::from_vec(data, shape, &dev).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    };
    let ones = |n: usize| {
        QTensor::quantize(
            &Tensor::ones(n, candle_core::DType::F32, &dev).unwrap(),
            GgmlDType::F32,
        )
        .unwrap()
    };
    let tokens = ["<unk>", "<s>", "<|im_end|>", "a", "b", "ab", "c", "d"];
    let md: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(1)),
        ("llama.embedding_length", Value::U32(hidden as u32)),
        ("llama.feed_forward_length", Value::U32(2 * hidden as u32)),
        ("llama.attention.head_count", Value::U32(1)),
        ("llama.attention.head_count_kv", Value::U32(1)),
        ("llama.context_length", Value::U32(64)),
        ("llama.rope.dimension_count", Value::U32(hidden as u32)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.vocab_size", Value::U32(tokens.len() as u32)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(
                tokens
                    .iter()
                    .map(|t| Value::String(t.to_string()))
                    .collect(),
            ),
        ),
        (
            "tokenizer.ggml.merges",
            Value::Array(vec![Value::String("a b".into())]),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array([3, 3, 3, 1, 1, 1, 1, 1].map(Value::I32).to_vec()),
        ),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ];
    let tensors: Vec<(&str, QTensor)> = vec![
        ("token_embd.weight", q((8, hidden), 1.0)),
        ("output_norm.weight", ones(hidden)),
        ("blk.0.attn_norm.weight", ones(hidden)),
        ("blk.0.attn_q.weight", q((hidden, hidden), 0.3)),
        ("blk.0.attn_k.weight", q((hidden, hidden), 0.3)),
        ("blk.0.attn_v.weight", q((hidden, hidden), 0.3)),
        ("blk.0.attn_output.weight", q((hidden, hidden), 0.3)),
        ("blk.0.ffn_norm.weight", ones(hidden)),
        ("blk.0.ffn_gate.weight", q((2 * hidden, hidden), 0.3)),
        ("blk.0.ffn_up.weight", q((2 * hidden, hidden), 0.3)),
        ("blk.0.ffn_down.weight", q((hidden, 2 * hidden), 0.3)),
    ];
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (*k, v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}
