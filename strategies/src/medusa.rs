//! Medusa-1 heads: on the target's final (normed) hidden state h of the row that produced the
//! pending token, head i computes h_i = h + SiLU(W_i·h + U_i·e + b_i) and the target's own LM
//! head turns h_i into a distribution over the token i + 1 places past the pending one. e is
//! the pending token's row of the LM head (Hydra-style conditioning): h only implies which
//! token the target chose through an argmax the heads cannot compute, and that token is the
//! best single clue to what follows it. Heads without U (format 1) ignore it. Drafting reuses
//! the hidden state of the target pass that just ran: no extra target pass. The heads do not
//! see each other's guesses, so a chain of k heads is k independent guesses.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::sampling::{argmax, sample_from};
use crate::tree::build_tree;
use crate::{Draft, DraftContext, DraftError, Drafter, TokenId};

/// The heads' weights, plain f32, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct MedusaHeads {
    pub hidden: usize,
    pub w: Vec<Vec<f32>>, // per head: [hidden (out), hidden (in)]
    pub b: Vec<Vec<f32>>, // per head: [hidden]
    /// Per head: [hidden (out), hidden (in)] over the pending token's embedding; empty for
    /// heads that see h only.
    pub u: Vec<Vec<f32>>,
}

impl MedusaHeads {
    pub fn num_heads(&self) -> usize {
        self.w.len()
    }

    /// Heads all zero: every head passes h through unchanged (training starts here, so an
    /// untrained head predicts what the target's next token would be).
    pub fn zeros(num_heads: usize, hidden: usize) -> Self {
        Self {
            hidden,
            w: vec![vec![0.0; hidden * hidden]; num_heads],
            b: vec![vec![0.0; hidden]; num_heads],
            u: Vec::new(),
        }
    }

    /// Whether the heads read the pending token's embedding.
    pub fn token_conditioned(&self) -> bool {
        !self.u.is_empty()
    }

    /// The first `n` heads' states for one hidden state h ([hidden]) and the pending token's
    /// embedding e (None: a zero vector, as in training for tokens past the draft
    /// vocabulary): [n, hidden].
    pub fn states(&self, h: &[f32], e: Option<&[f32]>, n: usize) -> Vec<f32> {
        let d = self.hidden;
        let mut out = Vec::with_capacity(n * d);
        for (i, (w, b)) in self.w.iter().zip(&self.b).take(n).enumerate() {
            let u = self.u.get(i).zip(e);
            for (o, row) in w.chunks_exact(d).enumerate() {
                let mut z = dot(row, h) + b[o];
                if let Some((u, e)) = u {
                    z += dot(&u[o * d..(o + 1) * d], e);
                }
                out.push(h[o] + z / (1.0 + (-z).exp()));
            }
        }
        out
    }
}

/// A dot product in 16 independent lanes, so the compiler vectorises it (a plain running sum
/// fixes the order of additions and stays scalar: 0.26 ms per head against 0.03).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let mut lanes = [0.0f32; L];
    let (ac, bc) = (a.chunks_exact(L), b.chunks_exact(L));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..L {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The target's LM head, as the drafter sees it: [rows, hidden] → [rows, vocab], the logits
/// of token ids `0..vocab()`. A draft vocabulary may stop short of the target's: the heads
/// then never propose the ids past it.
pub trait LmHead: Send + Sync {
    fn vocab(&self) -> usize;
    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError>;
    /// The target's vocabulary: the length of a q row (zeros past `vocab()`).
    fn target_vocab(&self) -> usize {
        self.vocab()
    }
    /// Row `token` of the LM head ([hidden]): the embedding token-conditioned heads read.
    /// None past `vocab()` (the heads were trained with a zero vector there) or when the head
    /// cannot give rows.
    fn token_row(&self, _token: TokenId) -> Option<Vec<f32>> {
        None
    }
}

/// Proposes the heads' guesses from the hidden state the sequence hands it.
pub struct MedusaDrafter {
    heads: Arc<MedusaHeads>,
    lm_head: Arc<dyn LmHead>,
    rng: StdRng,
    /// Greedy requests get a candidate tree of up to this many nodes, and at most k (0: a
    /// chain).
    tree_budget: usize,
}

/// Candidates per head when building a tree.
pub const TREE_TOP_N: usize = 4;

impl MedusaDrafter {
    pub fn new(heads: Arc<MedusaHeads>, lm_head: Arc<dyn LmHead>, seed: u64) -> Self {
        Self {
            heads,
            lm_head,
            rng: StdRng::seed_from_u64(seed),
            tree_budget: 0,
        }
    }

    /// Draft candidate trees of up to `budget` nodes for greedy requests (sampled ones keep
    /// chains). A round's k bounds the nodes too: k counts drafted tokens, chain or tree, so a
    /// verify pass is k + 1 rows whatever the draft's shape.
    pub fn with_tree(mut self, budget: usize) -> Self {
        self.tree_budget = budget;
        self
    }
}

/// The `n` likeliest tokens of a row of logits with their softmax probabilities.
fn top_n(row: &[f32], n: usize) -> Vec<(TokenId, f32)> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
    let mut idx: Vec<usize> = (0..row.len()).collect();
    let n = n.min(row.len());
    idx.select_nth_unstable_by(n.saturating_sub(1), |&a, &b| row[b].total_cmp(&row[a]));
    let mut best: Vec<(TokenId, f32)> = idx[..n]
        .iter()
        .map(|&i| (i as TokenId, (row[i] - max).exp() / sum))
        .collect();
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    best
}

