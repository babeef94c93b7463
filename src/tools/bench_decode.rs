//! `specgate bench decode`: our engine beside candle-transformers' own model (`quantized_llama`,
//! `_qwen2`, `_qwen3` or `_gemma3`, per the file's architecture) on the
//! same GGUF and threads, runs interleaved, medians reported; and the cost of one forward
//! appending n tokens to a 300-token cache, as a ratio to n = 1.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use specgate_strategies::{argmax, TokenId};

use crate::model::loaded::LoadedModel;
use crate::model::{LogitRows, MatmulBackend, SeqId, TargetBackend};
use crate::tools::bench_lm_head::{self, lm_head_cost, LmHeadReport};
use crate::tools::candle_reference::CandleReference;

/// A fixed English passage; its tokens fill the prompt and the 300-token cache.
const BENCH_TEXT: &str = "The harbour town woke before dawn. Fishermen checked their nets, \
bakers lit their ovens, and the old lighthouse keeper climbed the spiral stairs one last time. \
He had kept the light burning for forty years, through storms that tore roofs from houses and \
winters so cold the bay froze solid. Tomorrow a machine would take his place. ";

#[derive(Debug, Clone, Serialize)]
pub struct DecodeBenchReport {
    pub threads: usize,
    pub decode_tokens: usize,
    pub ours_decode_tps: Vec<f64>,
    pub reference_decode_tps: Vec<f64>,
    pub ours_prompt_tps: Vec<f64>,
    pub reference_prompt_tps: Vec<f64>,
    pub decode_ratio: f64,
    pub prompt_ratio: f64,
    /// (n, median seconds, ratio to n = 1) for one forward of n tokens after 300 cached.
    pub verify_cost: Vec<(usize, f64, f64)>,
    /// The same curve for our forward on candle's QMatMul (before the kernels).
    pub verify_cost_candle_matmul: Vec<(usize, f64, f64)>,
    /// Leading greedy tokens on which ours and the reference agree.
    pub greedy_agreement: usize,
    pub lm_head: LmHeadReport,
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(crate) fn bench_tokens(lm: &LoadedModel, n: usize) -> anyhow::Result<Vec<TokenId>> {
    let one = lm.tokenizer.encode(BENCH_TEXT)?;
    let bos = lm.tokenizer.bos();
    if let Some(bos) = bos {
        // A model that wants BOS gets it once, at the start.
        let rest = one.iter().copied().cycle().take(n.saturating_sub(1));
        return Ok(std::iter::once(bos).chain(rest).collect());
    }
    Ok(one.iter().copied().cycle().take(n).collect())
}

/// Returns (prompt tok/s, decode tok/s, greedy tokens).
pub(crate) fn run_ours(
    model: &mut dyn TargetBackend,
    prompt: &[TokenId],
    n: usize,
) -> anyhow::Result<(f64, f64, Vec<TokenId>)> {
    let seq = model.new_sequence();
    let t = Instant::now();
    let out = model.forward_one(seq, prompt, LogitRows::Last)?;
    let prompt_tps = prompt.len() as f64 / t.elapsed().as_secs_f64();
    let mut next = argmax(out.row(0, 0));
    let mut ids = vec![next];
    let t = Instant::now();
    for _ in 1..n {
        let out = model.forward_one(seq, &[next], LogitRows::Last)?;
        next = argmax(out.row(0, 0));
        ids.push(next);
    }
    let decode_tps = (n - 1) as f64 / t.elapsed().as_secs_f64();
    model.release(seq);
    Ok((prompt_tps, decode_tps, ids))
}

fn run_reference(
    reference: &mut CandleReference,
    prompt: &[TokenId],
    n: usize,
) -> anyhow::Result<(f64, f64, Vec<TokenId>)> {
    let t = Instant::now();
    let mut next = argmax(&reference.forward(prompt, 0)?);
    let prompt_tps = prompt.len() as f64 / t.elapsed().as_secs_f64();
    let mut ids = vec![next];
    let t = Instant::now();
    for i in 1..n {
        next = argmax(&reference.forward(&[next], prompt.len() + i - 1)?);
        ids.push(next);
    }
    let decode_tps = (n - 1) as f64 / t.elapsed().as_secs_f64();
    Ok((prompt_tps, decode_tps, ids))
}

/// Median seconds of one forward appending n tokens to a `cached`-token sequence.
pub fn verify_cost_curve(
    model: &mut dyn TargetBackend,
    tokens: &[TokenId],
    cached: usize,
    ns: &[usize],
    reps: usize,
) -> anyhow::Result<Vec<(usize, f64, f64)>> {
    let seq: SeqId = model.new_sequence();
    model.forward_one(seq, &tokens[..cached], LogitRows::None)?;
    // Every repetition runs every n in turn, so drift in machine speed hits all n alike.
    let mut times = vec![Vec::with_capacity(reps); ns.len()];
    for _ in 0..reps {
        for (&n, times) in ns.iter().zip(&mut times) {
            let t = Instant::now();
            model.forward_one(seq, &tokens[cached..cached + n], LogitRows::All)?;
            times.push(t.elapsed().as_secs_f64());
            model.truncate(seq, cached)?;
        }
    }
    let medians: Vec<(usize, f64)> = ns
        .iter()
        .zip(&times)
        .map(|(&n, t)| (n, median(t)))
        .collect();
    model.release(seq);
    let base = medians.first().map_or(f64::NAN, |m| m.1);
    Ok(medians.into_iter().map(|(n, s)| (n, s, s / base)).collect())
}

pub fn bench_decode(
    path: &Path,
    runs: usize,
    decode_tokens: usize,
    out: &mut dyn Write,
) -> anyhow::Result<DecodeBenchReport> {
    let mut lm = LoadedModel::load(path)?;
    let mut reference = CandleReference::load(path)?;
    let tokens = bench_tokens(&lm, 340)?;
    let prompt = &tokens[..128];
    let threads = candle_core::utils::get_num_threads();
    writeln!(
        out,
        "bench decode: {} runs, {decode_tokens} tokens, {threads} threads",
        runs
    )?;
    let (mut ours_d, mut ref_d, mut ours_p, mut ref_p) = (vec![], vec![], vec![], vec![]);
    let mut agreement = 0;
    // Interleave so drift in machine speed hits both engines alike.
    for run in 0..runs {
        let (op, od, oids) = run_ours(&mut lm.model, prompt, decode_tokens)?;
        let (rp, rd, rids) = run_reference(&mut reference, prompt, decode_tokens)?;
        agreement = oids.iter().zip(&rids).take_while(|(a, b)| a == b).count();
        writeln!(out, "run {run}: ours {od:.1} tok/s decode, {op:.1} prompt; candle {rd:.1} decode, {rp:.1} prompt")?;
        ours_d.push(od);
        ref_d.push(rd);
        ours_p.push(op);
        ref_p.push(rp);
    }
    let ns = [1, 2, 4, 8, 16];
    let verify_cost = verify_cost_curve(&mut lm.model, &tokens, 300, &ns, 15)?;
    let lm_head = lm_head_cost(&mut lm.model, path, &tokens, 300, &[1, 8], 9)?;
    drop(reference);
    let mut on_candle = LoadedModel::load_with(path, MatmulBackend::Candle)?;
    let verify_cost_candle_matmul = verify_cost_curve(&mut on_candle.model, &tokens, 300, &ns, 7)?;
    let report = DecodeBenchReport {
        threads,
        decode_tokens,
        decode_ratio: median(&ours_d) / median(&ref_d),
        prompt_ratio: median(&ours_p) / median(&ref_p),
        ours_decode_tps: ours_d,
        reference_decode_tps: ref_d,
        ours_prompt_tps: ours_p,
        reference_prompt_tps: ref_p,
        verify_cost,
        verify_cost_candle_matmul,
        greedy_agreement: agreement,
        lm_head,
    };
    writeln!(
        out,
        "\n| engine | decode tok/s (median) | prompt tok/s (median) |"
    )?;
    writeln!(out, "|---|---|---|")?;
    writeln!(
        out,
        "| specgate | {:.1} | {:.1} |",
        median(&report.ours_decode_tps),
        median(&report.ours_prompt_tps)
    )?;
    writeln!(
        out,
        "| candle-transformers | {:.1} | {:.1} |",
        median(&report.reference_decode_tps),
        median(&report.reference_prompt_tps)
    )?;
    writeln!(
        out,
        "| ratio | {:.2}x | {:.2}x |",
        report.decode_ratio, report.prompt_ratio
    )?;
    writeln!(
        out,
        "\nforward of n tokens after a 300-token cache (medians of 15 interleaved runs; candle: 7):"
    )?;
    writeln!(
        out,
        "| n | kernels ms | ratio to n=1 | candle QMatMul ms | ratio to n=1 |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    for ((n, s, r), (_, cs, cr)) in report
        .verify_cost
        .iter()
        .zip(&report.verify_cost_candle_matmul)
    {
        writeln!(
            out,
            "| {n} | {:.2} | {r:.2} | {:.2} | {cr:.2} |",
            s * 1e3,
            cs * 1e3
        )?;
    }
    bench_lm_head::print(&report.lm_head, out)?;
    writeln!(
        out,
        "\ngreedy agreement with candle-transformers: first {agreement} of {decode_tokens} tokens"
    )?;
    Ok(report)
}
