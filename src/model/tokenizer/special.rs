//! Splitting text at special tokens before the tokenizer model sees it, as llama.cpp does
//! (`tokenizer_st_partition`): every control and user-defined token, longest first, cuts
//! each remaining stretch of text at its every occurrence. Gemma's vocabulary has 6 414 of
//! them (its `\n` runs and HTML tags are user-defined), so an Aho-Corasick pass first finds
//! the few a text contains.

use aho_corasick::AhoCorasick;
use specgate_strategies::TokenId;

use super::TokenizerError;

/// A stretch of the text, or a special token found in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Token(TokenId),
}

pub struct SpecialTokens {
    /// (text, id), longest text first, then by id.
    tokens: Vec<(String, TokenId)>,
    finder: AhoCorasick,
}

impl SpecialTokens {
    pub fn new(mut tokens: Vec<(String, TokenId)>) -> Result<Self, TokenizerError> {
        tokens.retain(|(t, _)| !t.is_empty());
        tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let finder = AhoCorasick::new(tokens.iter().map(|(t, _)| t))
            .map_err(|e| TokenizerError::Tokenizers(format!("special tokens: {e}")))?;
        Ok(Self { tokens, finder })
    }

    /// `text` cut at special tokens, in llama.cpp's order of precedence.
    pub fn split<'a>(&self, text: &'a str) -> Vec<Piece<'a>> {
        let mut present: Vec<usize> = self
            .finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .collect();
        present.sort_unstable();
        present.dedup();
        let mut pieces = vec![Piece::Text(text)];
        for i in present {
            let (special, id) = (&self.tokens[i].0, self.tokens[i].1);
            let mut next = Vec::with_capacity(pieces.len() + 2);
            for piece in pieces {
                let Piece::Text(t) = piece else {
                    next.push(piece);
                    continue;
                };
                let mut rest = 0;
                for (at, _) in t.match_indices(special.as_str()) {
                    if at > rest {
                        next.push(Piece::Text(&t[rest..at]));
                    }
                    next.push(Piece::Token(id));
                    rest = at + special.len();
                }
                if rest < t.len() {
                    next.push(Piece::Text(&t[rest..]));
                }
            }
            pieces = next;
        }
        pieces.retain(|p| *p != Piece::Text(""));
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longer_specials_win_and_every_occurrence_is_cut() {
        let s = SpecialTokens::new(vec![
            ("\n".into(), 1),
            ("\n\n".into(), 2),
            ("<b>".into(), 3),
        ])
        .unwrap();
        use Piece::*;
        assert_eq!(
            s.split("a\n\n\nb<b>c\n"),
            vec![
                Text("a"),
                Token(2),
                Token(1),
                Text("b"),
                Token(3),
                Text("c"),
                Token(1)
            ]
        );
        assert_eq!(s.split("plain"), vec![Text("plain")]);
        assert_eq!(s.split(""), Vec::<Piece>::new());
    }
}
