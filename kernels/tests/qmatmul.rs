//! The quantized matmul on every instruction set this CPU runs, for every weight format,
//! rows 1..33, random and adversarial blocks: each equals the portable reference exactly,
//! and the reference tracks the unquantized product.

use half::f16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use specgate_kernels::quantize::QK;
use specgate_kernels::{Isa, QuantFormat, QuantMatrix};

/// Random blocks, plus adversarial ones: zero blocks, extreme scales, saturated nibbles.
fn random_bytes(format: QuantFormat, blocks: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let scale = |b: usize, rng: &mut ChaCha8Rng| match b % 5 {
        0 => 0.0,
        1 => 60000.0,
        2 => 1e-7,
        _ => rng.random_range(-0.1f32..0.1),
    };
    let half = |v: f32| f16::from_f32(v).to_le_bytes();
    let mut out = Vec::with_capacity(blocks * format.block_bytes());
    for b in 0..blocks {
        if format.block_weights() > QK {
            // K-quants: random quants, scales and mins; f16 super-block scales set.
            let start = out.len();
            out.extend((0..format.block_bytes()).map(|_| rng.random::<u8>()));
            let at = if format == QuantFormat::Q6K {
                [208, 208]
            } else {
                [0, 2]
            };
            for a in at {
                let v = half(scale(b, rng));
                out[start + a..start + a + 2].copy_from_slice(&v);
            }
            continue;
        }
        out.extend_from_slice(&half(scale(b, rng)));
        if format == QuantFormat::Q4_1 {
            out.extend_from_slice(&half(rng.random_range(-1.0f32..1.0)));
        }
        let scales = if format == QuantFormat::Q4_1 { 4 } else { 2 };
        for j in 0..format.block_bytes() - scales {
            // Saturated nibbles, and Q8_0's -128 (ggml never writes it; a file may).
            let v: u8 = match b % 5 {
                3 => 0xFF,
                4 if j % 3 == 0 => 0x80,
                _ => rng.random(),
            };
            out.push(v);
        }
    }
    out
}

fn exact_f64(m: &QuantMatrix, x: &[f32]) -> Vec<f64> {
    let rows = x.len() / m.in_dim();
    let mut y = vec![0.0f64; rows * m.out_dim()];
    for r in 0..rows {
        for f in 0..m.out_dim() {
            let w = m.dequantize_row(f);
            let xr = &x[r * m.in_dim()..][..m.in_dim()];
            y[r * m.out_dim() + f] = w.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
        }
    }
    y
}

