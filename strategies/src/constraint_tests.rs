use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::sampling::SamplingParams;
use crate::tree::verify_tree_greedy;
use crate::verify::verify;

/// A constraint whose allowed set is a function of the tokens consumed so far.
#[derive(Clone)]
struct Rule {
    vocab: usize,
    seen: Vec<TokenId>,
    allowed: fn(&[TokenId]) -> Vec<TokenId>,
}

impl TokenConstraint for Rule {
    fn mask(&mut self) -> Result<TokenMask, ConstraintError> {
        Ok(TokenMask::only(self.vocab, &(self.allowed)(&self.seen)))
    }
    fn consume(&mut self, tokens: &[TokenId]) -> Result<(), ConstraintError> {
        for &t in tokens {
            if !(self.allowed)(&self.seen).contains(&t) {
                return Err(ConstraintError(format!("{t} not allowed")));
            }
            self.seen.push(t);
        }
        Ok(())
    }
    fn rollback(&mut self, n: usize) -> Result<(), ConstraintError> {
        let keep = self
            .seen
            .len()
            .checked_sub(n)
            .ok_or(ConstraintError("past start".into()))?;
        self.seen.truncate(keep);
        Ok(())
    }
    fn forced(&mut self) -> Vec<TokenId> {
        Vec::new()
    }
    fn fork(&self) -> Box<dyn TokenConstraint> {
        Box::new(self.clone())
    }
}

/// Even tokens only, except that 3 may follow 2.
fn evens(seen: &[TokenId]) -> Vec<TokenId> {
    let mut a = vec![0, 2, 4, 6];
    if seen.last() == Some(&2) {
        a.push(3);
    }
    a
}

fn rule(vocab: usize, allowed: fn(&[TokenId]) -> Vec<TokenId>) -> Rule {
    Rule {
        vocab,
        seen: Vec::new(),
        allowed,
    }
}

#[test]
fn masks_keep_exactly_their_tokens() {
    let m = TokenMask::only(70, &[0, 33, 69, 70, 500]);
    assert!(m.allows(0) && m.allows(33) && m.allows(69));
    assert!(!m.allows(1) && !m.allows(70) && !m.allows(500));
    assert_eq!(m.count(), 3);
    let mut row = vec![1.0f32; 72]; // wider than the mask: the padding ids are forbidden
    m.apply(&mut row);
    let kept: Vec<usize> = (0..72).filter(|&i| row[i].is_finite()).collect();
    assert_eq!(kept, vec![0, 33, 69]);
    let w = TokenMask::from_words(vec![u32::MAX, u32::MAX, u32::MAX], 40);
    assert_eq!(w.count(), 40, "bits past the vocabulary are dropped");
    assert_eq!(
        TokenMask::from_words(vec![1], 64).count(),
        1,
        "missing words forbid"
    );
}

#[test]
fn a_chain_stops_at_its_first_forbidden_token_which_keeps_its_q() {
    let mut c = rule(8, evens);
    let q: Vec<Vec<f32>> = (0..4).map(|i| vec![i as f32; 8]).collect();
    let mut draft = Draft {
        tokens: vec![2, 3, 5, 4],
        q: Some(q),
        parents: None,
    };
    let round = constrain_draft(&mut c, &mut draft).unwrap();
    assert_eq!(draft.tokens, vec![2, 3], "3 may follow 2; 5 never");
    assert_eq!(draft.q.as_ref().map(Vec::len), Some(2));
    assert_eq!(round.forbidden, Some((5, Some(vec![2.0; 8]))));
    assert_eq!(
        round.masks.len(),
        3,
        "the pending row and one per kept draft"
    );
    assert!(round.masks[1].allows(3) && !round.masks[0].allows(3));
    assert_eq!(round.consumed, 2);
    assert_eq!(c.seen, vec![2, 3], "the kept drafts are consumed");
    let mut all_ok = Draft::deterministic(vec![0, 6]);
    let round = constrain_draft(&mut rule(8, evens), &mut all_ok).unwrap();
    assert_eq!((all_ok.tokens.len(), round.forbidden), (2, None));
}

