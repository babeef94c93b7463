use super::*;
use crate::sampling::argmax;
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
    fn token_row(&self, token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        let t = token as usize;
        Ok((t < 4).then(|| (0..4).map(|i| f32::from(u8::from(i == t))).collect()))
    }
}

fn ctx<'a>(h: Option<&'a [f32]>, sp: &'a SamplingParams) -> DraftContext<'a> {
    DraftContext {
        tokens: &[1, 2],
        prompt_len: 1,
        sampling: sp,
        hidden: h,
        fresh_hidden: &[],
        row_cost: None,
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

/// An LM head whose rows cannot be read.
struct BrokenRows;

impl LmHead for BrokenRows {
    fn vocab(&self) -> usize {
        4
    }
    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
        Ok(rows.to_vec())
    }
    fn token_row(&self, token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        Err(DraftError(format!("row {token} is corrupt")))
    }
}

#[test]
fn an_unreadable_embedding_row_is_a_drafter_fault_not_a_zero_embedding() {
    let mut heads = MedusaHeads::zeros(1, 4);
    heads.u = vec![vec![0.0; 16]];
    let (h, sp) = ([0.0, 3.0, 1.0, 0.0], SamplingParams::greedy());
    let mut d = MedusaDrafter::new(Arc::new(heads), Arc::new(BrokenRows), 0);
    let err = d.propose(&ctx(Some(&h), &sp), 1).unwrap_err();
    assert!(err.0.contains("row 2 is corrupt"), "{err:?}");
    // Heads that read no embedding never ask for a row.
    let mut plain = MedusaDrafter::new(Arc::new(MedusaHeads::zeros(1, 4)), Arc::new(BrokenRows), 0);
    assert_eq!(plain.propose(&ctx(Some(&h), &sp), 1).unwrap().tokens, [1]);
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

/// Three columns naming ids 3, 0 and 2 of a 4-token vocabulary (a frequency-ranked draft
/// vocabulary is not the first ids in order); logits are the state's first three values.
/// `broken` names no token for column 1.
struct Ranked {
    broken: bool,
}
impl LmHead for Ranked {
    fn vocab(&self) -> usize {
        3
    }
    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
        Ok(rows.chunks_exact(4).flat_map(|r| r[..3].to_vec()).collect())
    }
    fn target_vocab(&self) -> usize {
        4
    }
    fn token_id(&self, index: usize) -> Option<TokenId> {
        match index {
            1 if self.broken => None,
            _ => [3, 0, 2].get(index).copied(),
        }
    }
}

#[test]
fn drafts_name_the_draft_vocabularys_ids_not_its_columns() {
    let heads = Arc::new(MedusaHeads::zeros(2, 4));
    let h = [1.0, 5.0, 2.0, 9.0]; // column 1 (id 0) wins among the three
    let lm = || Arc::new(Ranked { broken: false });
    let greedy = SamplingParams::greedy();
    let mut d = MedusaDrafter::new(Arc::clone(&heads), lm(), 0);
    assert_eq!(
        d.propose(&ctx(Some(&h), &greedy), 2).unwrap().tokens,
        [0, 0]
    );
    let mut tree = MedusaDrafter::new(Arc::clone(&heads), lm(), 0).with_tree(6);
    let t = tree.propose(&ctx(Some(&h), &greedy), 6).unwrap();
    assert_eq!(t.tokens[0], 0, "the likeliest root is column 1's id");
    assert!(t.tokens.iter().all(|&x| x != 1), "id 1 is not draftable");
    let sampled = SamplingParams {
        temperature: 1.0,
        ..SamplingParams::greedy()
    };
    let mut s = MedusaDrafter::new(Arc::clone(&heads), lm(), 5);
    let draft = s.propose(&ctx(Some(&h), &sampled), 2).unwrap();
    for (q, &tok) in draft.q.expect("q").iter().zip(&draft.tokens) {
        // softmax([1, 5, 2]) scattered to ids 3, 0, 2.
        let z = 1f32.exp() + 5f32.exp() + 2f32.exp();
        let want = [5f32.exp() / z, 0.0, 2f32.exp() / z, 1f32.exp() / z];
        for (got, want) in q.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{q:?}");
        }
        assert!(q[tok as usize] > 0.0, "the sampled id carries its q");
    }
    let mut broken = MedusaDrafter::new(heads, Arc::new(Ranked { broken: true }), 0);
    let err = broken.propose(&ctx(Some(&h), &greedy), 1).unwrap_err();
    assert!(err.0.contains("column 1 names no token"), "{err:?}");
}

