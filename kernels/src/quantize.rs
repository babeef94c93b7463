//! 8-bit activation quantization, bit-for-bit as ggml's x86 `quantize_row_q8_0` / `q8_1`:
//! per block of 32, d = amax / 127 (stored as f16), values scaled by 127 / amax and rounded
//! half to even; q8_1 also keeps s = f16(d · Σq) for the min term of Q4_1 weights.
//!
//! candle quantizes with 1 / d and round-half-away, and computes s in f16 arithmetic; those
//! differences move this model's logits by a median of about 0.2 against llama.cpp.

use half::f16;

pub const QK: usize = 32;

/// One activation row in blocks of 32: scales and sums as f32 (already f16-rounded).
#[derive(Debug, Clone, Default)]
pub struct Q8Row {
    pub d: Vec<f32>, // [blocks]
    pub s: Vec<f32>, // [blocks]
    pub qs: Vec<i8>, // [blocks * 32]
}

/// Quantize `x` (length a multiple of 32) into `out`, reusing its buffers.
pub fn quantize_row_q8(x: &[f32], out: &mut Q8Row) {
    let nb = x.len() / QK;
    out.d.clear();
    out.s.clear();
    out.qs.clear();
    for block in x.chunks_exact(QK).take(nb) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_ggml_rounding() {
        let mut x = vec![0.0f32; 32];
        x[0] = 127.0; // amax: scale 1
        x[1] = 2.5; // half to even: 2
        x[2] = 3.5; // half to even: 4
        x[3] = -2.5;
        let mut q = Q8Row::default();
        quantize_row_q8(&x, &mut q);
        assert_eq!(&q.qs[..4], &[127, 2, 4, -2]);
        assert_eq!(q.d, vec![1.0]);
        assert_eq!(q.s, vec![131.0]);
        quantize_row_q8(&[0.0; 32], &mut q);
        assert_eq!((q.d[0], q.qs.iter().all(|&v| v == 0)), (0.0, true));
    }
}
