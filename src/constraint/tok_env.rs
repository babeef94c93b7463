//! The model's vocabulary as llguidance sees it: every token's bytes in a trie (control
//! tokens marked, so a grammar names them only on purpose), and tokenization by the
//! model's own tokenizer, which gives the ids llama.cpp gives, so the tokens a grammar
//! forces are the ones the model would write.

use std::sync::Arc;

use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

use crate::model::tokenizer::Tokenizer;

pub struct ModelTokEnv {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl ModelTokEnv {
    /// The environment for a model whose logit rows are `vocab` wide (ids past the
    /// tokenizer's stand for nothing and are never allowed).
    pub fn env(tokenizer: Arc<Tokenizer>, vocab: usize) -> TokEnv {
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .map(|id| {
                if id as usize >= tokenizer.vocab_size() {
                    Vec::new()
                } else if tokenizer.is_special(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend(tokenizer.token_str(id).unwrap_or_default().into_bytes());
                    w
                } else {
                    tokenizer.token_bytes(id)
                }
            })
            .collect();
        let info = TokRxInfo {
            vocab_size: vocab as u32,
            tok_eos: tokenizer.eos(),
            tok_bos: tokenizer.bos(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words);
        Arc::new(Self { tokenizer, trie })
    }
}

impl TokenizerEnv for ModelTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        // Text the tokenizer cannot take (a split UTF-8 character) goes byte by byte
        // through the trie.
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .encode(text)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(text.as_bytes()))
        })
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.tokenizer.encodes_fragments()
    }
}
