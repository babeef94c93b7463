//! ggml's Q5_0 blocks (f16 d, 32 fifth bits, 16 bytes of nibbles; w = d·(q − 16)) rewritten
//! at load as the Q8_0 blocks the kernels read: the same d and each weight's value less 16
//! as an i8. ggml's `vec_dot_q5_0_q8_0` takes the same integer sums and the same scale
//! products, so the arithmetic is unchanged; the price is 34 bytes per 32 weights instead
//! of 22.

use half::f16;

use crate::packed::Canonical;
use crate::quantize::QK;

pub const Q5_0_BYTES: usize = 22;

/// Q5_0 blocks → Q8_0 blocks: the same d, each weight's 5-bit value less 16 as an i8
/// (ggml's `dequantize_row_q5_0`: weight j's fifth bit is bit j of `qh`, weight j + 16's bit
/// j + 16; the low nibbles hold weights 0..16, the high ones 16..32).
pub fn q5_0_as_q8_0(bytes: &[u8]) -> Canonical {
    let mut c = Canonical::default();
    for blk in bytes.chunks_exact(Q5_0_BYTES) {
        c.d.push(f16::from_le_bytes([blk[0], blk[1]]).to_f32());
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let qs = &blk[6..22];
        let value = |j: usize| {
            let (nib, bit) = if j < 16 {
                (qs[j] & 0xF, (qh >> j) & 1)
            } else {
                (qs[j - 16] >> 4, (qh >> j) & 1)
            };
            ((nib as u32 | (bit << 4)) as i32 - 16) as i8 as u8
        };
        c.qs.extend((0..QK).map(value));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's dequantize_row_q5_0, transcribed.
    fn ggml_q5_0(blk: &[u8]) -> Vec<f32> {
        let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let mut y = vec![0.0f32; QK];
        for j in 0..QK / 2 {
            let xh_0 = ((qh >> j) << 4) & 0x10;
            let xh_1 = (qh >> (j + 12)) & 0x10;
            let x0 = ((blk[6 + j] as u32 & 0x0F) | xh_0) as i32 - 16;
            let x1 = ((blk[6 + j] as u32 >> 4) | xh_1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
        y
    }

    #[test]
    fn q5_0_blocks_dequantize_to_ggml_values_exactly() {
        let mut x = 12345u32;
        let mut raw: Vec<u8> = (0..Q5_0_BYTES * 9)
            .map(|_| {
                x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                (x >> 24) as u8
            })
            .collect();
        for (i, blk) in raw.chunks_exact_mut(Q5_0_BYTES).enumerate() {
            let d = [0.0123, -3.5, 0.0][i % 3];
            blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            if i == 4 {
                blk[2..].fill(0xFF); // every value 31
            }
        }
        let c = q5_0_as_q8_0(&raw);
        for (b, blk) in raw.chunks_exact(Q5_0_BYTES).enumerate() {
            let want = ggml_q5_0(blk);
            for (j, &w) in want.iter().enumerate() {
                let got = c.d[b] * (c.qs[b * QK + j] as i8) as f32;
                assert_eq!(got, w, "block {b} [{j}]");
            }
        }
    }
}
