//! The tokenizer, built from the GGUF file's own `tokenizer.ggml.*` metadata, in either of
//! the two families GGUF files carry:
//! - `gpt2`: byte-level BPE from `tokens` and `merges` through the `tokenizers` crate, with
//!   the pre-tokenizer `tokenizer.ggml.pre` names (`smollm`, `gpt2`, `llama-bpe`, `qwen2`),
//!   a byte-level decoder, and control / user-defined tokens (type 3 / 4) as special tokens.
//!   (candle's `TokenizerFromGguf` adds a prefix space for `smollm` and does not round-trip.)
//! - `llama`: SentencePiece-style merging by score with byte fallback ([`spm`]), after
//!   llama.cpp's split at special tokens ([`special`]) — Gemma's tokenizer.

mod bpe;
mod special;
mod spm;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use specgate_strategies::TokenId;

use special::SpecialTokens;
use spm::Spm;

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

enum Model {
    Bpe(Box<tokenizers::Tokenizer>),
    Spm {
        spm: Box<Spm>,
        specials: SpecialTokens,
    },
}

/// A model's tokenizer plus the ids the generation loop needs.
pub struct Tokenizer {
    model: Model,
    eos: TokenId,
    /// The id a prompt starts with where the model asks for one (`add_bos_token`).
    bos: Option<TokenId>,
    /// Whether a prompt ends with EOS (`add_eos_token`, as llama.cpp's tokenizer adds it).
    add_eos: bool,
    special: Vec<bool>, // [vocab] true for control and user-defined tokens
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

fn numbers<T>(
    md: &HashMap<String, Value>,
    key: &str,
    len: usize,
    default: T,
    read: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<T>, TokenizerError>
where
    T: Clone,
{
    let Some(v) = md.get(key) else {
        return Ok(vec![default; len]);
    };
    let values = v.to_vec().map_err(|e| md_err(key, e))?;
    let out = values
        .iter()
        .map(|x| read(x).ok_or_else(|| md_err(key, "not a number")))
        .collect::<Result<Vec<T>, _>>()?;
    if out.len() != len {
        return Err(md_err(
            key,
            format!("{} values for {len} tokens", out.len()),
        ));
    }
    Ok(out)
}

fn flag(md: &HashMap<String, Value>, key: &str) -> Option<bool> {
    md.get(key).and_then(|v| v.to_bool().ok())
}

impl Tokenizer {
    pub fn from_gguf_metadata(md: &HashMap<String, Value>) -> Result<Self, TokenizerError> {
        let kind = md
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok())
            .map(String::as_str);
        let tokens = strings(md, "tokenizer.ggml.tokens")?;
        let types = numbers(md, "tokenizer.ggml.token_type", tokens.len(), 1, |v| {
            v.to_i32().ok()
        })?;
        let special: Vec<bool> = types.iter().map(|&t| t == 3 || t == 4).collect();
        let id = |key: &str| md.get(key).and_then(|v| v.to_u32().ok());
        let eos = id("tokenizer.ggml.eos_token_id")
            .ok_or_else(|| md_err("tokenizer.ggml.eos_token_id", "missing"))?;
        let (model, add_bos_default) = match kind {
            Some("gpt2") => (
                Model::Bpe(Box::new(bpe::from_gguf(md, &tokens, &special)?)),
                false,
            ),
            Some("llama") => {
                let scores = numbers(md, "tokenizer.ggml.scores", tokens.len(), 0.0, |v| {
                    v.to_f32().ok()
                })?;
                let specials = SpecialTokens::new(
                    tokens
                        .iter()
                        .zip(&special)
                        .enumerate()
                        .filter(|(_, (_, &s))| s)
                        .map(|(i, (t, _))| (t.clone(), i as TokenId))
                        .collect(),
                )?;
                let prefix = flag(md, "tokenizer.ggml.add_space_prefix").unwrap_or(true);
                let spm = Box::new(Spm::new(tokens, scores, &types, prefix));
                (Model::Spm { spm, specials }, true)
            }
            other => {
                return Err(TokenizerError::Unsupported(format!(
                    "tokenizer.ggml.model {other:?} (supported: gpt2, llama)"
                )))
            }
        };
        let add_bos = flag(md, "tokenizer.ggml.add_bos_token").unwrap_or(add_bos_default);
        let bos = id("tokenizer.ggml.bos_token_id").filter(|_| add_bos);
        let add_eos = flag(md, "tokenizer.ggml.add_eos_token").unwrap_or(false);
        let chat_template = md
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned();
        Ok(Self {
            model,
            eos,
            bos,
            add_eos,
            special,
            chat_template,
        })
    }

    /// Token ids for text; special-token strings in the text become their single ids.
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizerError> {
        match &self.model {
            Model::Bpe(inner) => Ok(inner
                .encode(text, false)
                .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?
                .get_ids()
                .to_vec()),
            Model::Spm { spm, specials } => Ok(spm.encode_pieces(&specials.split(text))),
        }
    }

    /// A prompt's ids: [`Tokenizer::encode`], after the BOS token where the model wants one
    /// and the text does not already start with it (a chat template may write it), and
    /// before EOS where the model wants that (`add_eos_token`).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<TokenId>, TokenizerError> {
        let mut ids = self.encode(text)?;
        if let Some(bos) = self.bos.filter(|&b| ids.first() != Some(&b)) {
            ids.insert(0, bos);
        }
        if self.add_eos && ids.last() != Some(&self.eos) {
            ids.push(self.eos);
        }
        Ok(ids)
    }

