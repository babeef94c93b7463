//! Multiply-accumulates per second of the Q4_1 matmul (FFN down, 1536 → 576) at a given
//! number of rows, on the pool's threads (`RAYON_NUM_THREADS=1` for one):
//! `cargo run --release -p specgate-kernels --example kernel_rate -- ROWS [CALLS]`.
//! Against the machine's cycle rate it says how near the kernel runs to its issue bound
//! (`llvm-mca -mcpu=znver3` on the inner loop: about 8.5 cycles per 256 multiply-adds).

use specgate_kernels::{Q8Batch, QuantFormat, QuantMatrix};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8);
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    // Distinct matrices cycled through: enough (e.g. 128, 70 MB) and the weights stream
    // from memory as in a forward, instead of sitting in cache.
    let copies: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let (out_dim, in_dim) = (1536, 576);
    let format = QuantFormat::Q4_1;
    let blocks = out_dim * in_dim / 32;
    let mut bytes = Vec::new();
    let mut x = 12345u32;
    for _ in 0..blocks {
        bytes.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        bytes.extend_from_slice(&half::f16::from_f32(-0.08).to_le_bytes());
        for _ in 0..16 {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            bytes.push((x >> 24) as u8);
        }
    }
    let ms: Vec<QuantMatrix> = (0..copies.max(1))
        .map(|_| QuantMatrix::from_ggml_bytes(format, out_dim, in_dim, &bytes).expect("matrix"))
        .collect();
    let xs: Vec<f32> = (0..rows * in_dim)
        .map(|i| ((i % 17) as f32 - 8.0) * 0.1)
        .collect();
    let mut acts = Q8Batch::default();
    let mut y = vec![0.0f32; rows * out_dim];
    let t = Instant::now();
    for i in 0..iters {
        ms[i % ms.len()].matmul_into(&xs, &mut acts, &mut y);
    }
    let s = t.elapsed().as_secs_f64();
    let macs = (rows * out_dim * in_dim * iters) as f64;
    println!(
        "rows {rows}, {} matrices: {:.2} us/call, {:.1} GMAC/s",
        ms.len(),
        s / iters as f64 * 1e6,
        macs / s / 1e9
    );
}
