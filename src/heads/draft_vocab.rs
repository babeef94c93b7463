//! The draft vocabulary: the token ids Medusa heads can propose, in the order of their rows
//! in the drafter's cut of the LM head. Drafting computes logits for these ids only (the cut
//! is a sixth of SmolLM2's LM head), so which ids they are decides how often the token the
//! target will choose can be drafted at all.
//!
//! By default they are the first `DRAFT_VOCAB` ids (BPE numbers tokens in merge order, a
//! general frequency order). They can instead be ranked by how often the target itself
//! produced each id in continuations of the training prompts (FR-Spec's frequency-ranked
//! draft vocabulary). On the default model that raises the share of held-out tokens inside
//! 8192 ids from 0.87 to 0.96 and, for heads trained with it, the held-out chain length from
//! 0.719 to 0.793 (an A/B on 399 training prompts, 800 steps each); but on the shipped bench
//! sets, whose text differs from the training prompts, tokens per pass fell 1-3%, so the
//! shipped heads keep the first ids. A ranked vocabulary is stored beside the heads as `draft_vocab.json`: `{"ids": [...],
//! "ranked_on": tokens counted, "source": what was counted}`, named by `heads.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use specgate_strategies::TokenId;

/// Index → token id for the drafter's logit columns: distinct ids inside the target's
/// vocabulary, at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftVocab {
    ids: Vec<TokenId>,
}

/// How a ranked vocabulary was made, stored beside its ids.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DraftVocabFile {
    pub ids: Vec<TokenId>,
    /// Tokens counted to rank the ids.
    pub ranked_on: u64,
    /// What was counted (e.g. the prompt file whose continuations they were).
    pub source: String,
}

impl DraftVocab {
    /// The first `n` ids (BPE numbers tokens in merge order, a rough frequency order).
    pub fn first(n: usize) -> Self {
        Self {
            ids: (0..n as TokenId).collect(),
        }
    }

    /// The `size` ids of a `counts.len()`-token vocabulary counted most often; ties and ids
    /// never counted follow in id order, so a small sample still fills the vocabulary with
    /// the merge order's guesses.
    pub fn ranked(counts: &[u64], size: usize) -> Self {
        let mut ids: Vec<TokenId> = (0..counts.len() as TokenId).collect();
        ids.sort_by_key(|&i| (std::cmp::Reverse(counts[i as usize]), i));
        ids.truncate(size);
        Self { ids }
    }

    /// `ids` as a draft vocabulary for a `vocab`-token target, refused (with the reason) when
    /// empty, repeated or past the vocabulary.
    pub fn from_ids(ids: Vec<TokenId>, vocab: usize) -> Result<Self, String> {
        if ids.is_empty() {
            return Err("the draft vocabulary is empty".into());
        }
        let mut seen = vec![false; vocab];
        for &id in &ids {
            let slot = seen
                .get_mut(id as usize)
                .ok_or_else(|| format!("token id {id} lies past the {vocab}-token vocabulary"))?;
            if std::mem::replace(slot, true) {
                return Err(format!("token id {id} appears twice"));
            }
        }
        Ok(Self { ids })
    }

    pub fn ids(&self) -> &[TokenId] {
        &self.ids
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Token id → logit column for a `vocab`-token target (`u32::MAX`: not draftable).
    pub fn columns(&self, vocab: usize) -> Vec<u32> {
        let mut col = vec![u32::MAX; vocab.max(self.max_id() + 1)];
        for (i, &id) in self.ids.iter().enumerate() {
            col[id as usize] = i as u32;
        }
        col
    }

    fn max_id(&self) -> usize {
        self.ids.iter().max().map_or(0, |&m| m as usize)
    }
}

/// How often each of a `vocab`-token vocabulary's ids occurs in `tokens` (ids past it are
/// not counted).
pub fn count_tokens(tokens: impl IntoIterator<Item = TokenId>, vocab: usize) -> Vec<u64> {
    let mut counts = vec![0u64; vocab];
    for t in tokens {
        if let Some(c) = counts.get_mut(t as usize) {
            *c += 1;
        }
    }
    counts
}

/// Read a `draft_vocab.json` for a `vocab`-token target.
pub fn read(path: &Path, vocab: usize) -> Result<DraftVocab, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: DraftVocabFile =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    DraftVocab::from_ids(file.ids, vocab).map_err(|e| format!("{}: {e}", path.display()))
}

/// Write `file` as JSON to `path`.
pub fn write(path: &Path, file: &DraftVocabFile) -> std::io::Result<()> {
    let text = serde_json::to_string(file).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_puts_frequent_ids_first_and_fills_with_id_order() {
        let counts = [0, 5, 0, 9, 5, 0];
        assert_eq!(DraftVocab::ranked(&counts, 4).ids(), [3, 1, 4, 0]);
        assert_eq!(DraftVocab::ranked(&counts, 10).len(), 6);
        assert_eq!(count_tokens([3, 3, 1, 7], 5), [0, 1, 0, 2, 0]);
    }

    #[test]
    fn columns_follow_the_ids_not_their_order() {
        let v = DraftVocab::from_ids(vec![7, 2], 8).unwrap();
        let col = v.columns(8);
        assert_eq!((col[7], col[2], col[0]), (0, 1, u32::MAX));
    }

    #[test]
    fn bad_vocabularies_are_refused_with_the_reason() {
        assert!(DraftVocab::from_ids(vec![], 8)
            .unwrap_err()
            .contains("empty"));
        assert!(DraftVocab::from_ids(vec![1, 1], 8)
            .unwrap_err()
            .contains("twice"));
        assert!(DraftVocab::from_ids(vec![8], 8)
            .unwrap_err()
            .contains("past the 8-token"));
    }
}
