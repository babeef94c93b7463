//! Candidate trees: several draft continuations verified in ONE target pass. Node i holds
//! `tokens[i]` under `parents[i]` (None: directly after the pending token); parents come
//! before their children. The verify pass runs `[pending] + tokens` with a tree mask, so row
//! 1 + i sees the cache, the pending token and exactly node i's ancestors; row 0 is the
//! pending token's.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::sampling::argmax;
use crate::TokenId;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DraftTree {
    pub tokens: Vec<TokenId>,
    pub parents: Vec<Option<usize>>,
}

/// The accepted root-to-node path (node indices) and the target's token after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeVerdict {
    pub path: Vec<usize>,
    pub next: TokenId,
}

impl DraftTree {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Parents precede children and the two lists agree in length.
    pub fn is_well_formed(&self) -> bool {
        self.tokens.len() == self.parents.len()
            && self
                .parents
                .iter()
                .enumerate()
                .all(|(i, p)| p.is_none_or(|p| p < i))
    }

    /// Depth of node i: 1 for a child of the pending token.
    pub fn depth(&self, i: usize) -> usize {
        let mut d = 1;
        let mut at = self.parents[i];
        while let Some(p) = at {
            d += 1;
            at = self.parents[p];
        }
        d
    }

    /// The deepest path's length (the chain-equivalent k).
    pub fn max_depth(&self) -> usize {
        (0..self.len()).map(|i| self.depth(i)).max().unwrap_or(0)
    }

    /// Rows of the verify pass row `row` may attend to among the pass's own rows (0 = the
    /// pending token, 1 + i = node i): itself, its ancestors and the pending token.
    pub fn visible_rows(&self, row: usize) -> Vec<usize> {
        let mut rows = vec![0];
        if row > 0 {
            let mut chain = vec![row];
            let mut at = self.parents[row - 1];
            while let Some(p) = at {
                chain.push(p + 1);
                at = self.parents[p];
            }
            rows.extend(chain.into_iter().rev());
        }
        rows
    }

    /// Root-to-leaf paths (node indices), for tests and reports.
    pub fn paths(&self) -> Vec<Vec<usize>> {
        let leaves = (0..self.len()).filter(|&i| !self.parents.contains(&Some(i)));
        leaves
            .map(|leaf| {
                let mut p = self.visible_rows(leaf + 1);
                p.remove(0);
                p.into_iter().map(|r| r - 1).collect()
            })
            .collect()
    }
}

/// Greedy verification of a tree against the pass's rows ([1 + nodes, vocab]): follow the
/// child whose token is the target's argmax while there is one.
pub fn verify_tree_greedy(tree: &DraftTree, rows: &[f32], vocab: usize) -> TreeVerdict {
    let mut path = Vec::new();
    let mut row = 0;
    loop {
        let want = argmax(&rows[row * vocab..(row + 1) * vocab]);
        let parent = path.last().copied();
        let child = (0..tree.len()).find(|&c| tree.parents[c] == parent && tree.tokens[c] == want);
        match child {
            Some(c) => {
                path.push(c);
                row = c + 1;
            }
            None => return TreeVerdict { path, next: want },
        }
    }
}

