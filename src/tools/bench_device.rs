//! `specgate bench decode --device D` for a device other than the CPU: plain decode and
//! prompt speed, the cost of one forward appending n tokens to a 300-token cache as a ratio
//! to n = 1 (what a verify row costs there), and whether n rows at once give the same bits
//! as the same rows one at a time. The CPU run (`--device cpu`) keeps its comparison with
//! candle-transformers ([`crate::tools::bench_decode`]).

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::model::loaded::LoadedModel;
use crate::model::{DeviceChoice, LogitRows, TargetBackend};
use crate::tools::bench_decode::{bench_tokens, median, run_ours, verify_cost_curve};
use specgate_strategies::TokenId;

#[derive(Debug, Clone, Serialize)]
pub struct DeviceBenchReport {
    pub device: String,
    pub decode_tokens: usize,
    pub decode_tps: Vec<f64>,
    pub prompt_tps: Vec<f64>,
    /// Median milliseconds of one decode step.
    pub step_ms: f64,
    /// (n, median seconds, ratio to n = 1) for one forward of n tokens after 300 cached.
    pub verify_cost: Vec<(usize, f64, f64)>,
    /// Largest |Δlogit| between 16 rows in one pass and the same rows one at a time (0: the
    /// bits agree, as exactness needs).
    pub batch_invariance_max_abs: f32,
}

pub fn bench_device(
    path: &Path,
    device: DeviceChoice,
    runs: usize,
    decode_tokens: usize,
    out: &mut dyn Write,
) -> anyhow::Result<DeviceBenchReport> {
    let mut lm = LoadedModel::load_on(path, device)?;
    let name = lm.model.device();
    let tokens = bench_tokens(&lm, 340)?;
    let prompt = &tokens[..128];
    writeln!(
        out,
        "bench decode on {name}: {runs} runs, {decode_tokens} tokens"
    )?;
    let (mut dec, mut pre) = (Vec::new(), Vec::new());
    run_ours(lm.model.as_mut(), prompt, 8)?; // warm-up: first launches, allocations
    for run in 0..runs {
        let (p, d, _) = run_ours(lm.model.as_mut(), prompt, decode_tokens)?;
        writeln!(out, "run {run}: {d:.1} tok/s decode, {p:.1} prompt")?;
        dec.push(d);
        pre.push(p);
    }
    let ns = [1, 2, 4, 8, 16];
    let verify_cost = verify_cost_curve(lm.model.as_mut(), &tokens, 300, &ns, 15)?;
    let invariance = batch_invariance(lm.model.as_mut(), &tokens[..300], 16)?;
    let report = DeviceBenchReport {
        device: name,
        decode_tokens,
        step_ms: 1e3 / median(&dec),
        decode_tps: dec,
        prompt_tps: pre,
        verify_cost,
        batch_invariance_max_abs: invariance,
    };
    writeln!(
        out,
        "\ndecode {:.1} tok/s (median; one step {:.3} ms), prompt {:.1} tok/s",
        median(&report.decode_tps),
        report.step_ms,
        median(&report.prompt_tps)
    )?;
    writeln!(
        out,
        "\nforward of n tokens after a 300-token cache (medians of 15 interleaved runs):"
    )?;
    writeln!(out, "| n | ms | ratio to n=1 |\n|---|---|---|")?;
    for (n, s, r) in &report.verify_cost {
        writeln!(out, "| {n} | {:.3} | {r:.2} |", s * 1e3)?;
    }
    writeln!(
        out,
        "\n{} rows at once vs one at a time: max |Δlogit| {}",
        16, report.batch_invariance_max_abs
    )?;
    Ok(report)
}

/// Append the last `n` of `tokens` in one pass and, on a second sequence, one at a time;
/// the largest difference between the two passes' logits.
pub fn batch_invariance(
    model: &mut dyn TargetBackend,
    tokens: &[TokenId],
    n: usize,
) -> anyhow::Result<f32> {
    let cached = tokens.len() - n;
    let (a, b) = (model.new_sequence(), model.new_sequence());
    model.forward_one(a, &tokens[..cached], LogitRows::None)?;
    model.forward_one(b, &tokens[..cached], LogitRows::None)?;
    let all = model.forward_one(a, &tokens[cached..], LogitRows::All)?;
    let mut worst = 0.0f32;
    for (j, &t) in tokens[cached..].iter().enumerate() {
        let one = model.forward_one(b, &[t], LogitRows::Last)?;
        for (x, y) in all.row(0, j).iter().zip(one.row(0, 0)) {
            let d = (x - y).abs();
            worst = if d.is_nan() {
                f32::INFINITY
            } else {
                worst.max(d)
            };
        }
    }
    model.release(a);
    model.release(b);
    Ok(worst)
}
