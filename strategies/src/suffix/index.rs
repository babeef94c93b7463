//! The counts suffix drafting reads: per context of 1..=`max_depth` tokens, the tokens that
//! followed it; and a scope's cache of earlier requests' text, bounded by a token budget.

use std::collections::{HashMap, VecDeque};

use crate::TokenId;

/// Next-token counts per context.
#[derive(Debug, Clone, Default)]
pub struct SuffixIndex {
    pub(super) max_depth: usize,
    pub(super) next: HashMap<Vec<TokenId>, HashMap<TokenId, u32>>,
}

impl SuffixIndex {
    pub fn new(max_depth: usize) -> Self {
        Self {
            max_depth: max_depth.max(1),
            next: HashMap::new(),
        }
    }

    /// Count the continuation `tokens[i]` of each context ending at i - 1, for i ≥ `from`.
    pub(super) fn add_range(&mut self, tokens: &[TokenId], from: usize) {
        for i in from.max(1)..tokens.len() {
            for d in 1..=self.max_depth.min(i) {
                let ctx = &tokens[i - d..i];
                // Looked up by slice first: only a new context allocates its key.
                match self.next.get_mut(ctx) {
                    Some(m) => *m.entry(tokens[i]).or_insert(0) += 1,
                    None => {
                        self.next
                            .insert(ctx.to_vec(), HashMap::from([(tokens[i], 1)]));
                    }
                }
            }
        }
    }

    /// Take back what [`SuffixIndex::add_range`] counted for `tokens` (an evicted document),
    /// dropping what reaches 0. Only the document's own contexts are touched: a sweep of the
    /// whole index per eviction took 75 ms on the engine thread with a full 2^18-token cache.
    fn remove(&mut self, tokens: &[TokenId]) {
        for i in 1..tokens.len() {
            for d in 1..=self.max_depth.min(i) {
                let ctx = &tokens[i - d..i];
                let Some(m) = self.next.get_mut(ctx) else {
                    continue;
                };
                if let Some(c) = m.get_mut(&tokens[i]) {
                    *c = c.saturating_sub(1);
                    if *c == 0 {
                        m.remove(&tokens[i]);
                    }
                }
                if m.is_empty() {
                    self.next.remove(ctx);
                }
            }
        }
    }

    /// Continuations of the deepest context of `history` this index has seen:
    /// (depth, counts), or None.
    pub(super) fn lookup(&self, history: &[TokenId]) -> Option<(usize, &HashMap<TokenId, u32>)> {
        (1..=self.max_depth.min(history.len()))
            .rev()
            .find_map(|d| self.next.get(&history[history.len() - d..]).map(|m| (d, m)))
    }
}

/// Earlier requests' token sequences, bounded by a total token budget (oldest evicted).
#[derive(Debug)]
pub struct SuffixCache {
    pub(super) index: SuffixIndex,
    docs: VecDeque<Vec<TokenId>>,
    tokens: usize,
    max_tokens: usize,
}

impl SuffixCache {
    pub fn new(max_depth: usize, max_tokens: usize) -> Self {
        Self {
            index: SuffixIndex::new(max_depth),
            docs: VecDeque::new(),
            tokens: 0,
            max_tokens,
        }
    }

    /// Remember a finished request (prompt and output).
    pub fn insert(&mut self, doc: Vec<TokenId>) {
        if doc.len() > self.max_tokens {
            return;
        }
        while self.tokens + doc.len() > self.max_tokens {
            let Some(old) = self.docs.pop_front() else {
                break;
            };
            self.tokens -= old.len();
            self.index.remove(&old);
        }
        self.index.add_range(&doc, 0);
        self.tokens += doc.len();
        self.docs.push_back(doc);
    }

    pub fn len_tokens(&self) -> usize {
        self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evicted_document_leaves_the_index_as_if_never_seen() {
        let docs: Vec<Vec<TokenId>> = vec![
            vec![1, 2, 3, 4, 5, 1, 2, 9],
            vec![2, 3, 4, 5, 6, 2, 3, 4],
            vec![7, 1, 2, 3, 8, 8, 8, 8],
        ];
        // A budget of two documents: the third insert evicts the first.
        let mut cache = SuffixCache::new(3, 16);
        for d in &docs {
            cache.insert(d.clone());
        }
        let mut want = SuffixIndex::new(3);
        for d in &docs[1..] {
            want.add_range(d, 0);
        }
        assert_eq!(cache.index.next, want.next);
        assert_eq!(cache.len_tokens(), 16);
    }
}
