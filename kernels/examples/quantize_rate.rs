//! Nanoseconds per 32-value block of the activation quantization, at a verify pass's rows:
//! `cargo run --release -p specgate-kernels --example quantize_rate -- ROWS DIM [CALLS]`.
use specgate_kernels::{quantize::quantize_rows_into, Q8Batch};
use std::time::Instant;

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (rows, dim, calls) = (arg(1, 5), arg(2, 576), arg(3, 20000));
    let xs: Vec<f32> = (0..rows * dim)
        .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
        .collect();
    let mut out = Q8Batch::default();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..calls {
            quantize_rows_into(std::hint::black_box(&xs), dim, true, &mut out);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let blocks = (rows * dim / 32 * calls) as f64;
    println!(
        "{rows} rows x {dim}: {:.2} ns per block (best of 5)",
        best * 1e9 / blocks
    );
}
