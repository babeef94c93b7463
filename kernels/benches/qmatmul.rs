//! Cost of one quantized matmul as the number of activation rows grows (a verify pass of k+1
//! rows): with weights read once per call, time should grow far slower than the row count.
//! Shapes are SmolLM2-135M's: FFN down (1536 → 576) and the tied LM head (576 → 49152).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use specgate_kernels::{Isa, QuantFormat, QuantMatrix};

fn matrix(format: QuantFormat, out_dim: usize, in_dim: usize) -> QuantMatrix {
    let blocks = out_dim * in_dim / 32;
    let mut bytes = Vec::with_capacity(blocks * format.block_bytes());
    let mut x = 12345u32;
    for _ in 0..blocks {
        bytes.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        if format == QuantFormat::Q4_1 {
            bytes.extend_from_slice(&half::f16::from_f32(-0.08).to_le_bytes());
        }
        let n = if format == QuantFormat::Q4_1 { 16 } else { 32 };
        for _ in 0..n {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            bytes.push((x >> 24) as u8 & 0x7F);
        }
    }
    QuantMatrix::from_ggml_bytes(format, out_dim, in_dim, &bytes).expect("matrix")
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("q4_1_down_1536x576", matrix(QuantFormat::Q4_1, 576, 1536)),
        (
            "q8_0_lm_head_576x49152",
            matrix(QuantFormat::Q8_0, 49152, 576),
        ),
    ];
    for (name, m) in &cases {
        let mut group = c.benchmark_group(*name);
        for rows in [1usize, 2, 4, 8, 16] {
            let xs: Vec<f32> = (0..rows * m.in_dim())
                .map(|i| ((i % 17) as f32 - 8.0) * 0.1)
                .collect();
            for isa in Isa::available() {
                group.bench_with_input(BenchmarkId::new(format!("{isa:?}"), rows), &xs, |b, xs| {
                    b.iter(|| m.matmul_with(xs, isa))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
