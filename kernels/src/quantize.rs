//! 8-bit activation quantization, bit-for-bit as ggml's x86 `quantize_row_q8_0` / `q8_1`:
//! per block of 32, d = amax / 127 (stored as f16), values scaled by 127 / amax and rounded
//! half to even; q8_1 also keeps s = f16(d · Σq) for the min term of Q4_1 weights.
//!
//! candle quantizes with 1 / d and round-half-away, and computes s in f16 arithmetic; those
//! differences move this model's logits by a median of about 0.2 against llama.cpp.

use half::f16;

pub const QK: usize = 32;

/// Activation rows in blocks of 32: row r's blocks are `r * blocks .. (r + 1) * blocks`.
/// Scales and sums are f32 values already rounded through f16, as ggml stores them.
#[derive(Debug, Clone, Default)]
pub struct Q8Batch {
    pub rows: usize,
    pub blocks: usize,
    pub d: Vec<f32>, // [rows * blocks]
    pub s: Vec<f32>, // [rows * blocks]
    pub qs: Vec<i8>, // [rows * blocks * 32]
}

/// Quantize `xs`: [rows, dim] with `dim` a multiple of 32.
pub fn quantize_rows(xs: &[f32], dim: usize) -> Q8Batch {
    let rows = xs.len() / dim;
    let blocks = dim / QK;
    let mut out = Q8Batch {
        rows,
        blocks,
        d: Vec::with_capacity(rows * blocks),
        s: Vec::with_capacity(rows * blocks),
        qs: Vec::with_capacity(rows * dim),
    };
    for block in xs[..rows * dim].chunks_exact(QK) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for &v in block {
            let q = (v * id).round_ties_even() as i32;
            sum += q;
            out.qs.push(q as i8);
        }
        out.d.push(f16::from_f32(d).to_f32());
        out.s.push(f16::from_f32(d * sum as f32).to_f32());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_ggml_rounding() {
        let mut x = vec![0.0f32; 64];
        x[0] = 127.0; // amax: scale 1
        x[1] = 2.5; // half to even: 2
        x[2] = 3.5; // half to even: 4
        x[3] = -2.5;
        let q = quantize_rows(&x, 32);
        assert_eq!((q.rows, q.blocks), (2, 1));
        assert_eq!(&q.qs[..4], &[127, 2, 4, -2]);
        assert_eq!(q.d, vec![1.0, 0.0], "an all-zero block has scale 0");
        assert_eq!(q.s, vec![131.0, 0.0]);
        assert!(q.qs[32..].iter().all(|&v| v == 0));
    }
}