#[derive(Debug, PartialEq)]
struct Candidate {
    joint: f32,
    depth: usize,
    parent: Option<usize>,
    token: TokenId,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    // Likelier first; at equal likelihood the shallower, so a parent precedes its children.
    fn cmp(&self, o: &Self) -> Ordering {
        self.joint
            .total_cmp(&o.joint)
            .then(o.depth.cmp(&self.depth))
            .then(o.token.cmp(&self.token))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The `budget` likeliest nodes of the tree whose level d offers head d's candidates
/// (`heads[d]`: (token, probability), best first), a node's likelihood being the product
/// along its path, leaving out nodes less likely than `min_joint` (their verify rows cost
/// more than they are expected to commit). Best-first expansion, so every chosen node's
/// parent is chosen first.
pub fn build_tree(heads: &[Vec<(TokenId, f32)>], budget: usize, min_joint: f32) -> DraftTree {
    let mut tree = DraftTree::default();
    let mut heap = BinaryHeap::new();
    let push_children = |heap: &mut BinaryHeap<Candidate>, parent, depth: usize, joint: f32| {
        for &(token, p) in heads.get(depth).into_iter().flatten() {
            heap.push(Candidate {
                joint: joint * p,
                depth: depth + 1,
                parent,
                token,
            });
        }
    };
    push_children(&mut heap, None, 0, 1.0);
    while tree.len() < budget {
        let Some(c) = heap.pop().filter(|c| c.joint >= min_joint) else {
            break;
        };
        let id = tree.len();
        tree.tokens.push(c.token);
        tree.parents.push(c.parent);
        push_children(&mut heap, Some(id), c.depth, c.joint);
    }
    tree
}

/// A candidate node of a tree under construction: `parent` indexes the same pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolNode {
    pub token: TokenId,
    /// The product of the probabilities along the node's path.
    pub joint: f32,
    pub parent: Option<usize>,
    pub depth: usize,
}

/// The `budget` likeliest nodes of a candidate pool as a tree, none less likely than
/// `min_joint`. A child is never likelier than its parent (and at a tie the shallower goes
/// first), so every chosen node's parent is chosen before it; a node whose parent was not
/// chosen anyway is dropped.
pub fn select_tree(pool: &[PoolNode], budget: usize, min_joint: f32) -> DraftTree {
    let mut order: Vec<usize> = (0..pool.len()).collect();
    order.sort_by(|&a, &b| {
        pool[b]
            .joint
            .total_cmp(&pool[a].joint)
            .then(pool[a].depth.cmp(&pool[b].depth))
            .then(a.cmp(&b))
    });
    let mut index = vec![None; pool.len()];
    let mut tree = DraftTree::default();
    for i in order {
        if tree.len() == budget || pool[i].joint < min_joint {
            break;
        }
        let parent = match pool[i].parent {
            None => None,
            Some(p) => match index[p] {
                Some(q) => Some(q),
                None => continue,
            },
        };
        index[i] = Some(tree.len());
        tree.tokens.push(pool[i].token);
        tree.parents.push(parent);
    }
    tree
}

/// The `budget`-th highest likelihood in the pool (0 while it holds fewer): a node below it
/// cannot make the tree, nor can its children, which are never likelier.
pub(crate) fn kth_joint(pool: &[PoolNode], budget: usize) -> f32 {
    if budget == 0 || pool.len() < budget {
        return 0.0;
    }
    let mut joints: Vec<f32> = pool.iter().map(|n| n.joint).collect();
    let (_, kth, _) = joints.select_nth_unstable_by(budget - 1, |a, b| b.total_cmp(a));
    *kth
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::verify_greedy;

    /// pending → a(1) → b(2) → c(3); pending → d(4); a → e(5)
    fn tree() -> DraftTree {
        DraftTree {
            tokens: vec![1, 2, 3, 4, 5],
            parents: vec![None, Some(0), Some(1), None, Some(0)],
        }
    }

    #[test]
    fn each_row_sees_exactly_itself_its_ancestors_and_the_pending_token() {
        let t = tree();
        assert!(t.is_well_formed());
        assert_eq!(t.visible_rows(0), vec![0]);
        assert_eq!(t.visible_rows(1), vec![0, 1]);
        assert_eq!(t.visible_rows(3), vec![0, 1, 2, 3]);
        assert_eq!(t.visible_rows(4), vec![0, 4]);
        assert_eq!(t.visible_rows(5), vec![0, 1, 5]);
        assert_eq!(
            (0..5).map(|i| t.depth(i)).collect::<Vec<_>>(),
            vec![1, 2, 3, 1, 2]
        );
        assert_eq!(t.max_depth(), 3);
        assert_eq!(t.paths(), vec![vec![0, 1, 2], vec![3], vec![0, 4]]);
        let bad = DraftTree {
            tokens: vec![1, 2],
            parents: vec![Some(1), None],
        };
        assert!(!bad.is_well_formed());
    }

    /// Rows where the target "wants" `wanted[row]`.
    fn rows(wanted: &[TokenId], vocab: usize) -> Vec<f32> {
        let mut r = vec![0.0; wanted.len() * vocab];
        for (i, &w) in wanted.iter().enumerate() {
            r[i * vocab + w as usize] = 1.0;
        }
        r
    }

    #[test]
    fn tree_verification_commits_what_verifying_the_best_path_alone_would() {
        let t = tree();
        let vocab = 8;
        // Every assignment of target preferences over the 6 rows (tokens 0..=5).
        for code in 0..6usize.pow(6) {
            let wanted: Vec<TokenId> = (0..6)
                .map(|i| ((code / 6usize.pow(i)) % 6) as TokenId)
                .collect();
            let r = rows(&wanted, vocab);
            let got = verify_tree_greedy(&t, &r, vocab);
            // Each path verified on its own, with its rows (pending, then its nodes).
            let best = t
                .paths()
                .into_iter()
                .map(|p| {
                    let draft: Vec<TokenId> = p.iter().map(|&n| t.tokens[n]).collect();
                    let mut own = wanted[..1].to_vec();
                    own.extend(p.iter().map(|&n| wanted[n + 1]));
                    let v = verify_greedy(&draft, &rows(&own, vocab), vocab);
                    (v.accepted, p[..v.accepted].to_vec(), v.next)
                })
                .max_by_key(|x| x.0)
                .unwrap();
            assert_eq!((got.path.len(), got.next), (best.0, best.2), "{wanted:?}");
            assert_eq!(got.path, best.1, "{wanted:?}");
        }
    }

    #[test]
    fn the_tree_keeps_the_likeliest_paths_within_the_budget() {
        let heads = vec![
            vec![(10, 0.6), (11, 0.3)],
            vec![(20, 0.5), (21, 0.4)],
            vec![(30, 0.9)],
        ];
        let t = build_tree(&heads, 4, 0.0);
        assert!(t.is_well_formed());
        // 10 (0.6), 11 (0.3), 10→20 (0.3), 10→20→30 (0.27) beat 10→21 (0.24).
        assert_eq!(t.tokens, vec![10, 11, 20, 30]);
        assert_eq!(t.parents, vec![None, None, Some(0), Some(2)]);
        assert_eq!(build_tree(&heads, 100, 0.0).len(), 2 + 4 + 4);
        assert!(build_tree(&[], 5, 0.0).is_empty());
        // A floor leaves out nodes whose verify rows cost more than they are expected to
        // commit, whatever the budget: 10 (0.6), 11 (0.3), 10→20 (0.3) clear 0.3.
        let floored = build_tree(&heads, 100, 0.3);
        assert_eq!(floored.tokens, vec![10, 11, 20]);
        assert!(floored.is_well_formed());
        assert!(build_tree(&heads, 100, 0.7).is_empty());
    }

    #[test]
    fn a_pool_gives_its_likeliest_nodes_with_parents_first() {
        let node = |token, joint, parent, depth| PoolNode {
            token,
            joint,
            parent,
            depth,
        };
        // 10 (0.6) → 20 (0.3) → 30 (0.27); 10 → 21 (0.24); 11 (0.3); 11 → 22 (0.3, a tie
        // with its parent); 12 (0.05).
        let pool = vec![
            node(10, 0.6, None, 1),
            node(11, 0.3, None, 1),
            node(12, 0.05, None, 1),
            node(20, 0.3, Some(0), 2),
            node(21, 0.24, Some(0), 2),
            node(22, 0.3, Some(1), 2),
            node(30, 0.27, Some(3), 3),
        ];
        let t = select_tree(&pool, 5, 0.0);
        assert!(t.is_well_formed());
        assert_eq!(t.tokens, vec![10, 11, 20, 22, 30]);
        assert_eq!(t.parents, vec![None, None, Some(0), Some(1), Some(2)]);
        assert_eq!(select_tree(&pool, 100, 0.0).len(), 7);
        assert!(select_tree(&pool, 0, 0.0).is_empty());
        // The floor: only nodes at least this likely, still parents first.
        let floored = select_tree(&pool, 100, 0.3);
        assert_eq!(floored.tokens, vec![10, 11, 20, 22]);
        assert!(floored.is_well_formed());
        assert_eq!(
            select_tree(&pool, 2, 0.3).len(),
            2,
            "the budget still bounds it"
        );
        // A child likelier than its parent (not a real pool) never lands without it.
        let odd = vec![node(1, 0.1, None, 1), node(2, 0.2, Some(0), 2)];
        assert_eq!(select_tree(&odd, 1, 0.0).tokens, vec![1]);
        // The bar a node must clear to make a tree of 5: the 5th likeliest joint (ties count).
        assert_eq!(kth_joint(&pool, 5), 0.27);
        assert_eq!(kth_joint(&pool, 2), 0.3);
        assert_eq!(kth_joint(&pool, 8), 0.0, "fewer nodes than the budget");
        assert_eq!(kth_joint(&pool, 0), 0.0);
    }
}
