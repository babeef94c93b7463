//! Replays plain greedy output through the suffix drafter without the model: greedy
//! speculation commits exactly plain's tokens, so a draft's accepted length is its agreement
//! with them. Costs come from a verify-cost curve (rows → share of a one-row pass), so
//! stopping rules can be compared in seconds, against an oracle that drafts exactly what will
//! be accepted. A rule's floor is the score a draft must keep (the drafter's price times
//! `TOKENS_PER_PASS_FORGONE`).
//!
//! `cargo run --release --example suffix_replay [max_tokens]`: the outputs (of the shipped
//! prompt sets, `max_tokens` each, default 128) are generated once and cached in
//! `target/suffix_replay.json`; delete it after changing the model, prompts or length.
//! With `DUMP=1`, every drafted token's evidence and outcome go to `target/suffix_steps.csv`.
//! With `CORPUS=PATH`, the drafter also consults that answer corpus (`specgate build-corpus`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use specgate::engine::generate::{generate, GenerateParams};
use specgate::model::chat_template::ChatMessage;
use specgate::model::loaded::LoadedModel;
use specgate::tools::prompts::load_prompt_sets;
use specgate_strategies::draft::{DraftContext, Drafter, PlainDrafter};
use specgate_strategies::suffix::{SuffixCache, SuffixDrafter, TOKENS_PER_PASS_FORGONE};
use specgate_strategies::{SamplingParams, SharedCorpus, TokenId};

/// Verify cost by rows, as a share of one row (`bench decode` on a 2-vCPU Zen 4 with the
/// AVX-512 kernels: 1, 2, 4, 8, 16 rows after 300 cached at 4.11, 4.29, 5.12, 7.45, 13.84 ms).
const CURVE: [(f64, f64); 5] = [(1., 1.), (2., 1.05), (4., 1.25), (8., 1.81), (16., 3.37)];

fn cost(rows: usize) -> f64 {
    let r = rows as f64;
    for w in CURVE.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if r <= x1 {
            return y0 + (y1 - y0) * (r - x0) / (x1 - x0);
        }
    }
    let ((x0, y0), (x1, y1)) = (CURVE[3], CURVE[4]);
    y1 + (y1 - y0) * (r - x1) / (x1 - x0)
}

type Case = (String, Vec<TokenId>, Vec<TokenId>); // (set, prompt, greedy output)

fn cases(max_tokens: usize) -> anyhow::Result<Vec<Case>> {
    let cache = Path::new("target/suffix_replay.json");
    if let Ok(text) = std::fs::read_to_string(cache) {
        return Ok(serde_json::from_str(&text)?);
    }
    let model = Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut lm = LoadedModel::load(model)?;
    let params = GenerateParams::greedy(max_tokens, 0);
    let mut out = Vec::new();
    for set in load_prompt_sets(Path::new("tests/fixtures/prompts"))? {
        for prompt in &set.prompts {
            let text = lm.chat_prompt(&[ChatMessage::new("user", prompt)])?;
            let ids = lm.tokenizer.encode(&text)?;
            let plain = generate(
                &mut lm.model,
                &lm.tokenizer,
                &ids,
                &params,
                &mut PlainDrafter,
                |_| {},
            )?;
            out.push((set.name.clone(), ids, plain.token_ids));
        }
    }
    std::fs::write(cache, serde_json::to_string(&out)?)?;
    Ok(out)
}

/// (tokens, cost in one-row passes) of one case; `oracle` cuts each draft to what is accepted.
fn replay(d: &mut dyn Drafter, case: &Case, k: usize, floor: f32, oracle: bool) -> (f64, f64) {
    let (_, prompt, out) = case;
    let all: Vec<TokenId> = prompt.iter().chain(out).copied().collect();
    let sampling = SamplingParams::greedy();
    let ctx = |n: usize| DraftContext {
        tokens: &all[..n],
        prompt_len: prompt.len(),
        sampling: &sampling,
        hidden: None,
        fresh_hidden: &[],
        // The drafter's floor is the price times what a pass is worth.
        row_cost: Some(floor / TOKENS_PER_PASS_FORGONE),
    };
    // The prompt's pass commits the first token.
    let (mut pos, mut total) = (prompt.len() + 1, 0.0);
    while pos < all.len() {
        let mut draft = d
            .propose(&ctx(pos), k)
            .map(|d| d.tokens)
            .unwrap_or_default();
        let left = all.len() - pos;
        let agree = draft
            .iter()
            .zip(&all[pos..])
            .take_while(|(a, b)| a == b)
            .count();
        if oracle {
            draft.truncate(agree);
        }
        total += cost(draft.len() + 1);
        let commit = (agree + 1).min(left);
        pos += commit;
        d.on_commit(&ctx(pos), agree.min(commit));
    }
    d.finish();
    (out.len().saturating_sub(1) as f64, total)
}

