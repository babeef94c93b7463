//! Speculative sampling reproduces the target's distribution exactly. On toy models with a
//! tiny vocabulary the exact joint distribution of a short sequence is computable, so the
//! empirical distribution of speculative sampling can be tested against it, with a draft that
//! disagrees with the target. The same test must catch the classic bug: resampling from p
//! (instead of the residual max(0, p − q)) after a rejection.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use specgate_strategies::{sample_from, verify, Draft, SamplingParams, TokenId};

const VOCAB: usize = 3;
const LEN: usize = 3;

/// Logits of a toy model: a fixed pseudo-random function of the context.
fn toy_logits(ctx: &[TokenId], salt: u64) -> Vec<f32> {
    let mut h = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for &t in ctx {
        h = (h ^ t as u64)
            .wrapping_mul(0x1000_0000_01B3)
            .rotate_left(17);
    }
    (0..VOCAB)
        .map(|v| {
            let x = (h.wrapping_add(v as u64 * 0x2545_F491_4F6C_DD1D) >> 40) as f32;
            (x / (1u64 << 24) as f32) * 3.0 - 1.5
        })
        .collect()
}

fn target(ctx: &[TokenId]) -> Vec<f32> {
    toy_logits(ctx, 1)
}

/// A draft that disagrees with the target: another function altogether.
fn drafter(ctx: &[TokenId]) -> Vec<f32> {
    toy_logits(ctx, 2)
}

fn params() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
    }
}

/// Index of a full sequence among VOCAB^LEN outcomes.
fn index(seq: &[TokenId]) -> usize {
    seq.iter().fold(0, |acc, &t| acc * VOCAB + t as usize)
}

fn exact_distribution() -> Vec<f64> {
    let n = VOCAB.pow(LEN as u32);
    let mut dist = vec![0.0f64; n];
    for (i, d) in dist.iter_mut().enumerate() {
        let mut seq = Vec::new();
        let mut rest = i;
        let mut digits = vec![0; LEN];
        for slot in digits.iter_mut().rev() {
            *slot = (rest % VOCAB) as TokenId;
            rest /= VOCAB;
        }
        let mut p = 1.0f64;
        for &t in &digits {
            p *= params().probs(&target(&seq))[t as usize] as f64;
            seq.push(t);
        }
        *d = p;
    }
    dist
}

/// How a rejected draft token is replaced: the correct verifier, or the biased one.
#[derive(Clone, Copy, PartialEq)]
enum Verifier {
    Correct,
    ResampleFromP,
}

/// One sequence of LEN tokens by speculative sampling with k drafts per round.
fn speculative_sequence(k: usize, verifier: Verifier, rng: &mut ChaCha8Rng) -> Vec<TokenId> {
    let sp = params();
    let mut seq: Vec<TokenId> = Vec::new();
    while seq.len() < LEN {
        let mut draft = Draft {
            tokens: vec![],
            q: Some(vec![]),
            parents: None,
        };
        let mut ctx = seq.clone();
        for _ in 0..k {
            let q = sp.probs(&drafter(&ctx));
            let t = sample_from(&q, rng);
            draft.tokens.push(t);
            draft.q.as_mut().unwrap().push(q);
            ctx.push(t);
        }
        // The target scores every prefix of the draft in "one pass": rows [k + 1, vocab].
        let mut rows = Vec::new();
        let mut ctx = seq.clone();
        for i in 0..=k {
            rows.extend(target(&ctx));
            if i < k {
                ctx.push(draft.tokens[i]);
            }
        }
        let verdict = match verifier {
            Verifier::Correct => verify(&draft, &rows, VOCAB, &sp, rng),
            Verifier::ResampleFromP => biased_verify(&draft, &rows, rng),
        };
        seq.extend_from_slice(&draft.tokens[..verdict.accepted]);
        seq.push(verdict.next);
    }
    seq.truncate(LEN);
    seq
}

/// The known bug: on rejection, draw from p instead of the residual.
fn biased_verify(
    draft: &Draft,
    rows: &[f32],
    rng: &mut ChaCha8Rng,
) -> specgate_strategies::Verdict {
    let sp = params();
    for (i, &x) in draft.tokens.iter().enumerate() {
        let p = sp.probs(&rows[i * VOCAB..(i + 1) * VOCAB]);
        let q = &draft.q.as_ref().unwrap()[i];
        if rng.random::<f32>() >= (p[x as usize] / q[x as usize]).min(1.0) {
            return specgate_strategies::Verdict {
                accepted: i,
                next: sample_from(&p, rng),
            };
        }
    }
    let p = sp.probs(&rows[draft.len() * VOCAB..]);
    specgate_strategies::Verdict {
        accepted: draft.len(),
        next: sample_from(&p, rng),
    }
}

