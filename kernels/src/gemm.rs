//! One interleaved group of 16 output features times a tile of activation rows.
//!
//! The arithmetic, identical on every path (so batched rows and single rows, and every
//! instruction set, give the same bits): per block, the exact integer dot of the 32 weights
//! with the row's 8-bit activations (4-bit formats: their offset of 8 taken out as 8·Σa;
//! Q8_0 on AVX-512: w + 128 as unsigned bytes, then 128·Σa taken out), then
//! `acc = fma(d_w · d_a, isum, acc)` in block order; Q4_1 adds its min term
//! `ms = fma(m_w, s_a, ms)` once at the end. Q6_K blocks (unsigned 6-bit values, a scale per
//! half) do the same per half, taking out 32·Σa of that half.

use crate::packed::{GroupView, QuantFormat, Scales, GROUP};
use crate::quantize::{Q8Batch, QK};

/// Format tags for the const-generic kernels.
pub const Q4_0: u8 = 0;
pub const Q4_1: u8 = 1;
pub const Q8_0: u8 = 2;
pub const Q6_K: u8 = 3;
/// Q5_K in the kernel layout: 32 unsigned 5-bit values a block as bytes, d and a min.
pub const Q5_K: u8 = 4;

/// Formats whose weights are stored as whole unsigned bytes (no nibbles, no sign).
pub const fn unsigned_bytes(f: u8) -> bool {
    f == Q6_K || f == Q5_K
}

/// Formats with a min term (w = d·q + m), which takes the activations' block sums.
pub const fn has_min(f: u8) -> bool {
    f == Q4_1 || f == Q5_K
}

pub fn format_tag(format: QuantFormat) -> u8 {
    match format {
        QuantFormat::Q4_0 => Q4_0,
        QuantFormat::Q4_1 => Q4_1,
        QuantFormat::Q8_0 => Q8_0,
        QuantFormat::Q6K => Q6_K,
        QuantFormat::Q5K => Q5_K,
        QuantFormat::Q4K | QuantFormat::Q5_0 => format_tag(format.kernel()),
    }
}

/// Segments of 4 bytes per feature in a block of format `F`.
const fn segments(f: u8) -> usize {
    if f == Q8_0 || unsigned_bytes(f) {
        8
    } else {
        4
    }
}

/// The integer dot of weight feature `lane` of block `b` with activation block `y`, over
/// segments `segs` (4-bit formats: each segment's low and high nibbles).
fn block_dot<const F: u8>(
    g: &GroupView,
    b: usize,
    lane: usize,
    y: &[i8],
    segs: std::ops::Range<usize>,
) -> i32 {
    let mut isum = 0i32;
    for s in segs {
        let w = &g.qs[(b * segments(F) + s) * GROUP * 4 + lane * 4..][..4];
        for (k, &byte) in w.iter().enumerate() {
            isum += match F {
                Q8_0 => (byte as i8) as i32 * y[4 * s + k] as i32,
                Q6_K | Q5_K => byte as i32 * y[4 * s + k] as i32,
                _ => {
                    (byte & 15) as i32 * y[4 * s + k] as i32
                        + (byte >> 4) as i32 * y[16 + 4 * s + k] as i32
                }
            };
        }
    }
    isum
}

