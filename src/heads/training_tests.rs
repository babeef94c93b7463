use super::*;
use crate::heads::draft_vocab::DraftVocab;
use rand::Rng;

/// Mean loss over heads on the first 256 pairs.
fn mean_loss(trainer: &Trainer, data: &HeadsData, frozen: &FrozenHead) -> f32 {
    let idx: Vec<usize> = (0..data.len().min(256)).collect();
    let batch = data.rows(&idx, frozen).unwrap();
    let logits = trainer.logits(&batch, &frozen.lm).unwrap();
    let mut total = 0.0;
    for (i, l) in logits.iter().enumerate() {
        let target = batch.y.narrow(1, i, 1).unwrap().squeeze(1).unwrap();
        let loss = candle_nn::loss::cross_entropy(l, &target.contiguous().unwrap());
        total += loss.unwrap().to_scalar::<f32>().unwrap();
    }
    total / logits.len() as f32
}

/// What the synthetic labels are.
#[derive(Clone, Copy, PartialEq)]
enum Labels {
    /// Head i's label is the argmax of a fixed projection of h.
    Projection,
    /// Head 0's label is the pending token (learnable from its embedding only).
    CopyPending,
    /// Head 0's label is random (unlearnable); head i's is the successor (mod 12) of head
    /// i − 1's (learnable from the previous token's embedding only).
    Successor,
}

/// Hidden states in 8 dimensions, a vocabulary of 16 of which the first 12 have an
/// embedding, random pending tokens, and labels as `labels` says.
fn synthetic(n: usize, heads: usize, labels: Labels) -> (HeadsData, FrozenHead) {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (d, v) = (8, 16);
    let lm: Vec<f32> = (0..v * d).map(|_| rng.random_range(-1.0..1.0)).collect();
    let proj: Vec<Vec<f32>> = (0..heads)
        .map(|_| (0..v * d).map(|_| rng.random_range(-1.0..1.0)).collect())
        .collect();
    let mut data = HeadsData {
        hidden: Vec::new(),
        pending: Vec::new(),
        labels: Vec::new(),
        dim: d,
        heads,
    };
    for _ in 0..n {
        let h: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let pending = rng.random_range(0..v as u32);
        for (i, p) in proj.iter().enumerate() {
            let scores: Vec<f32> = p
                .chunks(d)
                .map(|row| row.iter().zip(&h).map(|(a, b)| a * b).sum())
                .collect();
            let label = match labels {
                Labels::CopyPending if i == 0 => pending,
                Labels::Successor if i == 0 => rng.random_range(0..12),
                Labels::Successor => (data.labels[data.labels.len() - 1] + 1) % 12,
                _ => argmax(&scores),
            };
            data.labels.push(label);
        }
        data.hidden.extend(h);
        data.pending.push(pending);
    }
    let lm = Tensor::from_vec(lm, (v, d), &Device::Cpu).unwrap();
    (
        data,
        FrozenHead::new(lm, 12, &DraftVocab::first(v)).unwrap(),
    )
}

#[test]
fn training_lowers_the_loss_and_raises_accuracy() {
    let (data, frozen) = synthetic(512, 2, Labels::Projection);
    let mut t = Trainer::new(2, 8).unwrap();
    let before = mean_loss(&t, &data, &frozen);
    let acc_before = t.accuracy(&data, &frozen).unwrap();
    let s = Schedule {
        steps: 300,
        batch: 32,
        lr: 3e-2,
        seed: 0,
    };
    train(&mut t, &data, &frozen, s, 300, None, &mut std::io::sink()).unwrap();
    let after = mean_loss(&t, &data, &frozen);
    let acc_after = t.accuracy(&data, &frozen).unwrap();
    assert!(after < before * 0.7, "loss {before} → {after}");
    for (b, a) in acc_before.per_head.iter().zip(&acc_after.per_head) {
        assert!(a.0 > b.0 + 0.15, "top-1 {:?} → {:?}", acc_before, acc_after);
        assert!(a.1 >= a.0);
    }
}

