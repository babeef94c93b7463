//! ggml's K-quant super-blocks (256 weights) rewritten as the 32-weight blocks the kernels
//! read, without changing any weight's value:
//! - Q4_K: eight sub-blocks of 32 nibbles with 6-bit scales and mins become Q4_1 blocks with
//!   d = d_super·sc and m = −dmin·min (both products exact in f32: 11 × 6 bits);
//! - Q6_K: sixteen sub-blocks of 16 six-bit values with i8 scales become 32-weight blocks of
//!   the unsigned 6-bit values (0..63, the offset of 32 left for the kernel) with one scale per
//!   half, d_super·sc (exact in f32: 11 × 8 bits);
//! - Q5_K: as Q4_K with a fifth bit per weight from `qh`: 32-weight blocks of the values
//!   0..31 as bytes with d = d_super·sc and m = −dmin·min.

use half::f16;

use crate::packed::Canonical;
use crate::quantize::QK;

pub const QK_K: usize = 256;
pub const Q4_K_BYTES: usize = 144;
pub const Q6_K_BYTES: usize = 210;
pub const Q5_K_BYTES: usize = 176;

fn half(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// ggml's `get_scale_min_k4`: sub-block j's 6-bit scale and min.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K super-blocks → Q4_1 blocks (16 bytes: byte i holds weights i and i + 16).
pub fn q4_k_as_q4_1(bytes: &[u8]) -> Canonical {
    let mut c = Canonical::default();
    for sb in bytes.chunks_exact(Q4_K_BYTES) {
        let (d, dmin) = (half(&sb[0..2]), half(&sb[2..4]));
        let (scales, qs) = (&sb[4..16], &sb[16..144]);
        for j in 0..QK_K / QK {
            let (sc, m) = scale_min_k4(j, scales);
            c.d.push(d * sc as f32);
            c.m.push(-(dmin * m as f32));
            // Sub-block 2i is the low nibbles of bytes 32i.., sub-block 2i + 1 the high ones.
            let src = &qs[32 * (j / 2)..][..32];
            let nib = |l: usize| {
                if j % 2 == 0 {
                    src[l] & 0xF
                } else {
                    src[l] >> 4
                }
            };
            c.qs.extend((0..16).map(|i| nib(i) | (nib(i + 16) << 4)));
        }
    }
    c
}

/// Q5_K super-blocks → 32-weight blocks of bytes 0..31 with d and m (ggml's
/// `dequantize_row_q5_K`: sub-block j's low four bits are the low (j even) or high nibbles
/// of `qs[32 (j / 2)..]`, its fifth bit is bit j of `qh[l]`).
pub fn q5_k_as_bytes(bytes: &[u8]) -> Canonical {
    let mut c = Canonical::default();
    for sb in bytes.chunks_exact(Q5_K_BYTES) {
        let (d, dmin) = (half(&sb[0..2]), half(&sb[2..4]));
        let (scales, qh, qs) = (&sb[4..16], &sb[16..48], &sb[48..176]);
        for j in 0..QK_K / QK {
            let (sc, m) = scale_min_k4(j, scales);
            c.d.push(d * sc as f32);
            c.m.push(-(dmin * m as f32));
            let src = &qs[32 * (j / 2)..][..32];
            c.qs.extend((0..QK).map(|l| {
                let low = if j % 2 == 0 {
                    src[l] & 0xF
                } else {
                    src[l] >> 4
                };
                low | (((qh[l] >> j) & 1) << 4)
            }));
        }
    }
    c
}

/// Q6_K super-blocks → 32-weight blocks of unsigned 6-bit values, two scales each.
pub fn q6_k_as_halves(bytes: &[u8]) -> Canonical {
    let mut c = Canonical::default();
    for sb in bytes.chunks_exact(Q6_K_BYTES) {
        let (ql, qh, sc, d) = (
            &sb[..128],
            &sb[128..192],
            &sb[192..208],
            half(&sb[208..210]),
        );
        for j in 0..QK_K / QK {
            // Block j is quarter j % 4 of 128-weight chunk j / 4 (ggml's dequantize_row_q6_K).
            let (n, quarter) = (j / 4, j % 4);
            let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
            for l in 0..QK {
                let low = match quarter {
                    0 => ql[l] & 0xF,
                    1 => ql[l + 32] & 0xF,
                    2 => ql[l] >> 4,
                    _ => ql[l + 32] >> 4,
                };
                c.qs.push(low | (((qh[l] >> (2 * quarter)) & 3) << 4));
            }
            for is in 0..2 {
                c.d.push(d * (sc[is + 2 * quarter] as i8) as f32);
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's dequantize_row_q4_K / q6_K, transcribed.
    fn ggml_q4_k(sb: &[u8]) -> Vec<f32> {
        let (d, min) = (half(&sb[0..2]), half(&sb[2..4]));
        let mut y = Vec::new();
        let mut q = &sb[16..];
        let mut is = 0;
        for _ in (0..QK_K).step_by(64) {
            let (sc, m) = scale_min_k4(is, &sb[4..16]);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = scale_min_k4(is + 1, &sb[4..16]);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            y.extend((0..32).map(|l| d1 * (q[l] & 0xF) as f32 - m1));
            y.extend((0..32).map(|l| d2 * (q[l] >> 4) as f32 - m2));
            q = &q[32..];
            is += 2;
        }
        y
    }

    fn ggml_q5_k(sb: &[u8]) -> Vec<f32> {
        let (d, min) = (half(&sb[0..2]), half(&sb[2..4]));
        let (qh, mut ql) = (&sb[16..48], &sb[48..]);
        let mut y = Vec::new();
        let (mut is, mut u1, mut u2) = (0, 1u8, 2u8);
        for _ in (0..QK_K).step_by(64) {
            let (sc, m) = scale_min_k4(is, &sb[4..16]);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = scale_min_k4(is + 1, &sb[4..16]);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            let hi = |l: usize, u: u8| if qh[l] & u != 0 { 16.0 } else { 0.0 };
            y.extend((0..32).map(|l| d1 * ((ql[l] & 0xF) as f32 + hi(l, u1)) - m1));
            y.extend((0..32).map(|l| d2 * ((ql[l] >> 4) as f32 + hi(l, u2)) - m2));
            ql = &ql[32..];
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
        y
    }

    fn ggml_q6_k(sb: &[u8]) -> Vec<f32> {
        let d = half(&sb[208..210]);
        let mut y = vec![0.0f32; QK_K];
        for n in 0..2 {
            let (ql, qh, sc) = (&sb[64 * n..], &sb[128 + 32 * n..], &sb[192 + 8 * n..]);
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                let s = |k: usize| d * (sc[is + k] as i8) as f32;
                y[128 * n + l] = s(0) * q1 as f32;
                y[128 * n + l + 32] = s(2) * q2 as f32;
                y[128 * n + l + 64] = s(4) * q3 as f32;
                y[128 * n + l + 96] = s(6) * q4 as f32;
            }
        }
        y
    }

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                (x >> 24) as u8
            })
            .collect()
    }

    /// Super-blocks with sane f16 scales (random bytes there could be NaN).
    fn superblocks(kind_bytes: usize, count: usize, seed: u32) -> Vec<u8> {
        let mut b = bytes(kind_bytes * count, seed);
        for sb in b.chunks_exact_mut(kind_bytes) {
            let at = if kind_bytes == Q6_K_BYTES {
                [208, 208]
            } else {
                [0, 2]
            };
            for a in at {
                sb[a..a + 2].copy_from_slice(&f16::from_f32(0.0123).to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn q4_k_blocks_dequantize_to_ggml_values_exactly() {
        let raw = superblocks(Q4_K_BYTES, 3, 7);
        let c = q4_k_as_q4_1(&raw);
        for (s, sb) in raw.chunks_exact(Q4_K_BYTES).enumerate() {
            let want = ggml_q4_k(sb);
            for (j, w) in want.chunks(QK).enumerate() {
                let i = s * 8 + j;
                let q = &c.qs[i * 16..][..16];
                for l in 0..16 {
                    let (a, b) = ((q[l] & 0xF) as f32, (q[l] >> 4) as f32);
                    assert_eq!(c.d[i] * a + c.m[i], w[l], "sb {s} block {j} [{l}]");
                    assert_eq!(c.d[i] * b + c.m[i], w[l + 16], "sb {s} block {j} [{l}+16]");
                }
            }
        }
    }

    #[test]
    fn q5_k_blocks_dequantize_to_ggml_values_exactly() {
        let raw = superblocks(Q5_K_BYTES, 3, 8);
        let c = q5_k_as_bytes(&raw);
        for (s, sb) in raw.chunks_exact(Q5_K_BYTES).enumerate() {
            for (j, w) in ggml_q5_k(sb).chunks(QK).enumerate() {
                let i = s * 8 + j;
                for (l, &want) in w.iter().enumerate() {
                    let q = c.qs[i * QK + l];
                    assert!(q < 32);
                    assert_eq!(c.d[i] * q as f32 + c.m[i], want, "sb {s} block {j} [{l}]");
                }
            }
        }
    }

    #[test]
    fn q6_k_blocks_dequantize_to_ggml_values_exactly() {
        let raw = superblocks(Q6_K_BYTES, 3, 9);
        let c = q6_k_as_halves(&raw);
        for (s, sb) in raw.chunks_exact(Q6_K_BYTES).enumerate() {
            let want = ggml_q6_k(sb);
            for (j, w) in want.chunks(QK).enumerate() {
                let i = s * 8 + j;
                for (l, &want) in w.iter().enumerate() {
                    let v = c.d[2 * i + l / 16] * (c.qs[i * QK + l] as i32 - 32) as f32;
                    assert_eq!(v, want, "sb {s} block {j} [{l}]");
                }
            }
        }
    }
}
