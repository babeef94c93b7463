//! The CUDA backend against the CPU backend on small models the test writes itself — every
//! architecture (llama, qwen2's biases, qwen3's Q/K norms, gemma3's post-norms and GELU) and
//! weight type (Q4_0, Q4_1, Q8_0 on the quantized kernels; Q4_K and F32 dequantized to the
//! f32 kernel) — so every kernel variant runs the first time a GPU runs the suite, with no
//! model file to carry. On the GPU: rows bit-identical however they are batched (n at once,
//! ragged, tree rows and their chains), and logits within the start-up check's limits of
//! the CPU's. Without a CUDA build or device it says `skipped: no CUDA device`.

mod common;

#[cfg(not(feature = "cuda"))]
#[test]
fn every_architecture_and_weight_type_on_cuda_matches_the_cpu_and_batches_exactly() {
    eprintln!("skipped: no CUDA device (this test binary was built without the cuda feature)");
}

#[cfg(feature = "cuda")]
#[test]
fn every_architecture_and_weight_type_on_cuda_matches_the_cpu_and_batches_exactly() {
    use candle_core::quantized::GgmlDType;
    use specgate::model::cuda::CudaModel;
    use specgate::model::device::{compare_logits, cuda_devices};
    use specgate::model::{CpuModel, TargetBackend};

    if cuda_devices() == 0 {
        assert!(
            std::env::var_os("SPECGATE_REQUIRE_GPU").is_none(),
            "SPECGATE_REQUIRE_GPU is set but there is no CUDA device"
        );
        eprintln!("skipped: no CUDA device");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("llama", GgmlDType::Q4_0, 32),
        ("llama", GgmlDType::Q4_1, 32),
        ("llama", GgmlDType::Q8_0, 32),
        ("llama", GgmlDType::Q4K, 256),
        ("llama", GgmlDType::F32, 32),
        ("qwen2", GgmlDType::Q8_0, 32),
        ("qwen3", GgmlDType::Q4_1, 32),
        ("gemma3", GgmlDType::Q8_0, 32),
    ];
    // 40 tokens: more than one 16-row chunk of the mat-vec kernels.
    let ids: Vec<u32> = (0..40u32).map(|i| (i * 5 + 3) % 8).collect();
    for (arch, dtype, hidden) in cases {
        let case = format!("{arch} {dtype:?}");
        let path = dir.path().join(format!("{arch}-{dtype:?}.gguf"));
        common::tiny::write_tiny(&path, arch, dtype, hidden);
        let mut cpu = CpuModel::load(&path).unwrap();
        let (mut gpu, _) = CudaModel::load(0, &path).unwrap_or_else(|e| panic!("{case}: {e}"));
        let on_cpu = all_rows(&mut cpu, &ids);
        let on_gpu = all_rows(&mut gpu, &ids);
        let agreement = compare_logits(&on_cpu, &on_gpu, 8);
        eprintln!("{case}: GPU vs CPU {agreement}");
        assert!(agreement.passes(), "{case}: {agreement}");
        let worst = batching_differences(&mut gpu, &ids);
        eprintln!("{case}: GPU rows batched vs alone: max |Δlogit| {worst}");
        assert_eq!(worst, 0.0, "{case}: batching changes a row's bits");
        assert_eq!(gpu.live_sequences(), 0);
        assert_eq!(
            gpu.kv_bytes(),
            0,
            "{case}: released sequences hold no blocks"
        );
    }
}

/// Every row's logits of `ids` appended in one pass.
#[cfg(feature = "cuda")]
fn all_rows(m: &mut dyn specgate::model::TargetBackend, ids: &[u32]) -> Vec<f32> {
    let s = m.new_sequence();
    let out = m
        .forward_one(s, ids, specgate::model::LogitRows::All)
        .unwrap();
    m.release(s);
    out.logits
}

/// The largest difference between rows computed together and the same rows computed
/// alone: n at once vs one at a time, a ragged batch vs each item alone, and tree rows vs
/// their paths as chains (then the kept path vs the chain, after keep_rows).
#[cfg(feature = "cuda")]
fn batching_differences(m: &mut dyn specgate::model::TargetBackend, ids: &[u32]) -> f32 {
    use specgate::model::{BatchItem, ForwardOptions, LogitRows};
    let mut worst = 0.0f32;
    let mut diff = |a: &[f32], b: &[f32]| {
        worst = worst.max(common::max_abs_diff(a, b));
    };
    let all = all_rows(m, ids);
    let one = m.new_sequence();
    for (j, &t) in ids.iter().enumerate() {
        let r = m.forward_one(one, &[t], LogitRows::Last).unwrap();
        diff(&all[j * 8..(j + 1) * 8], &r.logits);
    }
    m.release(one);
    // Ragged: 30 tokens of one sequence beside 3 of another, after 5 cached.
    let (a, b) = (m.new_sequence(), m.new_sequence());
    m.forward_one(b, &ids[..5], LogitRows::None).unwrap();
    let items = [
        BatchItem {
            seq: a,
            tokens: &ids[..30],
            logits: LogitRows::All,
            tree: None,
        },
        BatchItem {
            seq: b,
            tokens: &ids[5..8],
            logits: LogitRows::All,
            tree: None,
        },
    ];
    let out = m.forward(&items, ForwardOptions::default()).unwrap();
    diff(out.item_logits(0), &all[..30 * 8]);
    diff(out.item_logits(1), &all[5 * 8..8 * 8]);
    m.release(a);
    m.release(b);
    // A tree after 10 cached: pending, x under it, y under x, z under the pending token.
    let (pending, x, y, z, next) = (ids[10], 1u32, 2, 3, 4);
    let t = m.new_sequence();
    m.forward_one(t, &ids[..10], LogitRows::None).unwrap();
    let item = BatchItem {
        seq: t,
        tokens: &[pending, x, y, z],
        logits: LogitRows::All,
        tree: Some(&[None, Some(0), None]),
    };
    let tree = m.forward(&[item], ForwardOptions::default()).unwrap();
    let chain = |m: &mut dyn specgate::model::TargetBackend, path: &[u32]| {
        let s = m.new_sequence();
        m.forward_one(s, &ids[..10], LogitRows::None).unwrap();
        (s, m.forward_one(s, path, LogitRows::All).unwrap())
    };
    let (c1, long) = chain(m, &[pending, x, y]);
    let (c2, short) = chain(m, &[pending, z]);
    diff(&tree.logits[..3 * 8], &long.logits);
    diff(tree.row(0, 3), short.row(0, 1));
    m.keep_rows(t, 10, &[0, 3]).unwrap();
    assert_eq!(m.kv_layer(t, 0), m.kv_layer(c2, 0), "kept path's cache");
    let kept = m.forward_one(t, &[next], LogitRows::Last).unwrap();
    let straight = m.forward_one(c2, &[next], LogitRows::Last).unwrap();
    diff(&kept.logits, &straight.logits);
    for s in [t, c1, c2] {
        m.release(s);
    }
    worst
}