/// The longest suffix of `h` (up to 64 tokens) that also ends earlier in `h`.
fn match_len(h: &[TokenId]) -> usize {
    let n = h.len();
    (1..n)
        .map(|end| {
            (0..end.min(64))
                .take_while(|&i| h[end - 1 - i] == h[n - 1 - i])
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Every drafted token up to a round's first rejection, with its evidence and outcome, as CSV.
fn dump(cases: &[Case], corpus: Option<SharedCorpus>) -> anyhow::Result<()> {
    let mut csv =
        String::from("set,pos,j,depth,share,count,corpus,mlen,prev_acc,prev_len,accepted\n");
    for set in ["code_edit", "rag", "creative", "chat"] {
        let shared = Arc::new(Mutex::new(SuffixCache::new(8, 1 << 16)));
        for (_, prompt, out) in cases.iter().filter(|c| c.0 == set) {
            let mut d =
                SuffixDrafter::new(8, 0.2, Some(shared.clone())).with_corpus(corpus.clone());
            let all: Vec<TokenId> = prompt.iter().chain(out).copied().collect();
            let (mut pos, mut prev) = (prompt.len() + 1, (0, 0));
            while pos < all.len() {
                let steps = d.continuation(&all[..pos], 32)?;
                let mlen = match_len(&all[..pos]);
                let mut agree = 0;
                for (j, st) in steps.iter().enumerate() {
                    let ok = all.get(pos + j) == Some(&st.token);
                    csv += &format!(
                        "{set},{},{j},{},{},{},{},{mlen},{},{},{}\n",
                        pos - prompt.len(),
                        st.depth,
                        st.share,
                        st.count,
                        st.from_corpus as u8,
                        prev.0,
                        prev.1,
                        ok as u8
                    );
                    if !ok {
                        break;
                    }
                    agree += 1;
                }
                prev = (agree, steps.len());
                pos += (agree + 1).min(all.len() - pos);
            }
            d.finish();
        }
    }
    std::fs::write("target/suffix_steps.csv", csv)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let max_tokens = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(128);
    let cases = cases(max_tokens)?;
    let corpus = match std::env::var_os("CORPUS") {
        Some(path) => {
            let model = Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
            let lm = LoadedModel::load(model)?;
            let c =
                specgate::drafting::answer_corpus::load(Path::new(&path), model, &lm.tokenizer, 8)?;
            println!("corpus: {} tokens", c.len_tokens());
            Some(c)
        }
        None => None,
    };
    if std::env::var_os("DUMP").is_some() {
        return dump(&cases, corpus);
    }
    let sets = ["code_edit", "rag", "creative", "chat"];
    println!("| rule | k | {} |", sets.join(" | "));
    println!("|---|---|{}", "---|".repeat(sets.len()));
    let rules = [
        ("floor 0.2", 0.2, false),
        ("floor 0.25", 0.25, false),
        ("floor 0.3", 0.3, false),
        ("floor 0.35", 0.35, false),
        ("floor 0.4", 0.4, false),
        ("oracle", 0.0, true),
    ];
    for (rule, floor, oracle) in rules {
        for k in [2, 4, 8, 16, 32] {
            let mut row = format!("| {rule} | {k} |");
            for set in sets {
                let shared = Arc::new(Mutex::new(SuffixCache::new(8, 1 << 16)));
                let (mut tokens, mut cost) = (0.0, 0.0);
                for case in cases.iter().filter(|c| c.0 == set) {
                    let mut d = SuffixDrafter::new(8, 0.2, Some(shared.clone()))
                        .with_corpus(corpus.clone());
                    let (t, c) = replay(&mut d, case, k, floor, oracle);
                    tokens += t;
                    cost += c;
                }
                row += &format!(" {:.3} |", tokens / cost);
            }
            println!("{row}");
        }
    }
    Ok(())
}