/// The reference kernel: rows `r0..r0 + out.len()`.
pub fn portable<const F: u8>(g: &GroupView, a: &Q8Batch, r0: usize, out: &mut [[f32; GROUP]]) {
    let nb = a.blocks;
    for (t, o) in out.iter_mut().enumerate() {
        let mut acc = [0.0f32; GROUP];
        let mut ms = [0.0f32; GROUP];
        for b in 0..nb {
            let i = (r0 + t) * nb + b;
            let y = &a.qs[i * QK..][..QK];
            for lane in 0..GROUP {
                if F == Q6_K {
                    for h in 0..2 {
                        let dot = block_dot::<F>(g, b, lane, y, 4 * h..4 * h + 4);
                        let isum = dot - 32 * a.sums16[2 * i + h];
                        let dd = g.d.get((2 * b + h) * GROUP + lane) * a.d[i];
                        acc[lane] = dd.mul_add(isum as f32, acc[lane]);
                    }
                    continue;
                }
                let mut isum = block_dot::<F>(g, b, lane, y, 0..segments(F));
                if F == Q4_0 {
                    isum -= 8 * a.sum(i);
                }
                let dd = g.d.get(b * GROUP + lane) * a.d[i];
                acc[lane] = dd.mul_add(isum as f32, acc[lane]);
                if has_min(F) {
                    ms[lane] = g.m.get(b * GROUP + lane).mul_add(a.s[i], ms[lane]);
                }
            }
        }
        for lane in 0..GROUP {
            o[lane] = if has_min(F) {
                acc[lane] + ms[lane]
            } else {
                acc[lane]
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub mod x86;
#[cfg(target_arch = "x86_64")]
pub mod x86_256;

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::x86_256::*;
    use super::*;
    use crate::packed::{Canonical, Packed};
    use crate::quantize::quantize_rows;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// One group of random weights (every lane used) in `format`, over `blocks` blocks.
    fn group(format: QuantFormat, blocks: usize, rng: &mut ChaCha8Rng) -> Packed {
        let n = GROUP * blocks;
        let c = Canonical {
            d: (0..n * format.scales())
                .map(|_| rng.random_range(-0.1f32..0.1))
                .collect(),
            m: match format {
                QuantFormat::Q4_1 | QuantFormat::Q5K => {
                    (0..n).map(|_| rng.random_range(-1f32..1.0)).collect()
                }
                _ => vec![],
            },
            qs: (0..n * format.quant_bytes())
                .map(|_| {
                    let b: u8 = rng.random();
                    match format {
                        QuantFormat::Q6K => b & 63,
                        QuantFormat::Q5K => b & 31,
                        _ => b,
                    }
                })
                .collect(),
        };
        Packed::pack(format, GROUP, blocks, &c)
    }

    #[test]
    fn the_avx_vnni_kernel_equals_the_portable_one() {
        if !(is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("avx512vnni")) {
            eprintln!("skipped: no AVX-512 VNNI here to stand in for AVX-VNNI");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let blocks = 6;
        let formats = [
            QuantFormat::Q4_0,
            QuantFormat::Q4_1,
            QuantFormat::Q8_0,
            QuantFormat::Q6K,
            QuantFormat::Q5K,
        ];
        for format in formats {
            let packed = group(format, blocks, &mut rng);
            let g = packed.group(0);
            let xs: Vec<f32> = (0..8 * blocks * QK)
                .map(|_| rng.random_range(-3f32..3.0))
                .collect();
            let a = quantize_rows(&xs, blocks * QK);
            macro_rules! check {
                ($f:expr, $r:literal) => {{
                    let mut want = vec![[0.0f32; GROUP]; $r];
                    let mut got = vec![[0.0f32; GROUP]; $r];
                    portable::<$f>(&g, &a, 8 - $r, &mut want);
                    // SAFETY: AVX-512 VL/VNNI checked above (AVX2 and FMA come with them
                    // on every such CPU); `g` and `a` hold `blocks` blocks and 8 rows.
                    unsafe { tile_vnni_evex::<$f, $r>(&g, &a, 8 - $r, &mut got) };
                    assert_eq!(got, want, "{format:?}, {} rows", $r);
                }};
            }
            match format_tag(format) {
                Q4_0 => (check!(Q4_0, 1), check!(Q4_0, 3), check!(Q4_0, 8)),
                Q4_1 => (check!(Q4_1, 1), check!(Q4_1, 3), check!(Q4_1, 8)),
                Q6_K => (check!(Q6_K, 1), check!(Q6_K, 3), check!(Q6_K, 8)),
                Q5_K => (check!(Q5_K, 1), check!(Q5_K, 3), check!(Q5_K, 8)),
                _ => (check!(Q8_0, 1), check!(Q8_0, 3), check!(Q8_0, 8)),
            };
        }
    }
}