impl Drafter for MedusaDrafter {
    fn name(&self) -> &'static str {
        "medusa"
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        let Some(h) = ctx.hidden else {
            return Ok(Draft::empty());
        };
        if h.len() != self.heads.hidden {
            return Err(DraftError(format!(
                "hidden state of {} values; the heads expect {}",
                h.len(),
                self.heads.hidden
            )));
        }
        let n = k.min(self.heads.num_heads());
        if n == 0 {
            return Ok(Draft::empty());
        }
        let e = if self.heads.token_conditioned() {
            ctx.tokens.last().and_then(|&t| self.lm_head.token_row(t))
        } else {
            None
        };
        if e.as_ref().is_some_and(|e| e.len() != h.len()) {
            return Err(DraftError(
                "the LM head returned a row of the wrong width".into(),
            ));
        }
        let states = self.heads.states(h, e.as_deref(), n);
        let logits = self.lm_head.logits(&states)?; // [n, vocab]
        let vocab = self.lm_head.vocab();
        if logits.len() != n * vocab {
            return Err(DraftError("the LM head returned the wrong shape".into()));
        }
        if ctx.sampling.is_greedy() && self.tree_budget > 0 {
            let candidates: Vec<_> = logits
                .chunks_exact(vocab)
                .map(|r| top_n(r, TREE_TOP_N))
                .collect();
            let budget = self.tree_budget.min(k);
            return Ok(Draft::tree(build_tree(&candidates, budget)));
        }
        if ctx.sampling.is_greedy() {
            let tokens: Vec<TokenId> = logits.chunks_exact(vocab).map(argmax).collect();
            return Ok(Draft::deterministic(tokens));
        }
        // Sampled: each head's q is its logits shaped like the target's p.
        let mut tokens = Vec::with_capacity(n);
        let mut q = Vec::with_capacity(n);
        for row in logits.chunks_exact(vocab) {
            let mut probs = ctx.sampling.probs(row);
            // q is over the target's vocabulary: ids the heads cannot draft have q = 0.
            probs.resize(self.lm_head.target_vocab().max(vocab), 0.0);
            tokens.push(sample_from(&probs, &mut self.rng));
            q.push(probs);
        }
        Ok(Draft {
            tokens,
            q: Some(q),
            parents: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SamplingParams;

    /// Vocabulary of 4; logits are the hidden state itself (hidden = 4).
    struct Identity;
    impl LmHead for Identity {
        fn vocab(&self) -> usize {
            4
        }
        fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
            Ok(rows.to_vec())
        }
        fn token_row(&self, token: TokenId) -> Option<Vec<f32>> {
            let t = token as usize;
            (t < 4).then(|| (0..4).map(|i| f32::from(u8::from(i == t))).collect())
        }
    }

    fn ctx<'a>(h: Option<&'a [f32]>, sp: &'a SamplingParams) -> DraftContext<'a> {
        DraftContext {
            tokens: &[1, 2],
            prompt_len: 1,
            sampling: sp,
            hidden: h,
        }
    }

    #[test]
    fn zero_heads_pass_the_hidden_state_through_and_a_bias_moves_the_guess() {
        let mut heads = MedusaHeads::zeros(2, 4);
        let h = [0.0, 3.0, 1.0, 0.0];
        assert_eq!(heads.states(&h, None, 2), [h, h].concat());
        // Head 1: a large bias on feature 3 (SiLU(8) ≈ 8) makes it guess token 3.
        heads.b[1][3] = 8.0;
        let sp = SamplingParams::greedy();
        let mut d = MedusaDrafter::new(Arc::new(heads), Arc::new(Identity), 0);
        assert_eq!(
            d.propose(&ctx(Some(&h), &sp), 5).unwrap().tokens,
            vec![1, 3]
        );
        assert_eq!(d.propose(&ctx(Some(&h), &sp), 1).unwrap().tokens, vec![1]);
        assert!(
            d.propose(&ctx(None, &sp), 2).unwrap().is_empty(),
            "no hidden state yet"
        );
        assert!(
            d.propose(&ctx(Some(&h[..3]), &sp), 2).is_err(),
            "wrong width"
        );
    }

    #[test]
    fn token_conditioned_heads_read_the_pending_tokens_row() {
        // Head 0's U copies 8·e: the state gains SiLU(8) ≈ 8 on the pending token's feature.
        let mut heads = MedusaHeads::zeros(1, 4);
        let mut u = vec![0.0; 16];
        for i in 0..4 {
            u[i * 4 + i] = 8.0;
        }
        heads.u = vec![u];
        let h = [0.0, 3.0, 1.0, 0.0];
        let e = [0.0, 0.0, 1.0, 0.0];
        let s = heads.states(&h, Some(&e), 1);
        assert!((s[2] - (1.0 + 8.0 / (1.0 + (-8.0f32).exp()))).abs() < 1e-5);
        assert_eq!(heads.states(&h, None, 1), h, "no row: a zero embedding");
        let sp = SamplingParams::greedy();
        let mut d = MedusaDrafter::new(Arc::new(heads), Arc::new(Identity), 0);
        // ctx's last token is 2: the head now guesses 2 where h alone says 1.
        assert_eq!(d.propose(&ctx(Some(&h), &sp), 1).unwrap().tokens, [2]);
        let past_vocab = DraftContext {
            tokens: &[1, 9],
            ..ctx(Some(&h), &sp)
        };
        assert_eq!(d.propose(&past_vocab, 1).unwrap().tokens, [1]);
    }

    #[test]
    fn sampled_drafts_carry_the_heads_distributions() {
        let heads = MedusaHeads::zeros(2, 4);
        let sp = SamplingParams {
            temperature: 1.0,
            ..SamplingParams::greedy()
        };
        let h = [0.0, 3.0, 1.0, 0.0];
        let mut d = MedusaDrafter::new(Arc::new(heads), Arc::new(Identity), 7);
        let draft = d.propose(&ctx(Some(&h), &sp), 2).unwrap();
        let q = draft.q.expect("q");
        assert_eq!(q.len(), 2);
        assert!((q[0].iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(q[0][1] > q[0][2] && q[0][2] > q[0][0]);
    }

    /// The first 3 of a 4-token vocabulary.
    struct DraftVocab3;
    impl LmHead for DraftVocab3 {
        fn vocab(&self) -> usize {
            3
        }
        fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
            Ok(rows.chunks_exact(4).flat_map(|r| r[..3].to_vec()).collect())
        }
        fn target_vocab(&self) -> usize {
            4
        }
    }

    #[test]
    fn a_short_draft_vocabulary_gives_q_over_the_whole_vocabulary() {
        let heads = Arc::new(MedusaHeads::zeros(2, 4));
        let h = [0.0, 1.0, 2.0, 9.0]; // token 3 would win, but the heads cannot draft it
        let sampled = SamplingParams {
            temperature: 1.0,
            ..SamplingParams::greedy()
        };
        let mut d = MedusaDrafter::new(Arc::clone(&heads), Arc::new(DraftVocab3), 3);
        let draft = d.propose(&ctx(Some(&h), &sampled), 2).unwrap();
        for q in draft.q.expect("q") {
            assert_eq!(q.len(), 4);
            assert_eq!(q[3], 0.0);
            assert!((q.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        assert!(draft.tokens.iter().all(|&t| t < 3));
        let greedy = SamplingParams::greedy();
        let mut d = MedusaDrafter::new(heads, Arc::new(DraftVocab3), 3);
        assert_eq!(
            d.propose(&ctx(Some(&h), &greedy), 2).unwrap().tokens,
            [2, 2]
        );
    }

    #[test]
    fn the_lane_dot_product_equals_the_plain_one() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.91).cos()).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-5);
    }

    #[test]
    fn greedy_requests_get_a_tree_whose_first_path_is_the_chain() {
        let mut heads = MedusaHeads::zeros(2, 4);
        heads.b[1][3] = 8.0;
        let heads = Arc::new(heads);
        let sp = SamplingParams::greedy();
        let h = [0.0, 3.0, 1.0, 0.0];
        let chain = MedusaDrafter::new(Arc::clone(&heads), Arc::new(Identity), 0)
            .propose(&ctx(Some(&h), &sp), 2)
            .unwrap();
        let mut d = MedusaDrafter::new(heads, Arc::new(Identity), 0).with_tree(5);
        // k counts nodes: k = 2 gets a 2-node tree; k = 8 gets the whole budget of 5.
        let small = d.propose(&ctx(Some(&h), &sp), 2).unwrap();
        assert_eq!(small.as_tree().expect("a tree").len(), 2);
        let draft = d.propose(&ctx(Some(&h), &sp), 8).unwrap();
        let tree = draft.as_tree().expect("a tree");
        assert_eq!(tree.len(), 5);
        assert!(tree.is_well_formed() && tree.max_depth() <= 2);
        // The likeliest node at each level is the chain's token.
        assert_eq!(tree.tokens[0], chain.tokens[0]);
        let child = (0..5).find(|&i| tree.parents[i] == Some(0)).unwrap();
        assert_eq!(tree.tokens[child], chain.tokens[1]);
        // Sampled requests still get a chain with q.
        let sampled = SamplingParams {
            temperature: 1.0,
            ..SamplingParams::greedy()
        };
        assert!(d
            .propose(&ctx(Some(&h), &sampled), 2)
            .unwrap()
            .parents
            .is_none());
    }
}