    /// Text for ids, special tokens included as written (round-trips `encode`).
    pub fn decode(&self, ids: &[TokenId]) -> Result<String, TokenizerError> {
        match &self.model {
            Model::Bpe(inner) => inner
                .decode(ids, false)
                .map_err(|e| TokenizerError::Tokenizers(e.to_string())),
            Model::Spm { spm, .. } => {
                let bytes: Vec<u8> = ids.iter().flat_map(|&id| spm.token_bytes(id)).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    }

    pub fn eos(&self) -> TokenId {
        self.eos
    }

    /// The token prompts start with, where the model asks for one.
    pub fn bos(&self) -> Option<TokenId> {
        self.bos
    }

    pub fn vocab_size(&self) -> usize {
        self.special.len()
    }

    /// The string of one token as stored in the vocabulary.
    pub fn token_str(&self, id: TokenId) -> Option<String> {
        match &self.model {
            Model::Bpe(inner) => inner.id_to_token(id),
            Model::Spm { spm, .. } => spm.token_str(id).map(str::to_string),
        }
    }

    /// The bytes one token stands for: byte-level BPE stores each byte as a printable
    /// character (GPT-2's table); SentencePiece writes spaces as `▁` and rare bytes as
    /// `<0xXX>` tokens; a special token stands for its text.
    pub fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        if let Model::Spm { spm, .. } = &self.model {
            return spm.token_bytes(id);
        }
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

    /// Whether `encode` of a fragment gives the ids the fragment has inside a longer text
    /// (false where SentencePiece writes a space before every text).
    pub fn encodes_fragments(&self) -> bool {
        match &self.model {
            Model::Bpe(_) => true,
            Model::Spm { spm, .. } => !spm.adds_space_prefix(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A SentencePiece vocabulary's metadata, with the BOS / EOS flags given.
    fn spm_metadata(add_bos: bool, add_eos: bool) -> HashMap<String, Value> {
        let tokens = [
            "<pad>", "<eos>", "<bos>", "<turn>", "▁", "a", "b", "▁a", "ab",
        ];
        let types = [3, 3, 3, 3, 1, 1, 1, 1, 1];
        let strings =
            |v: &[&str]| Value::Array(v.iter().map(|t| Value::String(t.to_string())).collect());
        HashMap::from([
            ("tokenizer.ggml.model".into(), Value::String("llama".into())),
            ("tokenizer.ggml.tokens".into(), strings(&tokens)),
            (
                "tokenizer.ggml.token_type".into(),
                Value::Array(types.map(Value::I32).to_vec()),
            ),
            (
                "tokenizer.ggml.scores".into(),
                Value::Array([0.0f32; 9].map(Value::F32).to_vec()),
            ),
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(1)),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(2)),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(add_bos)),
            ("tokenizer.ggml.add_eos_token".into(), Value::Bool(add_eos)),
            ("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)),
        ])
    }

    #[test]
    fn prompts_get_bos_and_eos_as_the_model_asks() {
        let tok = Tokenizer::from_gguf_metadata(&spm_metadata(true, true)).unwrap();
        assert_eq!(tok.encode("ab a").unwrap(), vec![8, 7]);
        assert_eq!(tok.encode_prompt("ab a").unwrap(), vec![2, 8, 7, 1]);
        // A template that already wrote BOS does not get a second one.
        assert_eq!(tok.encode_prompt("<bos><turn>a").unwrap(), vec![2, 3, 5, 1]);
        assert_eq!(tok.decode(&[2, 8, 7]).unwrap(), "<bos>ab a");
        let plain = Tokenizer::from_gguf_metadata(&spm_metadata(false, false)).unwrap();
        assert_eq!(plain.encode_prompt("ab").unwrap(), vec![8]);
    }

    #[test]
    fn an_unknown_tokenizer_model_is_refused_by_name() {
        let mut md = spm_metadata(true, false);
        md.insert("tokenizer.ggml.model".into(), Value::String("rwkv".into()));
        let e = Tokenizer::from_gguf_metadata(&md)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("\"rwkv\"") && e.contains("supported: gpt2, llama"),
            "{e}"
        );
    }
}
