use std::sync::Arc;

use super::*;
use crate::medusa::LmHead;
use crate::{Draft, DraftContext, DraftError, Drafter, SamplingParams, TokenId};

const D: usize = 32;
const V: usize = 48;

/// Deterministic pseudo-random values in [-scale, scale].
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) as f32 / (1u64 << 31) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn shape() -> EagleShape {
    EagleShape {
        hidden: D,
        heads: 2,
        kv_heads: 1,
        head_dim: 16,
        ffn: 64,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
    }
}

fn head() -> Arc<EagleHead> {
    let s = shape();
    let mut seed = 0;
    let w = EagleWeights::from_named(s, |name| {
        seed += 1;
        let (_, [r, c]) = s.tensors().into_iter().find(|(n, _)| *n == name)?;
        Some(if c == 1 {
            vec![1.0; r]
        } else {
            values(r * c, seed, 0.4)
        })
    })
    .expect("a whole shape");
    Arc::new(EagleHead::new(w))
}

/// A toy LM head: logits = E·f over V tokens; token rows are E's rows.
struct ToyHead(Vec<f32>);

impl LmHead for ToyHead {
    fn vocab(&self) -> usize {
        V
    }

    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
        Ok(rows
            .chunks_exact(D)
            .flat_map(|f| {
                self.0
                    .chunks_exact(D)
                    .map(move |e| 3.0 * e.iter().zip(f).map(|(a, b)| a * b).sum::<f32>())
            })
            .collect())
    }

    fn token_row(&self, token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        Ok(self
            .0
            .get(token as usize * D..(token as usize + 1) * D)
            .map(<[f32]>::to_vec))
    }
}

fn drafter(tree: usize) -> EagleDrafter {
    let lm: Arc<dyn LmHead> = Arc::new(ToyHead(values(V * D, 99, 1.0)));
    EagleDrafter::new(head(), lm, 7).with_tree(tree)
}

const PROMPT: usize = 3;

fn tokens() -> Vec<TokenId> {
    vec![1, 2, 3, 10, 11, 12, 13, 14]
}

fn ctx<'a>(
    tokens: &'a [TokenId],
    fresh: &'a [f32],
    sampling: &'a SamplingParams,
) -> DraftContext<'a> {
    DraftContext {
        tokens,
        prompt_len: PROMPT,
        sampling,
        hidden: None,
        fresh_hidden: fresh,
        row_cost: Some(0.0),
    }
}

/// Hidden rows for generated positions from..to.
fn rows(from: usize, to: usize) -> Vec<f32> {
    (from..to)
        .flat_map(|p| values(D, 1000 + p as u64, 1.0))
        .collect()
}

#[test]
fn reading_rows_at_once_or_round_by_round_drafts_the_same() {
    let greedy = SamplingParams::greedy();
    let all = tokens();
    let n = all.len() - PROMPT;
    let mut once = drafter(0);
    let want = once
        .propose(&ctx(&all, &rows(0, n), &greedy), 4)
        .expect("drafts");
    assert_eq!(want.len(), 4);
    let mut rounds = drafter(0);
    let mut at = 0;
    for upto in [1, 3, n] {
        let fresh = rows(at, upto);
        let got = rounds
            .propose(&ctx(&all[..PROMPT + upto], &fresh, &greedy), 4)
            .expect("drafts");
        at = upto;
        if upto == n {
            assert_eq!(got, want);
        }
    }
}

#[test]
fn the_tree_holds_the_greedy_chain_and_each_node_hangs_under_an_earlier_one() {
    let greedy = SamplingParams::greedy();
    let all = tokens();
    let fresh = rows(0, all.len() - PROMPT);
    let chain = drafter(0)
        .propose(&ctx(&all, &fresh, &greedy), 4)
        .expect("chain");
    let tree = drafter(32)
        .propose(&ctx(&all, &fresh, &greedy), 32)
        .expect("tree")
        .as_tree()
        .expect("a tree for a greedy request");
    assert!(tree.is_well_formed());
    assert_eq!(tree.len(), 32);
    // Follow the chain down the tree: each of its tokens is a child of the one before.
    let mut parent = None;
    for (i, t) in chain.tokens.iter().enumerate() {
        let node = (0..tree.len()).find(|&n| tree.parents[n] == parent && tree.tokens[n] == *t);
        assert!(node.is_some(), "chain token {i} ({t}) is not in the tree");
        parent = node;
    }
}

#[test]
fn sampled_chains_carry_a_q_row_per_token_that_covers_it() {
    let sampling = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
    };
    let all = tokens();
    let fresh = rows(0, all.len() - PROMPT);
    let d: Draft = drafter(32)
        .propose(&ctx(&all, &fresh, &sampling), 3)
        .expect("chain");
    assert!(d.parents.is_none(), "sampled requests get chains");
    let q = d.q.expect("q rows");
    assert_eq!(q.len(), d.tokens.len());
    for (row, &t) in q.iter().zip(&d.tokens) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4);
        assert!(row[t as usize] > 0.0);
    }
}

#[test]
fn a_gap_restarts_the_cache_and_rows_of_the_wrong_width_are_faults() {
    let greedy = SamplingParams::greedy();
    let all = tokens();
    let n = all.len() - PROMPT;
    let mut d = drafter(0);
    assert!(d
        .propose(&ctx(&all[..PROMPT + 2], &rows(0, 2), &greedy), 2)
        .is_ok());
    // Positions 2..5 were never handed over: it drafts from the last two alone, as a fresh
    // drafter given only those does.
    let late = d
        .propose(&ctx(&all, &rows(n - 2, n), &greedy), 3)
        .expect("drafts");
    let fresh = drafter(0)
        .propose(&ctx(&all, &rows(n - 2, n), &greedy), 3)
        .expect("drafts");
    assert_eq!(late, fresh);
    assert!(!late.is_empty());
    assert!(drafter(0)
        .propose(&ctx(&all, &[0.0; D + 1], &greedy), 3)
        .is_err());
    // Nothing read yet and no rows: no draft, no fault.
    assert!(drafter(0)
        .propose(&ctx(&all, &[], &greedy), 3)
        .expect("empty")
        .is_empty());
}

#[test]
fn a_drafter_handed_another_sequence_forgets_the_first() {
    let greedy = SamplingParams::greedy();
    let first = tokens();
    let n = first.len() - PROMPT;
    let mut d = drafter(0);
    d.propose(&ctx(&first[..PROMPT + 2], &rows(0, 2), &greedy), 2)
        .expect("drafts");
    // Another sequence of the same length so far, other tokens and rows: without `finish`
    // in between, it must draft as a fresh drafter does.
    let other: Vec<TokenId> = first.iter().map(|t| t + 20).collect();
    let other_rows: Vec<f32> = rows(0, n).iter().map(|v| -v).collect();
    let reused = d
        .propose(&ctx(&other, &other_rows, &greedy), 3)
        .expect("drafts");
    let fresh = drafter(0)
        .propose(&ctx(&other, &other_rows, &greedy), 3)
        .expect("drafts");
    assert_eq!(reused, fresh);
}
