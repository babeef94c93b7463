//! Which rounds get the step's spare rows for drafts. A round's j-th draft (from 1) is
//! accepted only if every draft before it was, so with acceptance α it adds α^j expected
//! tokens; the rows go one by one to the largest α^j among the rounds, instead of to
//! whichever round asked first.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One round's wish: at most `k` drafts at acceptance `alpha` (0–1).
#[derive(Debug, Clone, Copy)]
pub struct DraftWish {
    pub k: usize,
    pub alpha: f64,
}

#[derive(PartialEq)]
struct Next {
    value: f64,
    round: usize,
}

impl Eq for Next {}

impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Next {
    /// Larger value first; for equal values the earlier round (the fairer one).
    fn cmp(&self, other: &Self) -> Ordering {
        self.value
            .total_cmp(&other.value)
            .then(other.round.cmp(&self.round))
    }
}

/// Split `rows` spare rows among `wishes`: how many drafts each round may propose.
pub fn allocate(wishes: &[DraftWish], rows: usize) -> Vec<usize> {
    let mut given = vec![0; wishes.len()];
    let mut heap: BinaryHeap<Next> = wishes
        .iter()
        .enumerate()
        .filter(|(_, w)| w.k > 0)
        .map(|(round, w)| Next {
            value: w.alpha.clamp(0.0, 1.0),
            round,
        })
        .collect();
    let mut left = rows;
    while left > 0 {
        let Some(Next { value, round }) = heap.pop() else {
            break;
        };
        given[round] += 1;
        left -= 1;
        if given[round] < wishes[round].k {
            let alpha = wishes[round].alpha.clamp(0.0, 1.0);
            heap.push(Next {
                value: value * alpha,
                round,
            });
        }
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wish(k: usize, alpha: f64) -> DraftWish {
        DraftWish { k, alpha }
    }

    #[test]
    fn enough_rows_give_every_round_its_k() {
        assert_eq!(allocate(&[wish(4, 0.2), wish(3, 0.9)], 100), vec![4, 3]);
    }

    #[test]
    fn scarce_rows_go_where_drafts_are_accepted_most() {
        // 0.9, 0.81, 0.73 beat 0.5, then 0.66 (0.9^4) before 0.25 (0.5^2).
        assert_eq!(allocate(&[wish(4, 0.5), wish(4, 0.9)], 5), vec![1, 4]);
        assert_eq!(allocate(&[wish(4, 0.5), wish(4, 0.9)], 3), vec![0, 3]);
    }

    #[test]
    fn no_rows_no_drafts_and_ties_go_to_the_earlier_round() {
        assert_eq!(allocate(&[wish(3, 0.7), wish(3, 0.7)], 0), vec![0, 0]);
        assert_eq!(allocate(&[wish(3, 0.7), wish(3, 0.7)], 1), vec![1, 0]);
        assert_eq!(allocate(&[wish(0, 0.9), wish(2, 0.1)], 5), vec![0, 2]);
    }
}
