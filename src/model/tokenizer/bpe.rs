//! Byte-level BPE (`tokenizer.ggml.model = gpt2`) through the `tokenizers` crate, with the
//! pre-tokenizer llama.cpp runs for the `tokenizer.ggml.pre` the file names.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::{md_err, strings, TokenizerError};

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_LLAMA3` split.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN2` split (digits one by one).
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const SUPPORTED_PRE: &str = "smollm, gpt2, llama-bpe, qwen2, deepseek-r1-qwen";

fn pre_tokenizer(pre: Option<&str>) -> Result<PreTokenizerWrapper, TokenizerError> {
    let split = |regex: &str| -> Result<PreTokenizerWrapper, TokenizerError> {
        let split = Split::new(
            SplitPattern::Regex(regex.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Split(split),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, false)),
        ])))
    };
    match pre {
        // SmolLM: digits one by one, then GPT-2's split. Files without the key (our test
        // models) get the same.
        None | Some("smollm") => Ok(PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
        ]))),
        Some("gpt2") => Ok(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, true, true,
        ))),
        Some("llama-bpe") | Some("llama3") => split(LLAMA3),
        // llama.cpp splits DeepSeek-R1's Qwen distills as Qwen 2.
        Some("qwen2") | Some("deepseek-r1-qwen") => split(QWEN2),
        Some(other) => Err(TokenizerError::Unsupported(format!(
            "tokenizer.ggml.pre {other:?} (supported: {SUPPORTED_PRE})"
        ))),
    }
}

pub fn from_gguf(
    md: &HashMap<String, Value>,
    tokens: &[String],
    special: &[bool],
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let merges = strings(md, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_string(), b.to_string())),
            None => Err(md_err("tokenizer.ggml.merges", format!("bad merge {m:?}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let vocab: ahash::AHashMap<String, u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let pre = md
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str);
    inner.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    inner.with_decoder(Some(ByteLevelDecoder::default()));
    let added: Vec<AddedToken> = tokens
        .iter()
        .zip(special)
        .filter(|(_, &s)| s)
        .map(|(t, _)| AddedToken::from(t.clone(), true))
        .collect();
    inner
        .add_special_tokens(added)
        .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
    Ok(inner)
}
