//! The SentencePiece-style tokenizer GGUF calls `llama` (Gemma, Llama 2, Mistral v0.1), as
//! llama.cpp runs it: spaces become `▁`, then adjacent symbols merge greedily, highest
//! vocabulary score first (leftmost on ties), and characters no token covers fall back to
//! `<0xXX>` byte tokens. The `tokenizers` crate's Unigram model picks the most likely
//! segmentation instead, which is not what llama.cpp (or the model's training) did.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use specgate_strategies::TokenId;

use super::special::Piece;

const SPACE: char = '\u{2581}'; // ▁

pub struct Spm {
    tokens: Vec<String>,
    scores: Vec<f32>,
    by_text: HashMap<String, TokenId>,
    bytes: [Option<TokenId>; 256],
    /// Byte tokens' values, by id.
    byte_of: HashMap<TokenId, u8>,
    add_space_prefix: bool,
}

/// A candidate merge of two adjacent symbols into a vocabulary token.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The heap's top is the highest score, then the leftmost (llama.cpp's comparator).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

/// One symbol of the text being merged: a byte range, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize, // 0 once merged into its left neighbour
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    pub fn new(
        tokens: Vec<String>,
        scores: Vec<f32>,
        types: &[i32],
        add_space_prefix: bool,
    ) -> Self {
        let by_text: HashMap<String, TokenId> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as TokenId))
            .collect();
        let mut bytes = [None; 256];
        let mut byte_of = HashMap::new();
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = by_text.get(&format!("<0x{b:02X}>")).copied();
            if let Some(id) = *slot {
                byte_of.insert(id, b as u8);
            }
        }
        // Only tokens typed BYTE (6) decode to their byte; a NORMAL token spelled <0x41>
        // stands for its text.
        byte_of.retain(|&id, _| types.get(id as usize).is_none_or(|&t| t == 6));
        Self {
            tokens,
            scores,
            by_text,
            bytes,
            byte_of,
            add_space_prefix,
        }
    }

    pub fn token_str(&self, id: TokenId) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Whether encoding writes a space before the text (so a fragment's ids differ from
    /// its ids inside a longer text).
    pub fn adds_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// The bytes a token stands for: a byte token's byte, else its text with `▁` as space.
    pub fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        if let Some(&b) = self.byte_of.get(&id) {
            return vec![b];
        }
        self.token_str(id)
            .map(|t| t.replace(SPACE, " ").into_bytes())
            .unwrap_or_default()
    }

    /// Token ids for pieces of text already split at special tokens.
    pub fn encode_pieces(&self, pieces: &[Piece<'_>]) -> Vec<TokenId> {
        let mut out = Vec::new();
        let mut prev_special = true;
        for piece in pieces {
            match *piece {
                Piece::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Piece::Text(text) => {
                    let mut escaped = String::with_capacity(text.len() + 3);
                    if self.add_space_prefix && prev_special {
                        escaped.push(SPACE);
                    }
                    escaped.extend(text.chars().map(|c| if c == ' ' { SPACE } else { c }));
                    self.merge(&escaped, &mut out);
                    prev_special = false;
                }
            }
        }
        out
    }

    /// llama.cpp's `llm_tokenizer_spm_session::tokenize` on escaped text.
    fn merge(&self, text: &str, out: &mut Vec<TokenId>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: None,
            });
            if i > 0 {
                symbols[i - 1].next = Some(i);
            }
        }
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_bigram(text, &symbols, Some(i - 1), Some(i), &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Stale: one side was merged since this candidate was made.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            let prev = symbols[b.left].prev;
            self.push_bigram(text, &symbols, prev, Some(b.left), &mut queue);
            let next = symbols[b.left].next;
            self.push_bigram(text, &symbols, Some(b.left), next, &mut queue);
        }
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.by_text.get(piece) {
                Some(&id) => out.push(id),
                // Only single characters stay unmerged without a token: their bytes.
                None => out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize])),
            }
            at = s.next;
        }
    }

    fn push_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: Option<usize>,
        right: Option<usize>,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (symbols[left], symbols[right]);
        let joined = &text[l.start..r.start + r.len];
        if let Some(&id) = self.by_text.get(joined) {
            queue.push(Bigram {
                left,
                right,
                score: self.scores.get(id as usize).copied().unwrap_or(0.0),
                len: joined.len(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Spm {
        let tokens = [
            "<unk>", "▁", "a", "b", "c", "ab", "bc", "▁a", "abc", "<0x41>", "<0xE2>",
        ];
        let scores = [
            0.0, -1.0, -2.0, -2.0, -2.0, -1.5, -0.5, -0.7, -3.0, 0.0, 0.0,
        ];
        let mut types = vec![1; tokens.len()];
        types[9] = 6;
        types[10] = 6;
        Spm::new(
            tokens.iter().map(|t| t.to_string()).collect(),
            scores.to_vec(),
            &types,
            false,
        )
    }

    #[test]
    fn merges_by_score_not_by_length_and_falls_back_to_bytes() {
        let v = vocab();
        // "abc": "bc" (−0.5) beats "ab" (−1.5); then "a"+"bc" = "abc" (−3.0) is a token.
        assert_eq!(v.encode_pieces(&[Piece::Text("abc")]), vec![8]);
        // " a": "▁a". "A" has no token: its byte token.
        assert_eq!(v.encode_pieces(&[Piece::Text(" aA")]), vec![7, 9]);
        assert_eq!(v.token_bytes(9), b"A".to_vec());
        assert_eq!(v.token_bytes(7), b" a".to_vec());
        // A special piece passes through untouched.
        assert_eq!(
            v.encode_pieces(&[Piece::Token(0), Piece::Text("ab")]),
            vec![0, 5]
        );
    }
}
