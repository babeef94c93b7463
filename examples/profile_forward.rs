//! Runs one forward of n tokens after a cached prefix in a loop, for `perf record`:
//! `cargo build --profile profiling --example profile_forward && perf record -g
//! target/profiling/examples/profile_forward 8 300 400` (n, cached, repetitions).
//! It prints the median milliseconds per forward so a profile can be read against it.

use std::path::Path;
use std::time::Instant;

use specgate::model::loaded::LoadedModel;
use specgate::model::LogitRows;

fn main() -> anyhow::Result<()> {
    let arg = |i: usize, d: usize| -> anyhow::Result<usize> {
        std::env::args()
            .nth(i)
            .map_or(Ok(d), |s| s.parse().map_err(anyhow::Error::from))
    };
    let (n, cached, reps) = (arg(1, 8)?, arg(2, 300)?, arg(3, 200)?);
    let path = Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut lm = LoadedModel::load(path)?;
    let text = "The quick brown fox jumps over the lazy dog while the cat watches. ";
    let one = lm.tokenizer.encode(text)?;
    let tokens: Vec<_> = one.iter().copied().cycle().take(cached + n).collect();
    let seq = lm.model.new_sequence();
    lm.model
        .forward_one(seq, &tokens[..cached], LogitRows::None)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        lm.model
            .forward_one(seq, &tokens[cached..], LogitRows::All)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        lm.model.truncate(seq, cached)?;
    }
    times.sort_by(f64::total_cmp);
    println!(
        "n={n} after {cached}: median {:.2} ms, fastest {:.2} ms",
        times[reps / 2],
        times[0]
    );
    Ok(())
}