#[test]
fn a_chain_stops_where_its_joint_chance_of_acceptance_falls_below_the_floor() {
    let heads = Arc::new(MedusaHeads::zeros(3, 4));
    let greedy = SamplingParams::greedy();
    let propose = |h: &[f32], floor: f32| {
        MedusaDrafter::new(Arc::clone(&heads), Arc::new(Identity), 0)
            .with_min_chance(floor)
            .propose(&ctx(Some(h), &greedy), 3)
            .unwrap()
            .tokens
            .len()
    };
    let unsure = [0.0, 0.5, 0.0, 0.0]; // each head: p(top) = 0.35
    let sure = [0.0, 9.0, 0.0, 0.0]; // p(top) ≈ 1
    assert_eq!(propose(&unsure, 0.0), 3, "no floor: k guesses");
    assert_eq!(propose(&unsure, 0.3), 1, "0.35, then 0.35² = 0.12 < 0.3");
    assert_eq!(propose(&unsure, 0.4), 0, "not even the first");
    assert_eq!(propose(&sure, 0.3), 3);
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

/// Two chained heads over `Identity`: head 1's V moves the previous token t's one-hot to
/// feature t + 1 (mod 4) with weight 8, so head 1 guesses the successor of its input.
fn successor_heads() -> MedusaHeads {
    let mut heads = MedusaHeads::zeros(2, 4);
    let mut v = vec![0.0; 16];
    for t in 0..4 {
        v[((t + 1) % 4) * 4 + t] = 8.0;
    }
    heads.v = vec![vec![0.0; 16], v];
    heads
}

#[test]
fn chained_heads_draft_each_place_from_the_token_before_it() {
    let h = [0.0, 3.0, 1.0, 0.0];
    let greedy = SamplingParams::greedy();
    let mut d = MedusaDrafter::new(Arc::new(successor_heads()), Arc::new(Identity), 0);
    // Head 0 says 1 (from h); head 1 reads that 1 and says 2. Unchained, it would say 1.
    let chain = d.propose(&ctx(Some(&h), &greedy), 2).unwrap();
    assert_eq!(chain.tokens, [1, 2]);
    let mut unchained = successor_heads();
    unchained.v.clear();
    let mut u = MedusaDrafter::new(Arc::new(unchained), Arc::new(Identity), 0);
    assert_eq!(
        u.propose(&ctx(Some(&h), &greedy), 2).unwrap().tokens,
        [1, 1]
    );
    // Sampled: q of place 2 is head 1's distribution given the token sampled at place 1.
    let sampled = SamplingParams {
        temperature: 1.0,
        ..SamplingParams::greedy()
    };
    for seed in 0..8 {
        let mut d = MedusaDrafter::new(Arc::new(successor_heads()), Arc::new(Identity), seed);
        let draft = d.propose(&ctx(Some(&h), &sampled), 2).unwrap();
        let q = draft.q.expect("q");
        assert_eq!(q.len(), 2);
        assert!((q[1].iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(argmax(&q[1]), (draft.tokens[0] + 1) % 4, "seed {seed}");
    }
}

#[test]
fn a_chained_tree_gives_each_node_children_conditioned_on_its_token() {
    let h = [0.0, 3.0, 1.0, 0.0];
    let greedy = SamplingParams::greedy();
    let heads = Arc::new(successor_heads());
    let chain = MedusaDrafter::new(Arc::clone(&heads), Arc::new(Identity), 0)
        .propose(&ctx(Some(&h), &greedy), 2)
        .unwrap();
    let mut d = MedusaDrafter::new(heads, Arc::new(Identity), 0).with_tree(8);
    let draft = d.propose(&ctx(Some(&h), &greedy), 8).unwrap();
    let tree = draft.as_tree().expect("a tree");
    assert!(tree.is_well_formed() && tree.len() == 8 && tree.max_depth() == 2);
    assert_eq!(tree.tokens[0], chain.tokens[0]);
    // Each expanded node's likeliest child (listed first) is its token's successor.
    for parent in 0..tree.len() {
        if let Some(c) = (0..tree.len()).find(|&c| tree.parents[c] == Some(parent)) {
            assert_eq!(tree.tokens[c], (tree.tokens[parent] + 1) % 4, "{tree:?}");
        }
    }
    let first_child = (0..tree.len()).find(|&c| tree.parents[c] == Some(0));
    assert_eq!(first_child.map(|c| tree.tokens[c]), Some(chain.tokens[1]));
    // k bounds the nodes as for unchained heads.
    assert_eq!(
        d.propose(&ctx(Some(&h), &greedy), 3).unwrap().tokens.len(),
        3
    );
}

#[test]
fn the_rounds_row_cost_decides_what_a_chain_and_a_tree_keep() {
    let greedy = SamplingParams::greedy();
    let costing = |h: &'static [f32], cost: f32| DraftContext {
        row_cost: Some(cost),
        ..ctx(Some(h), &greedy)
    };
    // A chain: the row cost replaces the drafter's own floor (0.3 here) when given.
    let unsure: &[f32] = &[0.0, 0.5, 0.0, 0.0]; // each head: p(top) = 0.35
    let mut chain = MedusaDrafter::new(Arc::new(MedusaHeads::zeros(3, 4)), Arc::new(Identity), 0)
        .with_min_chance(0.3);
    assert_eq!(
        chain.propose(&ctx(Some(unsure), &greedy), 3).unwrap().len(),
        1
    );
    assert_eq!(chain.propose(&costing(unsure, 0.0), 3).unwrap().len(), 3);
    assert_eq!(chain.propose(&costing(unsure, 0.1), 3).unwrap().len(), 2);
    assert!(chain.propose(&costing(unsure, 0.4), 3).unwrap().is_empty());
    // A tree: head 0 gives 1 (p 0.81), 2 (0.11), 0 and 3 (0.04 each); head 1 is sure of the
    // successor. A free row takes the whole budget; dearer rows keep only the likelier nodes.
    let h: &[f32] = &[0.0, 3.0, 1.0, 0.0];
    let mut d =
        MedusaDrafter::new(Arc::new(successor_heads()), Arc::new(Identity), 0).with_tree(16);
    let nodes = |d: &mut MedusaDrafter, cost| d.propose(&costing(h, cost), 16).unwrap();
    assert_eq!(nodes(&mut d, 0.0).len(), 16);
    let cheap = nodes(&mut d, 0.05).as_tree().expect("a tree");
    assert_eq!(
        (cheap.tokens, cheap.parents),
        (vec![1, 2, 2, 3], vec![None, Some(0), None, Some(2)])
    );
    let dear = nodes(&mut d, 0.5).as_tree().expect("a tree");
    assert_eq!(
        (dear.tokens, dear.parents),
        (vec![1, 2], vec![None, Some(0)])
    );
    let too_dear = nodes(&mut d, 0.9);
    assert!(
        too_dear.is_empty() && too_dear.parents.is_none(),
        "a plain round, not an empty tree"
    );
}

#[test]
fn head_calibration_decides_between_a_deeper_and_a_wider_tree() {
    let h = [0.0, 3.0, 1.0, 0.0];
    let greedy = SamplingParams::greedy();
    let tree_with = |temperatures: Vec<f32>, coverage: Vec<f32>| {
        let heads = MedusaHeads {
            temperatures,
            coverage,
            ..successor_heads()
        };
        let mut d = MedusaDrafter::new(Arc::new(heads), Arc::new(Identity), 0).with_tree(2);
        let draft = d.propose(&ctx(Some(&h), &greedy), 2).unwrap();
        let tree = draft.as_tree().expect("a tree");
        (tree.tokens.clone(), tree.parents.clone())
    };
    // As trained: head 0 gives 1 (p 0.81) then 2 (p 0.11); head 1 is sure 2 follows 1
    // (p ≈ 1), so the second node goes under the first.
    let (deep, wide) = (
        (vec![1, 2], vec![None, Some(0)]),
        (vec![1, 2], vec![None, None]),
    );
    assert_eq!(tree_with(Vec::new(), Vec::new()), deep);
    assert_eq!(tree_with(vec![1.0, 1.0], vec![1.0, 1.0]), deep);
    // Calibrated flatter (head 0 at T 3: 0.45 and 0.23; head 1 at T 1000: 0.25 each), the
    // child's joint 0.11 loses to head 0's second guess: one level, two candidates.
    assert_eq!(tree_with(vec![3.0, 1000.0], Vec::new()), wide);
    // So it does when head 1's labels are rarely draftable: 0.81 · 0.997 · 0.1 < 0.11.
    assert_eq!(tree_with(Vec::new(), vec![1.0, 0.1]), wide);
    assert_eq!(
        tree_with(Vec::new(), vec![0.5, 0.5]),
        deep,
        "the same for every head"
    );
}
