//! The tokenizer, built from the GGUF file's own `tokenizer.ggml.*` metadata.
//!
//! candle's `TokenizerFromGguf` adds a prefix space for `pre = smollm` and does not round-trip.
//! What matches llama.cpp and Hugging Face exactly for gpt2-style vocabularies: BPE from
//! `tokens` and `merges`, digits split one by one, byte-level without a prefix space, a
//! byte-level decoder, and control / user-defined tokens (type 3 / 4) as special tokens.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use specgate_strategies::TokenId;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::AddedToken;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer metadata: {0}")]
    Metadata(String),
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    #[error("tokenizer: {0}")]
    Tokenizers(String),
}

fn md_err(key: &str, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Metadata(format!("{key}: {e}"))
}

/// A model's tokenizer plus the ids the generation loop needs.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    eos: TokenId,
    special: Vec<bool>, // [vocab] true for control tokens
    chat_template: Option<String>,
}

fn strings(md: &HashMap<String, Value>, key: &str) -> Result<Vec<String>, TokenizerError> {
    let values = md.get(key).ok_or_else(|| md_err(key, "missing"))?;
    values
        .to_vec()
        .map_err(|e| md_err(key, e))?
        .iter()
        .map(|v| v.to_string().cloned().map_err(|e| md_err(key, e)))
        .collect()
}

impl Tokenizer {
    pub fn from_gguf_metadata(md: &HashMap<String, Value>) -> Result<Self, TokenizerError> {
        let model = md
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok());
        if model.map(String::as_str) != Some("gpt2") {
            return Err(TokenizerError::Unsupported(format!(
                "tokenizer.ggml.model {model:?} (only gpt2-style BPE is supported)"
            )));
        }
        let tokens = strings(md, "tokenizer.ggml.tokens")?;
        let merges = strings(md, "tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(md_err("tokenizer.ggml.merges", format!("bad merge {m:?}"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let types: Vec<i32> = match md.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|e| md_err("tokenizer.ggml.token_type", e))?
                .iter()
                .map(|t| {
                    t.to_i32()
                        .map_err(|e| md_err("tokenizer.ggml.token_type", e))
                })
                .collect::<Result<_, _>>()?,
            None => vec![1; tokens.len()],
        };
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
        let pre = Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
        ]);
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<bool> = types.iter().map(|&t| t == 3 || t == 4).collect();
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&special)
            .filter(|(_, &s)| s)
            .map(|(t, _)| AddedToken::from(t.clone(), true))
            .collect();
        inner
            .add_special_tokens(added)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        let eos = md
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.to_u32().ok())
            .ok_or_else(|| md_err("tokenizer.ggml.eos_token_id", "missing"))?;
        let chat_template = md
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned();
        Ok(Self {
            inner,
            eos,
            special,
            chat_template,
        })
    }

    /// Token ids for text; special-token strings in the text become their single ids.
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizerError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text for ids, special tokens included as written (round-trips `encode`).
    pub fn decode(&self, ids: &[TokenId]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))
    }

    pub fn eos(&self) -> TokenId {
        self.eos
    }

    pub fn vocab_size(&self) -> usize {
        self.special.len()
    }

    /// The string of one token as stored in the vocabulary.
    pub fn token_str(&self, id: TokenId) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The bytes one token stands for: byte-level BPE stores each byte as a printable
    /// character (GPT-2's table); a special token stands for its text.
    pub fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        let Some(s) = self.token_str(id) else {
            return Vec::new();
        };
        if self.is_special(id) {
            return s.into_bytes();
        }
        s.chars()
            .map(byte_of_char)
            .collect::<Option<Vec<u8>>>()
            .unwrap_or_else(|| s.into_bytes())
    }

    pub fn is_special(&self, id: TokenId) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

/// The byte a byte-level BPE character stands for: printable bytes stand for themselves,
/// the other 68 were moved to 256 + n, counted in byte order.
fn byte_of_char(c: char) -> Option<u8> {
    let printable = |b: u32| matches!(b, 33..=126 | 161..=172 | 174..=255);
    let c = c as u32;
    if c < 256 {
        return printable(c).then_some(c as u8);
    }
    let n = (c - 256) as usize;
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth(n)
        .map(|b| b as u8)
}

/// Turns a growing list of ids into text pieces without ever splitting a UTF-8 character:
/// a piece is released only once the bytes decoded so far form whole characters.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<TokenId>,
    prefix: usize, // ids before this are settled text
    read: usize,   // ids before this have been emitted
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one id; returns the new text it completes, if any.
    pub fn push(&mut self, tok: &Tokenizer, id: TokenId) -> Result<Option<String>, TokenizerError> {
        self.ids.push(id);
        // Decode with a little left context so byte-level merges across tokens stay right.
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let now = tok.decode(&self.ids[self.prefix..])?;
        match now.get(before.len()..) {
            Some(piece) if !piece.is_empty() && !now.ends_with('\u{FFFD}') => {
                let piece = piece.to_string();
                self.prefix = self.read;
                self.read = self.ids.len();
                Ok(Some(piece))
            }
            _ => Ok(None),
        }
    }

    /// Whatever is still held back (an incomplete character at the end), lossily.
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<Option<String>, TokenizerError> {
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let now = tok.decode(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(now
            .get(before.len()..)
            .filter(|p| !p.is_empty())
            .map(str::to_string))
    }
}
