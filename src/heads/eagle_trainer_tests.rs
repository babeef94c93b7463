//! Training and drafting must compute the same layer: a mismatch (a RoPE pairing, a norm, a
//! mask) would not fail anything else, it would only make every draft worse.

use candle_core::{Device, Tensor};
use specgate_strategies::eagle::{EagleHead, EagleShape, EagleWeights, KvRows, LayerRow};

use super::EagleTrainee;

const D: usize = 64;

fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) as f32 / (1u64 << 31) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn weights() -> EagleWeights {
    let s = EagleShape {
        hidden: D,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        ffn: 96,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
    };
    let mut seed = 0;
    EagleWeights::from_named(s, |name| {
        seed += 1;
        let (_, [r, c]) = s.tensors().into_iter().find(|(n, _)| *n == name)?;
        Some(if c == 1 {
            values(r, seed, 0.5).iter().map(|v| 1.0 + v).collect()
        } else {
            values(r * c, seed, 0.3)
        })
    })
    .expect("a whole shape")
}

fn close(a: &[f32], b: &[f32], what: &str) {
    // Drafting reads Q8_0 weights and activations: a few percent of each value at most.
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    let cos = dot / (na * nb);
    assert!(cos > 0.999, "{what}: cosine {cos}");
}

#[test]
fn every_training_step_computes_what_drafting_computes() {
    let w = weights();
    let trainee = EagleTrainee::from_weights(&w).expect("weights");
    let head = EagleHead::new(w);
    let n = 6;
    let (h, e) = (values(n * D, 7, 1.0), values(n * D, 8, 1.0));
    let steps = trainee
        .features(
            &Tensor::from_slice(&h, (n, D), &Device::Cpu).unwrap(),
            &Tensor::from_slice(&e, (n, D), &Device::Cpu).unwrap(),
            3,
        )
        .expect("features");
    let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let (f1, f2, f3) = (flat(&steps[0]), flat(&steps[1]), flat(&steps[2]));
    // Step 1 is the drafter reading the true rows (causal, all at once).
    let rows: Vec<LayerRow<'_>> = (0..n)
        .map(|p| LayerRow {
            h: &h[p * D..(p + 1) * D],
            e: Some(&e[p * D..(p + 1) * D]),
            pos: p,
            sees: &[],
        })
        .collect();
    let empty = KvRows::default();
    let out = head.forward(&rows, &empty, &empty, true);
    for p in 0..n {
        close(
            &out.f[p * D..(p + 1) * D],
            &f1[p * D..(p + 1) * D],
            &format!("step 1 @{p}"),
        );
    }
    // Step 2 at position j is the drafter's next step after reading rows 0..j: its own
    // output at j − 1 as the feature, over the cache of the true rows before j. Step 3 at j + 1
    // is the step after that: step 2's output as the feature, the same cache and step 2's
    // row (a tree's depth-2 node) as its ancestor.
    for j in 1..n {
        let cache = KvRows {
            k: out.kv.k[..j * head.shape.kv_dim()].to_vec(),
            v: out.kv.v[..j * head.shape.kv_dim()].to_vec(),
        };
        let row = LayerRow {
            h: &out.f[(j - 1) * D..j * D],
            e: Some(&e[j * D..(j + 1) * D]),
            pos: j,
            sees: &[],
        };
        let next = head.forward(&[row], &cache, &empty, false);
        close(&next.f, &f2[(j - 1) * D..j * D], &format!("step 2 @{j}"));
        if j + 1 < n {
            let row = LayerRow {
                h: &next.f,
                e: Some(&e[(j + 1) * D..(j + 2) * D]),
                pos: j + 1,
                sees: &[0],
            };
            let third = head.forward(&[row], &cache, &next.kv, false);
            close(
                &third.f,
                &f3[(j - 1) * D..j * D],
                &format!("step 3 @{}", j + 1),
            );
        }
    }
}

#[test]
fn accuracy_counts_steps_chains_and_positions_against_the_labels() {
    use super::{accuracy, SeqInputs, MEASURED_STEPS};
    use crate::heads::draft_vocab::DraftVocab;
    use crate::heads::trainer::FrozenHead;

    let vocab = 40;
    let lm = Tensor::from_vec(values(vocab * D, 99, 1.0), (vocab, D), &Device::Cpu).unwrap();
    let frozen = FrozenHead::new(lm, vocab, &DraftVocab::first(vocab)).unwrap();
    let trainee = EagleTrainee::from_weights(&weights()).unwrap();
    let n = 44; // positions 0..42 are measured (each needs three labels from it on)
    let seq = crate::heads::eagle_data::EagleSequence {
        prompt: 0,
        tokens: (0..=n as u32).map(|i| i * 7 % vocab as u32).collect(),
        hidden: values((n + 1) * D, 5, 1.0),
        greedy_from: 0,
    };
    let mut x = SeqInputs::of(&seq, &frozen).unwrap().expect("long enough");
    // The labels are the layer's own first guesses at positions 0..8 and 32.., and no token
    // (the masked column) elsewhere.
    let lmt = frozen.lm.t().unwrap();
    let f = trainee.features(&x.h, &x.e, MEASURED_STEPS).unwrap();
    let g: Vec<Vec<u32>> = f
        .iter()
        .map(|f| {
            f.matmul(&lmt)
                .unwrap()
                .argmax(1)
                .unwrap()
                .to_vec1()
                .unwrap()
        })
        .collect();
    let measured = n - MEASURED_STEPS + 1;
    x.labels = vec![u32::MAX; n];
    for j in (0..8).chain(32..measured) {
        x.labels[j] = g[0][j];
    }
    let a = accuracy(&trainee, &[&x], &frozen).unwrap();
    let m = measured as f64;
    assert!(
        (a.top1[0] - (8 + measured - 32) as f64 / m).abs() < 1e-9,
        "{a:?}"
    );
    assert_eq!(a.first_by_position, [1.0, 0.0, 1.0], "{a:?}");
    // Step s at position j guesses label j + s; a chain of two needs both steps right.
    let right = |s: usize, j: usize| g[s][j] == x.labels[j + s];
    let chain2 = (0..measured)
        .filter(|&j| right(0, j) && right(1, j))
        .count();
    let step2 = (0..measured).filter(|&j| right(1, j)).count();
    assert!((a.chain[1] - chain2 as f64 / m).abs() < 1e-9, "{a:?}");
    assert!((a.top1[1] - step2 as f64 / m).abs() < 1e-9, "{a:?}");
}