#[test]
fn simd_equals_reference_and_both_track_the_float_product() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let formats = [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q8_0,
        QuantFormat::Q5_0,
        QuantFormat::Q4K,
        QuantFormat::Q5K,
        QuantFormat::Q6K,
    ];
    for format in formats {
        let out_dim = 37;
        let in_dim = 3 * format.block_weights();
        let bytes = random_bytes(format, out_dim * in_dim / format.block_weights(), &mut rng);
        let m = QuantMatrix::from_ggml_bytes(format, out_dim, in_dim, &bytes).unwrap();
        for rows in 1..=33 {
            let x: Vec<f32> = (0..rows * in_dim)
                .map(|i| {
                    if i % 97 == 0 {
                        0.0
                    } else {
                        rng.random_range(-3.0f32..3.0)
                    }
                })
                .collect();
            let reference = m.matmul_with(&x, Isa::Portable);
            if rows == 1 {
                eprintln!("kernels compared: {:?}", Isa::available());
            }
            for isa in Isa::available() {
                let got = m.matmul_with(&x, isa);
                assert_eq!(
                    got, reference,
                    "{format:?} {isa:?} rows {rows}: must equal portable"
                );
            }
            // Against the unquantized product: 8-bit activations cost at most ~1% of the
            // row's magnitude.
            let exact = exact_f64(&m, &x);
            for (i, (&got, &want)) in reference.iter().zip(&exact).enumerate() {
                let f = i % out_dim;
                let scale: f64 = m
                    .dequantize_row(f)
                    .iter()
                    .map(|w| w.abs() as f64)
                    .sum::<f64>()
                    * 3.0;
                assert!(
                    (got as f64 - want).abs() <= 0.01 * scale + 1e-6,
                    "{format:?} rows {rows} [{i}]: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    assert!(QuantMatrix::from_ggml_bytes(QuantFormat::Q8_0, 2, 33, &[0; 68]).is_err());
    assert!(QuantMatrix::from_ggml_bytes(QuantFormat::Q4_1, 2, 32, &[0; 39]).is_err());
}

/// The largest integer sums a block can make: every nibble 15 (or every Q8_0 weight ±127)
/// against activations that all quantize to +127 or all to −127. Kernels that add products
/// in 16-bit lanes before widening must still equal the reference exactly.
#[test]
fn saturated_blocks_against_saturated_activations_stay_exact() {
    let blocks: usize = 4;
    for format in [QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q8_0] {
        let out_dim = 19;
        let mut bytes = Vec::new();
        for b in 0..out_dim * blocks {
            bytes.extend_from_slice(&f16::from_f32(0.5).to_le_bytes());
            if format == QuantFormat::Q4_1 {
                bytes.extend_from_slice(&f16::from_f32(-0.25).to_le_bytes());
            }
            let q = match format {
                QuantFormat::Q8_0 if (b / blocks).is_multiple_of(2) => 0x7F, // +127
                QuantFormat::Q8_0 => 0x81,                                   // −127
                _ => 0xFF,
            };
            bytes.extend(std::iter::repeat_n(q, format.quant_bytes()));
        }
        let m = QuantMatrix::from_ggml_bytes(format, out_dim, blocks * QK, &bytes).unwrap();
        for rows in [1, 3, 8, 9] {
            let x: Vec<f32> = (0..rows * blocks * QK)
                .map(|i| {
                    if (i / (blocks * QK)).is_multiple_of(2) {
                        3.0
                    } else {
                        -3.0
                    }
                })
                .collect();
            let reference = m.matmul_with(&x, Isa::Portable);
            // 32 products of 15 (or 127) by 127 per block, times d_w · d_a, summed.
            let top = reference.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            assert!(top > 100.0, "{format:?}: the sums must be large, got {top}");
            for isa in Isa::available() {
                assert_eq!(
                    m.matmul_with(&x, isa),
                    reference,
                    "{format:?} {isa:?} rows {rows}"
                );
            }
        }
    }
}

#[test]
fn f32_weights_quantize_to_q8_0_within_half_a_step() {
    let (out_dim, in_dim) = (5, 96);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut w: Vec<f32> = (0..out_dim * in_dim)
        .map(|_| rng.random_range(-2.0f32..2.0))
        .collect();
    w[..QK].fill(0.0); // a zero block stays zero (no NaN scale)
    let m = QuantMatrix::q8_0_from_f32(out_dim, in_dim, &w).unwrap();
    assert_eq!(m.format(), QuantFormat::Q8_0);
    for r in 0..out_dim {
        let got = m.dequantize_row(r);
        let row = &w[r * in_dim..][..in_dim];
        for (b, (g, x)) in got.chunks(QK).zip(row.chunks(QK)).enumerate() {
            let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            // Half a step, plus the f16 rounding of the scale (relative 2^-11, times 127).
            let bound = amax / 254.0 + amax * 127.0 / 127.0 / 2048.0;
            for (g, x) in g.iter().zip(x) {
                assert!((g - x).abs() <= bound, "row {r} block {b}: {g} vs {x}");
            }
        }
    }
    assert!(
        QuantMatrix::q8_0_from_f32(1, 48, &[0.0; 48]).is_err(),
        "48: not whole blocks"
    );
    assert!(
        QuantMatrix::q8_0_from_f32(2, 32, &[0.0; 32]).is_err(),
        "wrong length"
    );
}
