//! The few likeliest tokens of a row of logits with their softmax probabilities: what a
//! candidate tree is built from, once per head and tree level. A tree level runs it on several
//! rows of 8192 logits, so it is one pass for the selection and a vectorised exp for the
//! softmax's denominator (libm's `expf` took 47 µs a row, a tenth of a decode step per level).

use crate::TokenId;

/// The `n` likeliest tokens of `row` with their softmax probabilities, likeliest first (ties:
/// the lower id first).
pub fn top_n(row: &[f32], n: usize) -> Vec<(TokenId, f32)> {
    top_n_at(row, n, 1.0)
}

/// `top_n` of the softmax at `temperature` (> 0): the same tokens in the same order, their
/// probabilities sharper below 1 and flatter above.
pub fn top_n_at(row: &[f32], n: usize, temperature: f32) -> Vec<(TokenId, f32)> {
    let best = top_logits(row, n);
    let Some(&(_, max)) = best.first() else {
        return Vec::new();
    };
    let inv_t = 1.0 / temperature;
    let sum = exp_sum(row, max, inv_t);
    best.into_iter()
        .map(|(i, x)| (i, fast_exp((x - max) * inv_t) / sum))
        .collect()
}

/// The `n` largest logits of `row` with their ids, largest first (ties: the lower id first).
pub fn top_logits(row: &[f32], n: usize) -> Vec<(TokenId, f32)> {
    let mut best: Vec<(usize, f32)> = Vec::with_capacity(n + 1);
    // Below `floor` a logit cannot enter a full list; whole chunks under it are skipped on
    // their maximum, which vectorises.
    let mut floor = f32::NEG_INFINITY;
    for (c, chunk) in row.chunks(16).enumerate() {
        if n == 0 || chunk.iter().copied().fold(f32::NEG_INFINITY, f32::max) <= floor {
            continue;
        }
        for (j, &x) in chunk.iter().enumerate() {
            if best.len() == n && x <= floor {
                continue;
            }
            let at = best.partition_point(|&(_, w)| w >= x);
            best.insert(at, (c * 16 + j, x));
            best.truncate(n);
            if best.len() == n {
                floor = best[n - 1].1;
            }
        }
    }
    best.into_iter().map(|(i, x)| (i as TokenId, x)).collect()
}

/// Σ exp((x − max)·inv_t) over `row`, in independent lanes so the compiler vectorises it.
fn exp_sum(row: &[f32], max: f32, inv_t: f32) -> f32 {
    const L: usize = 16;
    let mut lanes = [0.0f32; L];
    let chunks = row.chunks_exact(L);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|&x| fast_exp((x - max) * inv_t))
        .sum();
    for c in chunks {
        for i in 0..L {
            lanes[i] += fast_exp((c[i] - max) * inv_t);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// exp(x) for x ≤ 0 (a softmax's shifted logits), relative error below 1e-6: x = n·ln2 + r
/// with n rounded by the 1.5·2^23 trick (plain adds, so it vectorises without SSE4.1's
/// rounding), |r| ≤ ln2/2, and e^r by its Taylor series to degree 7.
#[inline(always)]
fn fast_exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two (Cody and Waite) so n·ln2 stays exact for every n that occurs.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let x = x.max(-87.0);
    let t = x * LOG2E + ROUND; // its low mantissa bits hold n, rounded to nearest
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    // 2^n from t's bits with integer adds and a shift (no float → int conversion to vectorise).
    f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23) * p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_a_millionth_of_exp() {
        for i in 0..=86_900 {
            let x = -(i as f32) * 1e-3;
            let (got, want) = (fast_exp(x), x.exp());
            assert!(
                (got - want).abs() <= 1e-6 * want,
                "exp({x}): {got} vs {want}"
            );
        }
        assert!(fast_exp(-1e4) >= 0.0 && fast_exp(-1e4) < 1e-37);
    }

    #[test]
    fn top_n_gives_the_likeliest_tokens_with_their_softmax_probabilities() {
        let row: Vec<f32> = (0..37)
            .map(|i| ((i * 11) % 37) as f32 * 0.25 - 4.0)
            .collect();
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let got = top_n(&row, 4);
        assert_eq!(got.len(), 4);
        for (&(t, p), &want) in got.iter().zip(&order) {
            assert_eq!(t as usize, want);
            let exact = (row[want] - max).exp() / sum;
            assert!((p - exact).abs() < 1e-6, "{p} vs {exact}");
        }
        // Ties keep the lower id first; n past the row gives the whole row.
        assert_eq!(top_n(&[1.0, 3.0, 3.0, 0.0], 2)[0].0, 1);
        assert_eq!(top_n(&[1.0, 3.0, 3.0, 0.0], 2)[1].0, 2);
        assert_eq!(top_n(&[0.5, 0.5], 9).len(), 2);
        assert!(top_n(&[], 3).is_empty() && top_n(&[1.0], 0).is_empty());
    }

    #[test]
    fn a_temperature_keeps_the_order_and_rescales_the_softmax() {
        let row = [2.0f32, -1.0, 0.5, 3.0, 0.0];
        for t in [0.5f32, 1.0, 2.5] {
            let sum: f32 = row.iter().map(|&x| ((x - 3.0) / t).exp()).sum();
            let got = top_n_at(&row, 3, t);
            let ids: Vec<TokenId> = got.iter().map(|&(i, _)| i).collect();
            assert_eq!(ids, [3, 0, 2], "temperature {t}");
            for (i, p) in got {
                let exact = ((row[i as usize] - 3.0) / t).exp() / sum;
                assert!((p - exact).abs() < 1e-6, "t {t}: {p} vs {exact}");
            }
        }
        // Above 1 the top token loses probability; below 1 it gains.
        let p = |t| top_n_at(&row, 1, t)[0].1;
        assert!(p(2.5) < p(1.0) && p(1.0) < p(0.5));
    }
}
