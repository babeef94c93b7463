//! What a tenant's suffix cache costs in memory: the answer corpus (real model answers,
//! tokenized) indexed into one cache, and a full cache of random tokens (no context shared:
//! the worst case). `cargo run --release --example suffix_cache_memory`.

use std::path::Path;

use specgate_strategies::SuffixCache;

/// Resident memory, MiB.
fn rss_mib() -> anyhow::Result<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("statm"))?
        .parse()?;
    Ok(pages * 4096.0 / (1 << 20) as f64)
}

fn main() -> anyhow::Result<()> {
    let lm = specgate::model::loaded::LoadedModel::load(Path::new(
        "models/SmolLM2-135M-Instruct.Q4_1.gguf",
    ))?;
    let corpus =
        std::fs::read_to_string("strategies/data/corpus/SmolLM2-135M-Instruct.Q4_1.jsonl")?;
    let mut docs = Vec::new();
    for line in corpus.lines().skip(1) {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if let Some(answer) = v["answer"].as_str() {
            docs.push(lm.tokenizer.encode(answer)?);
        }
    }
    let before = rss_mib()?;
    let mut cache = SuffixCache::new(8, 1 << 18);
    for d in &docs {
        cache.insert(d.clone());
    }
    let grew = rss_mib()? - before;
    println!(
        "model answers: {} tokens, +{grew:.1} MiB ({:.0} bytes a token)",
        cache.len_tokens(),
        grew * (1 << 20) as f64 / cache.len_tokens() as f64
    );
    let before = rss_mib()?;
    let mut cache = SuffixCache::new(8, 1 << 18);
    let mut seed = 1u32;
    let mut token = || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 16) % 49_152
    };
    for _ in 0..1000 {
        cache.insert((0..300).map(|_| token()).collect());
    }
    let grew = rss_mib()? - before;
    println!(
        "random tokens: {} tokens, +{grew:.1} MiB ({:.0} bytes a token)",
        cache.len_tokens(),
        grew * (1 << 20) as f64 / cache.len_tokens() as f64
    );
    Ok(())
}
