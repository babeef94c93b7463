//! The counts suffix drafting reads: per context of 1..=`max_depth` tokens, the tokens that
//! followed it; and a scope's cache of earlier requests' text, bounded by a token budget.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::TokenId;

/// The continuations seen after one context, with their counts: few per context, so a
/// short list rather than a map, and the most common case, one, inline: inserting a
/// 300-token request took 0.60 ms with every list on the heap, 0.11 ms so, and freeing a
/// full 2^18-token cache 0.44 s against 28 ms.
#[derive(Debug, Clone)]
enum Continuations {
    One([(TokenId, u32); 1]),
    Many(Vec<(TokenId, u32)>),
}

// The inline case costs nothing over a list: the list's pointer tells the two apart.
const _: () = assert!(std::mem::size_of::<Continuations>() == std::mem::size_of::<Vec<u64>>());

impl Continuations {
    fn as_slice(&self) -> &[(TokenId, u32)] {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }

    fn add(&mut self, next: TokenId) {
        match self {
            Self::One([(t, c)]) if *t == next => *c += 1,
            Self::One([seen]) => *self = Self::Many(vec![*seen, (next, 1)]),
            Self::Many(many) => match many.iter_mut().find(|(t, _)| *t == next) {
                Some((_, c)) => *c += 1,
                None => many.push((next, 1)),
            },
        }
    }

    /// Take one count of `next` back; whether none is left.
    fn take_back(&mut self, next: TokenId) -> bool {
        match self {
            Self::One([(t, c)]) => {
                if *t == next {
                    *c = c.saturating_sub(1);
                }
                *c == 0
            }
            Self::Many(many) => {
                if let Some(j) = many.iter().position(|(t, _)| *t == next) {
                    many[j].1 -= 1;
                    if many[j].1 == 0 {
                        many.swap_remove(j);
                    }
                }
                if let [one] = many[..] {
                    *self = Self::One([one]);
                }
                self.as_slice().is_empty()
            }
        }
    }
}

/// Next-token counts per context, keyed by a 64-bit hash of the context: a key costs no
/// allocation and no hashing of a token vector (inserting a 300-token request into a full
/// cache took 2.1 ms with vector keys on the engine thread). Two contexts sharing a key
/// (about one pair in 10^7 at 2M contexts) can only make a draft wrong, which the target
/// rejects. Each index folds from a random seed of its own, so a tenant cannot craft text
/// whose contexts crowd one part of the table and slow every insert on the engine thread.
#[derive(Debug, Clone, Default)]
pub struct SuffixIndex {
    pub(super) max_depth: usize,
    seed: u64,
    next: HashMap<u64, Continuations, BuildHasherDefault<KeyHasher>>,
}

/// The key of `context`: its tokens folded from the last back, then mixed (the keys of a
/// position's contexts of depth 1, 2, … are the steps of one fold).
fn key(seed: u64, context: &[TokenId]) -> u64 {
    finish(context.iter().rev().fold(seed, |h, &t| fold(h, t)))
}

#[inline]
fn fold(h: u64, t: TokenId) -> u64 {
    (h.rotate_left(23) ^ u64::from(t)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// splitmix64's finaliser: every bit of the fold reaches the bits the table indexes by.
#[inline]
fn finish(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The keys of the contexts of depth 1..=`max_depth` that end just before `tokens[end]`.
fn keys(
    seed: u64,
    tokens: &[TokenId],
    end: usize,
    max_depth: usize,
) -> impl Iterator<Item = u64> + '_ {
    let mut h = seed;
    (1..=max_depth.min(end)).map(move |d| {
        h = fold(h, tokens[end - d]);
        finish(h)
    })
}

/// Keys are hashes already: the table uses them as they are.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; anything else still spreads.
        for &b in bytes {
            self.0 = fold(self.0, u32::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl SuffixIndex {
    pub fn new(max_depth: usize) -> Self {
        Self {
            max_depth: max_depth.max(1),
            seed: rand::random(),
            next: HashMap::default(),
        }
    }

    /// Count the continuation `tokens[i]` of each context ending at i - 1, for i ≥ `from`.
    pub(super) fn add_range(&mut self, tokens: &[TokenId], from: usize) {
        for i in from.max(1)..tokens.len() {
            let next = tokens[i];
            for k in keys(self.seed, tokens, i, self.max_depth) {
                self.next
                    .entry(k)
                    .and_modify(|c| c.add(next))
                    .or_insert(Continuations::One([(next, 1)]));
            }
        }
    }

    /// Take back what [`SuffixIndex::add_range`] counted for `tokens` (an evicted document),
    /// dropping what reaches 0. Only the document's own contexts are touched: a sweep of the
    /// whole index per eviction took 75 ms on the engine thread with a full 2^18-token cache.
    pub(super) fn remove(&mut self, tokens: &[TokenId]) {
        for i in 1..tokens.len() {
            for k in keys(self.seed, tokens, i, self.max_depth) {
                let emptied = self
                    .next
                    .get_mut(&k)
                    .is_some_and(|c| c.take_back(tokens[i]));
                if emptied {
                    self.next.remove(&k);
                }
            }
        }
    }

    /// The continuations seen after exactly `context`.
    pub(super) fn counts(&self, context: &[TokenId]) -> Option<&[(TokenId, u32)]> {
        self.next
            .get(&key(self.seed, context))
            .map(Continuations::as_slice)
    }

    /// Continuations of the deepest context of `history` this index has seen:
    /// (depth, counts), or None. Every suffix of a counted context is counted, so the
    /// search stops at the first depth not seen.
    pub(super) fn lookup(&self, history: &[TokenId]) -> Option<(usize, &[(TokenId, u32)])> {
        let mut deepest = None;
        for (d, k) in keys(self.seed, history, history.len(), self.max_depth).enumerate() {
            match self.next.get(&k) {
                Some(counts) => deepest = Some((d + 1, counts.as_slice())),
                None => break,
            }
        }
        deepest
    }

    /// Every context's counts, sorted (tests compare indexes with it).
    #[cfg(test)]
    fn sorted(&self) -> std::collections::BTreeMap<u64, Vec<(TokenId, u32)>> {
        let sort = |c: &Continuations| {
            let mut c = c.as_slice().to_vec();
            c.sort_unstable();
            c
        };
        self.next.iter().map(|(k, c)| (*k, sort(c))).collect()
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
        let mut want = SuffixIndex {
            seed: cache.index.seed,
            ..SuffixIndex::new(3)
        };
        for d in &docs[1..] {
            want.add_range(d, 0);
        }
        assert_eq!(cache.index.sorted(), want.sorted());
        assert_eq!(cache.len_tokens(), 16);
    }
}
