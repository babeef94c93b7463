//! What the LM head costs: a forward of n rows with and without logits (the difference is
//! the LM head's share of a verify pass), and the head alone over the whole vocabulary
//! against the first `DRAFT_VOCAB` rows a Medusa draft reads (the draft vocabulary trick).
//! A 262k-token vocabulary makes the head most of a small model's work per token.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use specgate_strategies::TokenId;

use crate::heads::bundle::DRAFT_VOCAB;
use crate::model::{first_rows, lm_head_tensor, Linear, LogitRows, MatmulBackend, TargetBackend};
use crate::tools::bench_decode::median;

#[derive(Debug, Clone, Serialize)]
pub struct LmHeadRow {
    pub rows: usize,
    /// Median ms of a forward of `rows` tokens after the cache, logits for every row.
    pub with_logits_ms: f64,
    /// The same forward returning no logits.
    pub without_logits_ms: f64,
    /// The LM head over the whole vocabulary, alone, for `rows` rows.
    pub full_head_ms: f64,
    /// The LM head over the first `DRAFT_VOCAB` ids, alone.
    pub draft_vocab_head_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LmHeadReport {
    pub vocab: usize,
    pub draft_vocab: usize,
    pub rows: Vec<LmHeadRow>,
}

fn time_ms(reps: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&t))
}

pub fn lm_head_cost(
    model: &mut dyn TargetBackend,
    path: &Path,
    tokens: &[TokenId],
    cached: usize,
    ns: &[usize],
    reps: usize,
) -> anyhow::Result<LmHeadReport> {
    let (head, config) = lm_head_tensor(path)?;
    let hidden = config.hidden;
    let draft_vocab = DRAFT_VOCAB.min(config.vocab_size);
    let draft = Linear::new(first_rows(&head, draft_vocab)?, MatmulBackend::Kernels)?;
    let full = Linear::new(head, MatmulBackend::Kernels)?;
    let seq = model.new_sequence();
    model.forward_one(seq, &tokens[..cached], LogitRows::None)?;
    let mut rows = Vec::new();
    for &n in ns {
        let fed = &tokens[cached..cached + n];
        let mut pass = |logits| -> anyhow::Result<()> {
            model.forward_one(seq, fed, logits)?;
            model.truncate(seq, cached)?;
            Ok(())
        };
        let with_logits_ms = time_ms(reps, || pass(LogitRows::All))?;
        let without_logits_ms = time_ms(reps, || pass(LogitRows::None))?;
        let x: Vec<f32> = (0..n * hidden)
            .map(|i| ((i % 97) as f32 - 48.0) / 40.0)
            .collect();
        let full_head_ms = time_ms(reps, || Ok(full.forward(&x).map(drop)?))?;
        let draft_vocab_head_ms = time_ms(reps, || Ok(draft.forward(&x).map(drop)?))?;
        rows.push(LmHeadRow {
            rows: n,
            with_logits_ms,
            without_logits_ms,
            full_head_ms,
            draft_vocab_head_ms,
        });
    }
    model.release(seq);
    Ok(LmHeadReport {
        vocab: config.vocab_size,
        draft_vocab,
        rows,
    })
}

pub fn print(r: &LmHeadReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "\nLM head ({} ids; draft vocabulary: the first {}), medians:",
        r.vocab, r.draft_vocab
    )?;
    writeln!(
        out,
        "| rows | forward ms | without logits ms | LM head share | head alone ms | draft-vocabulary head ms |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    for row in &r.rows {
        writeln!(
            out,
            "| {} | {:.2} | {:.2} | {:.0}% | {:.2} | {:.2} |",
            row.rows,
            row.with_logits_ms,
            row.without_logits_ms,
            100.0 * (1.0 - row.without_logits_ms / row.with_logits_ms),
            row.full_head_ms,
            row.draft_vocab_head_ms
        )?;
    }
    Ok(())
}
