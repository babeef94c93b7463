//! Times one Medusa draft step's parts right after a target pass (cold caches), f32 heads
//! against their 8-bit copies: `cargo run --release --example draft_probe`.

use std::path::Path;
use std::time::Instant;

use specgate::heads::bundle;
use specgate::model::loaded::LoadedModel;
use specgate::model::LogitRows;

fn main() -> anyhow::Result<()> {
    let path = Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut lm = LoadedModel::load(path)?;
    let bundle = bundle::load(&bundle::default_dir(path), path)?;
    let mut f32_heads = (*bundle.heads).clone();
    f32_heads.q8.clear();
    let text = "The quick brown fox jumps over the lazy dog while the cat watches. ";
    let ids = lm.tokenizer.encode(text)?;
    let seq = lm.model.new_sequence();
    lm.model.forward_one(seq, &ids, LogitRows::None)?;
    let h: Vec<f32> = (0..576).map(|i| (i as f32 * 0.37).sin()).collect();
    let e = bundle.lm_head.token_row(ids[0])?;
    let mut t = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..60 {
        lm.model.forward_one(seq, &ids[..1], LogitRows::Last)?; // evicts the heads
        lm.model.truncate(seq, ids.len())?;
        let a = Instant::now();
        let s = f32_heads.state(0, &h, e.as_deref(), e.as_deref());
        let b = Instant::now();
        lm.model.forward_one(seq, &ids[..1], LogitRows::Last)?;
        lm.model.truncate(seq, ids.len())?;
        let c = Instant::now();
        let s8 = bundle.heads.state(0, &h, e.as_deref(), e.as_deref());
        let d = Instant::now();
        let _ = bundle.lm_head.logits(&s8)?;
        let f = Instant::now();
        std::hint::black_box(&s);
        t[0].push((b - a).as_secs_f64() * 1e6);
        t[1].push((d - c).as_secs_f64() * 1e6);
        t[2].push((f - d).as_secs_f64() * 1e6);
    }
    for (name, mut v) in ["f32 state", "q8 state", "lm cut"].into_iter().zip(t) {
        v.sort_by(f64::total_cmp);
        println!("{name}: median {:.0} us", v[v.len() / 2]);
    }
    Ok(())
}