#[test]
fn a_tree_loses_forbidden_nodes_with_their_subtrees() {
    // pending → 2(0) → 3(1) → 4(2); pending → 5(3) → 6(4); 2 → 1(5); pending → 0(6)
    let tree = DraftTree {
        tokens: vec![2, 3, 4, 5, 6, 1, 0],
        parents: vec![None, Some(0), Some(1), None, Some(3), Some(0), None],
    };
    let mut c = rule(8, evens);
    let mut draft = Draft::tree(tree);
    let round = constrain_draft(&mut c, &mut draft).unwrap();
    let kept = draft.as_tree().unwrap();
    assert_eq!(kept.tokens, vec![2, 3, 4, 0]);
    assert_eq!(kept.parents, vec![None, Some(0), Some(1), None]);
    assert!(kept.is_well_formed());
    assert_eq!(round.masks.len(), 5);
    assert!(c.seen.is_empty(), "a tree's branches walk forks");
    // The target wants 2, 3, then 5 (forbidden), then anything: the masked rows follow
    // the allowed path and recover with the likeliest allowed token.
    let vocab = 8;
    let mut rows = vec![0.0f32; 5 * vocab];
    for (row, want) in [(0, 2), (1, 3), (2, 5), (3, 1), (4, 0)] {
        rows[row * vocab + want] = 3.0;
    }
    rows[2 * vocab + 6] = 1.0; // the best allowed after 2, 3
    let masked = mask_rows(&rows, &round.masks, vocab);
    let v = verify_tree_greedy(&kept, &masked, vocab);
    assert_eq!((v.path, v.next), (vec![0, 1], 6));
}

/// The target's p, the drafter's q (which puts mass on a forbidden token), and the
/// constraint allowing {0, 1, 2} of 4 tokens.
fn setup() -> (Vec<f32>, Vec<f32>, TokenMask) {
    let p_logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let q = vec![0.1, 0.2, 0.1, 0.6];
    (p_logits, q, TokenMask::only(4, &[0, 1, 2]))
}

/// The constrained target distribution: p masked and renormalised.
fn masked_p() -> Vec<f64> {
    vec![0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]
}

fn draw_q(q: &[f32], rng: &mut ChaCha8Rng) -> TokenId {
    crate::sampling::sample_from(q, rng)
}

fn chi2(counts: &[u64], expected: &[f64], n: u64) -> f64 {
    counts
        .iter()
        .zip(expected)
        .filter(|(_, &e)| e > 0.0)
        .map(|(&c, &e)| {
            let want = e * n as f64;
            (c as f64 - want).powi(2) / want
        })
        .sum()
}

/// One sampled round with a one-token draft from q, under the constraint, as the sequence
/// runs it (`keep_forbidden`) or as a biased variant would (cut it and sample from p).
fn constrained_round(keep_forbidden: bool, rng: &mut ChaCha8Rng) -> TokenId {
    let (p_logits, q, mask) = setup();
    let params = SamplingParams {
        temperature: 1.0,
        ..SamplingParams::greedy()
    };
    let x = draw_q(&q, rng);
    let mut draft = Draft {
        tokens: vec![x],
        q: Some(vec![q.clone()]),
        parents: None,
    };
    let mut c = Rule {
        vocab: 4,
        seen: Vec::new(),
        allowed: |_| vec![0, 1, 2],
    };
    let round = constrain_draft(&mut c, &mut draft).unwrap();
    assert_eq!(round.masks[0], mask);
    // The target pass: rows for [pending] + kept drafts; the same row twice here (p does
    // not depend on the position in this toy).
    let rows: Vec<f32> = p_logits.iter().chain(&p_logits).copied().collect();
    let masked = mask_rows(&rows, &round.masks, 4);
    if let (Some((t, q)), true) = (round.forbidden, keep_forbidden) {
        draft.tokens.push(t);
        draft.q.get_or_insert_with(Vec::new).extend(q);
    }
    let v = verify(&draft, &masked, 4, &params, rng);
    if v.accepted > 0 {
        draft.tokens[0]
    } else {
        v.next
    }
}

#[test]
fn sampling_under_a_constraint_follows_the_masked_target() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let n = 40_000u64;
    let mut counts = [0u64; 4];
    for _ in 0..n {
        counts[constrained_round(true, &mut rng) as usize] += 1;
    }
    assert_eq!(counts[3], 0, "the forbidden token never comes out");
    // 2 degrees of freedom: χ² > 13.8 has probability 0.001.
    let x2 = chi2(&counts, &masked_p(), n);
    assert!(x2 < 13.8, "χ² = {x2:.1}, counts {counts:?}");
}

#[test]
fn cutting_a_forbidden_sampled_draft_before_verification_would_be_biased() {
    // The control: drop the forbidden token and sample that position from p. The test
    // above would fail for this variant; this one proves the statistic can see it.
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let n = 40_000u64;
    let mut counts = [0u64; 4];
    for _ in 0..n {
        counts[constrained_round(false, &mut rng) as usize] += 1;
    }
    let x2 = chi2(&counts, &masked_p(), n);
    assert!(x2 > 100.0, "χ² = {x2:.1}, counts {counts:?}");
}