/// (total variation distance, chi-square statistic) of `n` samples against `exact`.
fn measure(k: usize, verifier: Verifier, n: usize, seed: u64, exact: &[f64]) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut counts = vec![0usize; exact.len()];
    for _ in 0..n {
        counts[index(&speculative_sequence(k, verifier, &mut rng))] += 1;
    }
    let tv = counts
        .iter()
        .zip(exact)
        .map(|(&c, &p)| (c as f64 / n as f64 - p).abs())
        .sum::<f64>()
        / 2.0;
    let chi2 = counts
        .iter()
        .zip(exact)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum();
    (tv, chi2)
}

/// Chi-square critical value for 26 degrees of freedom at p = 0.001.
const CHI2_26_P001: f64 = 54.05;

#[test]
fn speculative_sampling_follows_the_target_distribution() {
    let exact = exact_distribution();
    assert!((exact.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    assert!(
        exact.iter().all(|&p| p > 1e-3),
        "every outcome is observable: {exact:?}"
    );
    for k in [1, 2, 4] {
        let (tv_small, _) = measure(k, Verifier::Correct, 2_000, 11, &exact);
        let (tv_large, chi2) = measure(k, Verifier::Correct, 200_000, 12, &exact);
        eprintln!("k={k}: TV {tv_small:.4} at N=2e3, {tv_large:.4} at N=2e5, chi2 {chi2:.1}");
        // 100x the samples: TV should shrink about 10x; allow 3x for noise.
        assert!(
            tv_large < tv_small / 3.0,
            "k={k}: TV did not shrink ({tv_small} -> {tv_large})"
        );
        assert!(
            chi2 < CHI2_26_P001,
            "k={k}: chi-square {chi2} rejects the target distribution"
        );
    }
}

#[test]
fn resampling_from_p_after_a_rejection_is_caught() {
    let exact = exact_distribution();
    let (tv, chi2) = measure(2, Verifier::ResampleFromP, 200_000, 12, &exact);
    eprintln!("biased verifier: TV {tv:.4}, chi2 {chi2:.1}");
    assert!(
        chi2 > CHI2_26_P001 * 10.0,
        "the biased verifier went unnoticed (chi2 {chi2})"
    );
}

#[test]
fn tokens_per_pass_follow_the_formula() {
    // Context-free toy models make acceptance i.i.d. with a constant alpha = Σ min(p, q), the
    // assumption behind E[tokens per pass] = (1 − α^(k+1)) / (1 − α). α is measured as
    // accepted / verified positions (a round stops verifying at its first rejection; the
    // drafts after it were never tested).
    let sp = params();
    let p_logits = [0.5f32, 1.0, -0.3];
    let q_logits = [1.0f32, 0.2, 0.0];
    let (p, q) = (sp.probs(&p_logits), sp.probs(&q_logits));
    let alpha: f64 = p.iter().zip(&q).map(|(&a, &b)| a.min(b) as f64).sum();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for k in [1usize, 3, 6] {
        let (mut passes, mut tokens, mut verified, mut accepted) = (0usize, 0usize, 0usize, 0usize);
        for _ in 0..40_000 {
            let tokens_k: Vec<TokenId> = (0..k).map(|_| sample_from(&q, &mut rng)).collect();
            let draft = Draft {
                tokens: tokens_k,
                q: Some(vec![q.clone(); k]),
                parents: None,
            };
            let rows: Vec<f32> = (0..=k).flat_map(|_| p_logits).collect();
            let v = verify(&draft, &rows, 3, &sp, &mut rng);
            passes += 1;
            tokens += v.accepted + 1;
            verified += v.accepted + usize::from(v.accepted < k);
            accepted += v.accepted;
        }
        let measured = accepted as f64 / verified as f64;
        let per_pass = tokens as f64 / passes as f64;
        let predicted = (1.0 - measured.powi(k as i32 + 1)) / (1.0 - measured);
        eprintln!(
            "k={k}: alpha {alpha:.3}, measured {measured:.3}; tokens/pass {per_pass:.3}, formula {predicted:.3}"
        );
        assert!(
            (measured - alpha).abs() < 0.01,
            "k={k}: measured alpha {measured} vs {alpha}"
        );
        assert!(
            (per_pass - predicted).abs() / predicted < 0.03,
            "k={k}: {per_pass} vs {predicted}"
        );
    }
}