/// Two heads of width 8 after 400 steps of 32 pairs (seed 0).
fn trained_two_heads(data: &HeadsData, frozen: &FrozenHead) -> Trainer {
    let mut t = Trainer::new(2, 8).unwrap();
    let s = Schedule {
        steps: 400,
        batch: 32,
        lr: 3e-2,
        seed: 0,
    };
    train(&mut t, data, frozen, s, 400, None, &mut std::io::sink()).unwrap();
    t
}

#[test]
fn heads_learn_from_the_pending_token_and_draft_as_they_trained() {
    let (data, frozen) = synthetic(512, 2, Labels::CopyPending);
    let t = trained_two_heads(&data, &frozen);
    // Head 0 copies the pending token: h says nothing of it, so only U can carry it; 12
    // of the 16 tokens have an embedding.
    let acc = t.accuracy(&data, &frozen).unwrap();
    assert!(
        acc.per_head[0].0 > 0.6,
        "copy head top-1 {:?}",
        acc.per_head[0]
    );
    assert_drafting_matches_training(&t, &data, &frozen);
}

/// What the drafter runs computes what training computed, embeddings included: head 0 reads
/// the pending token's row twice (U and V), head i the row of the label before its own.
fn assert_drafting_matches_training(t: &Trainer, data: &HeadsData, frozen: &FrozenHead) {
    let heads = t.heads().unwrap();
    let lm_rows = frozen.lm.to_vec2::<f32>().unwrap();
    let row = |token: u32| ((token as usize) < 12).then(|| lm_rows[token as usize].clone());
    let n = data.heads;
    for j in [0, 1, 2, 3] {
        let logits = t
            .logits(&data.rows(&[j], frozen).unwrap(), &frozen.lm)
            .unwrap();
        let e = row(data.pending[j]);
        assert_eq!(logits.len(), n);
        for (i, head_logits) in logits.iter().enumerate() {
            let before = if i == 0 {
                data.pending[j]
            } else {
                data.labels[j * n + i - 1]
            };
            let h = &data.hidden[j * 8..(j + 1) * 8];
            let s = heads.state(i, h, e.as_deref(), row(before).as_deref());
            let want = head_logits.to_vec2::<f32>().unwrap()[0].clone();
            for (v, lm_row) in lm_rows.iter().enumerate() {
                let got: f32 = lm_row.iter().zip(&s).map(|(a, b)| a * b).sum();
                assert!((got - want[v]).abs() < 1e-4, "pair {j} head {i} token {v}");
            }
        }
    }
}

#[test]
fn chained_heads_learn_from_the_token_before_their_target() {
    let (data, frozen) = synthetic(512, 2, Labels::Successor);
    let t = trained_two_heads(&data, &frozen);
    let acc = t.accuracy(&data, &frozen).unwrap();
    // Head 1's label follows from head 0's, which only V reads; head 0's is noise.
    assert!(acc.per_head[1].0 > 0.6, "successor head {:?}", acc.per_head);
    assert!(acc.per_head[0].0 < 0.3, "noise head {:?}", acc.per_head);
    // A chain counts head 1 only behind a right head 0.
    assert!(
        acc.chain_length <= 2.0 * acc.per_head[0].0 + 1e-9,
        "chain {} with head 0 at {}",
        acc.chain_length,
        acc.per_head[0].0
    );
    assert_drafting_matches_training(&t, &data, &frozen);
}

