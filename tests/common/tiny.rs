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
    write_tiny(path, "llama", dtype, hidden);
}

/// A tiny one-layer model of architecture `arch` (llama, qwen2, qwen3, gemma3) with the
/// tensors that architecture adds: Q/K/V biases (qwen2), Q/K norms (qwen3, gemma3), norms
/// after attention and MLP (gemma3). Two query heads share one KV head.
pub fn write_tiny(path: &Path, arch: &str, dtype: GgmlDType, hidden: usize) {
    use rand::{Rng, SeedableRng};
    let dev = Device::Cpu;
    // Seeded, so every run writes the same model.
    let rng = std::cell::RefCell::new(rand_chacha::ChaCha8Rng::seed_from_u64(7));
    let random = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..n)
            .map(|_| rng.borrow_mut().random_range(lo..hi))
            .collect()
    };
    let q = |shape: (usize, usize), scale: f32| {
        let data: Vec<f32> = random(shape.0 * shape.1, -0.5, 0.5)
            .into_iter()
            .map(|v| v * scale)
            .collect();
        let t = Tensor::from_vec(data, shape, &dev).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    };
    let vector = |values: Vec<f32>| {
        let n = values.len();
        QTensor::quantize(&Tensor::from_vec(values, n, &dev).unwrap(), GgmlDType::F32).unwrap()
    };
    let ones = |n: usize| vector(vec![1.0; n]);
    let llama = arch == "llama";
    let (heads, head_dim) = if llama { (1, hidden) } else { (2, hidden / 2) };
    let kv = head_dim; // one KV head
    let key = |k: &str| format!("{arch}.{k}");
    let tokens = ["<unk>", "<s>", "<|im_end|>", "a", "b", "ab", "c", "d"];
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.dtype".into(), Value::U32(0)),
        (key("block_count"), Value::U32(1)),
        (key("embedding_length"), Value::U32(hidden as u32)),
        (key("feed_forward_length"), Value::U32(2 * hidden as u32)),
        (key("attention.head_count"), Value::U32(heads as u32)),
        (key("attention.head_count_kv"), Value::U32(1)),
        (key("attention.key_length"), Value::U32(head_dim as u32)),
        (key("attention.value_length"), Value::U32(head_dim as u32)),
        (key("context_length"), Value::U32(64)),
        (key("rope.dimension_count"), Value::U32(head_dim as u32)),
        // Gemma's one (sliding-window) layer turns with its local base of 10 000 instead.
        (
            key("rope.freq_base"),
            Value::F32(if llama { 10_000.0 } else { 1e6 }),
        ),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (key("attention.sliding_window"), Value::U32(64)),
        (key("vocab_size"), Value::U32(tokens.len() as u32)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(
                tokens
                    .iter()
                    .map(|t| Value::String(t.to_string()))
                    .collect(),
            ),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(vec![Value::String("a b".into())]),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array([3, 3, 3, 1, 1, 1, 1, 1].map(Value::I32).to_vec()),
        ),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ];
    if llama {
        md.retain(|(k, _)| !k.contains("key_length") && !k.contains("value_length"));
    }
    let q_width = heads * head_dim;
    let mut tensors: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), q((8, hidden), 1.0)),
        ("output_norm.weight".into(), ones(hidden)),
        ("blk.0.attn_norm.weight".into(), ones(hidden)),
        ("blk.0.attn_q.weight".into(), q((q_width, hidden), 0.3)),
        ("blk.0.attn_k.weight".into(), q((kv, hidden), 0.3)),
        ("blk.0.attn_v.weight".into(), q((kv, hidden), 0.3)),
        ("blk.0.attn_output.weight".into(), q((hidden, q_width), 0.3)),
        ("blk.0.ffn_norm.weight".into(), ones(hidden)),
        ("blk.0.ffn_gate.weight".into(), q((2 * hidden, hidden), 0.3)),
        ("blk.0.ffn_up.weight".into(), q((2 * hidden, hidden), 0.3)),
        ("blk.0.ffn_down.weight".into(), q((hidden, 2 * hidden), 0.3)),
    ];
    if arch == "qwen2" {
        for (name, n) in [
            ("attn_q.bias", q_width),
            ("attn_k.bias", kv),
            ("attn_v.bias", kv),
        ] {
            tensors.push((format!("blk.0.{name}"), vector(random(n, -0.5, 0.5))));
        }
    }
    if arch == "qwen3" || arch == "gemma3" {
        for name in ["attn_q_norm.weight", "attn_k_norm.weight"] {
            tensors.push((format!("blk.0.{name}"), vector(random(head_dim, 0.8, 1.2))));
        }
    }
    if arch == "gemma3" {
        for name in ["post_attention_norm.weight", "post_ffw_norm.weight"] {
            tensors.push((format!("blk.0.{name}"), vector(random(hidden, 0.8, 1.2))));
        }
    }
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}
