//! Multiply-accumulates per second of the quantized matmul at a given number of rows, on the
//! pool's threads (`RAYON_NUM_THREADS=1` for one), for one weight format:
//! `cargo run --release -p specgate-kernels --example kernel_rate -- ROWS [CALLS] [COPIES]
//! [FORMAT]` with FORMAT one of q4_0, q4_1 (the default), q5_0, q8_0, q4_k, q5_k, q6_k. The
//! matrix is 640 × 2048 (Gemma 3 270M's FFN down) whatever the format. Against the
//! machine's cycle rate it says how near the kernel runs to its issue bound
//! (`llvm-mca -mcpu=znver3` on the Q4_1 inner loop: about 8.5 cycles per 256 multiply-adds).

use specgate_kernels::{Q8Batch, QuantFormat, QuantMatrix};
use std::time::Instant;

/// Random blocks of `format` with sane f16 scales (random bytes there could be NaN).
fn random_blocks(format: QuantFormat, blocks: usize) -> Vec<u8> {
    let mut x = 12345u32;
    let mut bytes: Vec<u8> = (0..blocks * format.block_bytes())
        .map(|_| {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            (x >> 24) as u8
        })
        .collect();
    let scales: &[usize] = match format {
        QuantFormat::Q4_1 | QuantFormat::Q4K => &[0, 2],
        QuantFormat::Q6K => &[208],
        _ => &[0],
    };
    for b in bytes.chunks_exact_mut(format.block_bytes()) {
        for &at in scales {
            b[at..at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
    }
    bytes
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8);
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    // Distinct matrices cycled through: enough (e.g. 64, 70 MB) and the weights stream
    // from memory as in a forward, instead of sitting in cache.
    let copies: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let format = match args.get(4).map_or("q4_1", String::as_str) {
        "q4_0" => QuantFormat::Q4_0,
        "q5_0" => QuantFormat::Q5_0,
        "q8_0" => QuantFormat::Q8_0,
        "q4_k" => QuantFormat::Q4K,
        "q5_k" => QuantFormat::Q5K,
        "q6_k" => QuantFormat::Q6K,
        _ => QuantFormat::Q4_1,
    };
    let (out_dim, in_dim) = (640, 2048);
    let bytes = random_blocks(format, out_dim * in_dim / format.block_weights());
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
        "{format:?} rows {rows}, {} matrices: {:.2} us/call, {:.1} GMAC/s",
        ms.len(),
        s / iters as f64 * 1e6,
        macs / s / 1e9
    );
}