#[test]
fn labels_the_drafter_cannot_propose_teach_nothing_and_count_as_misses() {
    let logits = Tensor::new(
        &[[0.5f32, 2.0, -1.0, 0.0], [3.0, 0.0, 0.0, 1.0]],
        &Device::Cpu,
    )
    .unwrap();
    let masked = masked_cross_entropy(&logits, &[1, 7]).unwrap();
    let first = logits.narrow(0, 0, 1).unwrap();
    let want = candle_nn::loss::cross_entropy(&first, &Tensor::new(&[1u32], &Device::Cpu).unwrap())
        .unwrap();
    let (m, w) = (
        masked.to_scalar::<f32>().unwrap(),
        want.to_scalar::<f32>().unwrap(),
    );
    assert!((m - w).abs() < 1e-6, "masked {m} vs first row alone {w}");
    let none = masked_cross_entropy(&logits, &[4, 9]).unwrap();
    assert_eq!(none.to_scalar::<f32>().unwrap(), 0.0);
    // Draft vocabulary 8 of 16: every label from 8 on is a miss, whatever the logits.
    let (mut data, full) = synthetic(64, 1, Labels::Projection);
    data.labels.iter_mut().for_each(|y| *y = 8 + *y % 8);
    let cut = FrozenHead::new(full.lm.clone(), 12, &DraftVocab::first(8)).unwrap();
    let t = Trainer::new(1, 8).unwrap();
    assert_eq!(cut.draft_vocab(), 8);
    assert_eq!(t.accuracy(&data, &cut).unwrap().per_head, vec![(0.0, 0.0)]);
    assert!(t.accuracy(&data, &full).unwrap().per_head[0].1 > 0.0);
}

#[test]
fn a_resumed_run_matches_an_uninterrupted_one() {
    let (data, frozen) = synthetic(200, 2, Labels::CopyPending);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("c.safetensors");
    let s = Schedule {
        steps: 30,
        batch: 16,
        lr: 1e-2,
        seed: 5,
    };
    let sink = &mut std::io::sink();
    let mut whole = Trainer::new(2, 8).unwrap();
    train(&mut whole, &data, &frozen, s, 30, None, sink).unwrap();
    let mut first = Trainer::new(2, 8).unwrap();
    train(&mut first, &data, &frozen, s, 20, Some((&ckpt, 10)), sink).unwrap();
    let mut restarted = Trainer::load_checkpoint(&ckpt).unwrap();
    assert_eq!(restarted.step, 20);
    train(&mut restarted, &data, &frozen, s, 30, None, sink).unwrap();
    let (a, b) = (whole.heads().unwrap(), restarted.heads().unwrap());
    for (x, y) in [(&a.w[0], &b.w[0]), (&a.u[0], &b.u[0]), (&a.v[1], &b.v[1])] {
        let diff = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-6, "resumed weights differ by {diff}");
    }
}

#[test]
fn labels_are_scored_at_their_columns_in_a_ranked_draft_vocabulary() {
    let (data, first) = synthetic(256, 2, Labels::Projection);
    let t = trained_two_heads(&data, &first);
    // The same 16 ids in another order: the same heads score the same.
    let shuffled: Vec<u32> = (0..16).map(|i| (i * 5 + 3) % 16).collect();
    let ranked = FrozenHead::new(
        first.lm.clone(),
        12,
        &DraftVocab::from_ids(shuffled, 16).unwrap(),
    )
    .unwrap();
    let (a, b) = (
        t.accuracy(&data, &first).unwrap(),
        t.accuracy(&data, &ranked).unwrap(),
    );
    assert!(a.per_head[0].0 > 0.0);
    assert_eq!(a.per_head, b.per_head);
    assert!((mean_loss(&t, &data, &first) - mean_loss(&t, &data, &ranked)).abs() < 1e-5);
    // Ids 8..16 only: labels 8.. count, labels below 8 are misses.
    let upper = DraftVocab::from_ids((8..16).collect(), 16).unwrap();
    let upper = FrozenHead::new(first.lm.clone(), 12, &upper).unwrap();
    assert_eq!(upper.column(9), 1);
    assert_eq!(upper.column(3), u32::MAX);
    let head0 = data.labels.iter().step_by(2);
    let inside = head0.filter(|&&y| y >= 8).count() as f64 / data.len() as f64;
    assert!(t.accuracy(&data, &upper).unwrap().per_head[0].0 <= inside + 1e-12);
}
