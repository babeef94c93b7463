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
    pub d: Vec<f32>,      // [rows * blocks]
    pub s: Vec<f32>,      // [rows * blocks]
    pub sums16: Vec<i32>, // [rows * blocks * 2]: Σq of each half (Q6_K's scales are per 16)
    pub qs: Vec<i8>,      // [rows * blocks * 32]
}

impl Q8Batch {
    /// Size the buffers for `len` values in rows of `dim`; returns the rows.
    fn resize_for(&mut self, len: usize, dim: usize) -> usize {
        let rows = len / dim;
        let blocks = dim / QK;
        (self.rows, self.blocks) = (rows, blocks);
        let n = rows * blocks;
        self.d.resize(n, 0.0);
        self.s.resize(n, 0.0);
        self.sums16.resize(2 * n, 0);
        self.qs.resize(n * QK, 0);
        rows
    }

    /// Σq of block `i` (formats with an offset take it out).
    #[inline(always)]
    pub fn sum(&self, i: usize) -> i32 {
        self.sums16[2 * i] + self.sums16[2 * i + 1]
    }
}

/// Quantize `xs`: [rows, dim] with `dim` a multiple of 32.
pub fn quantize_rows(xs: &[f32], dim: usize) -> Q8Batch {
    quantize_rows_with(xs, dim, crate::avx2())
}

/// [`quantize_rows`] with the SIMD path chosen by the caller (tests compare both); asked
/// for on a CPU without it, the portable path runs.
pub fn quantize_rows_with(xs: &[f32], dim: usize, simd: bool) -> Q8Batch {
    let mut out = Q8Batch::default();
    quantize_rows_into(xs, dim, simd, &mut out);
    out
}

/// [`quantize_rows_with`] into `out`, reusing its buffers (no allocation once they are large
/// enough).
pub fn quantize_rows_into(xs: &[f32], dim: usize, simd: bool, out: &mut Q8Batch) {
    let rows = out.resize_for(xs.len(), dim);
    let xs = &xs[..rows * dim];
    #[cfg(target_arch = "x86_64")]
    if simd && crate::cpu_has_avx2() {
        // SAFETY: the CPU has AVX2 and F16C (checked); the buffers were sized above for `n`
        // blocks.
        unsafe { x86::quantize_blocks(xs, out) };
        return;
    }
    let _ = simd;
    let each = xs
        .chunks_exact(QK)
        .zip(out.qs.chunks_exact_mut(QK))
        .zip(out.d.iter_mut().zip(&mut out.s))
        .zip(out.sums16.chunks_exact_mut(2));
    for (((block, qs), (d_out, s_out)), halves) in each {
        let (amax, first, sum) = quantize_block(block, qs);
        let d = amax / 127.0;
        *d_out = f16::from_f32(d).to_f32();
        *s_out = f16::from_f32(d * sum as f32).to_f32();
        halves.copy_from_slice(&[first, sum - first]);
    }
}

/// Quantize `xs`: [rows, dim] (`dim` a multiple of 256) as ggml's `quantize_row_q8_K` does
/// for K-quant weights: one f32 scale per 256 values, d = −max / 127 where max is the value
/// of largest magnitude (the first, on ties), values round(x / d) half to even, capped at
/// 127. Each 32-block of `out` carries its super-block's d; `s` = d · Σq in f32; `sums16`
/// are ggml's `bsums`.
pub fn quantize_rows_k_into(xs: &[f32], dim: usize, out: &mut Q8Batch) {
    const QK_K: usize = 256;
    let rows = out.resize_for(xs.len(), dim);
    for (sb, (x, qs)) in xs[..rows * dim]
        .chunks_exact(QK_K)
        .zip(out.qs.chunks_exact_mut(QK_K))
        .enumerate()
    {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                (amax, max) = (v.abs(), v);
            }
        }
        let iscale = if amax == 0.0 { 0.0 } else { -127.0 / max };
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        let d = if amax == 0.0 { 0.0 } else { 1.0 / iscale };
        for b in 0..QK_K / QK {
            let i = sb * (QK_K / QK) + b;
            let q = &qs[b * QK..][..QK];
            let first: i32 = q[..QK / 2].iter().map(|&v| v as i32).sum();
            let sum: i32 = first + q[QK / 2..].iter().map(|&v| v as i32).sum::<i32>();
            out.d[i] = d;
            out.s[i] = d * sum as f32;
            out.sums16[2 * i] = first;
            out.sums16[2 * i + 1] = sum - first;
        }
    }
}

/// ggml's `nearest_int`: round half to even by adding 1.5·2²³ (exact for |x| < 2²²), which
/// compiles to plain float adds where `round_ties_even` is a libm call on baseline x86-64
/// (it was 70% of a Q4_K matmul's time at 8 rows).
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// One block: the quantized values into `qs`; returns (amax, Σq of the first 16, Σq).
fn quantize_block(block: &[f32], qs: &mut [i8]) -> (f32, i32, i32) {
    let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let (mut first, mut sum) = (0i32, 0i32);
    for (i, (q, &v)) in qs.iter_mut().zip(block).enumerate() {
        let r = (v * id).round_ties_even() as i32;
        sum += r;
        if i < QK / 2 {
            first += r;
        }
        *q = r as i8;
    }
    (amax, first, sum)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Q8Batch, QK};
    use std::arch::x86_64::*;

    /// Every block of `xs` into `out` (sized for them), in one function so the block code
    /// and the f16 roundings (F16C, round to nearest even as `half` does) inline: through a
    /// call per block and per rounding it cost 10.7 ns a block.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn quantize_blocks(xs: &[f32], out: &mut Q8Batch) {
        let round = |x: f32| {
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
            _mm_cvtss_f32(_mm_cvtph_ps(h))
        };
        for (i, (block, qs)) in xs
            .chunks_exact(QK)
            .zip(out.qs.chunks_exact_mut(QK))
            .enumerate()
        {
            let (amax, first, sum) = quantize_block(block, qs);
            let d = amax / 127.0;
            out.d[i] = round(d);
            out.s[i] = round(d * sum as f32);
            out.sums16[2 * i] = first;
            out.sums16[2 * i + 1] = sum - first;
        }
    }

    /// ggml's AVX2 `quantize_row_q8_1` for one block; the same bits as `quantize_block`
    /// (max is exact in any order; the product, rounding and sum are per element). Inlined
    /// into [`quantize_blocks`], whose features it runs under.
    #[inline(always)]
    unsafe fn quantize_block(block: &[f32], qs: &mut [i8]) -> (f32, i32, i32) {
        let sign = _mm256_set1_ps(-0.0);
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(block.as_ptr().add(8 * i)));
        let abs = |x| _mm256_andnot_ps(sign, x);
        let m = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q: [__m256i; 4] = std::array::from_fn(|i| {
            let r = _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT);
            _mm256_cvtps_epi32(r)
        });
        let hsum = |s: __m256i| {
            let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)))
        };
        // Integer sums: exact in any order. Values 0..16 are q[0] and q[1].
        let first = hsum(_mm256_add_epi32(q[0], q[1]));
        let sum = first + hsum(_mm256_add_epi32(q[2], q[3]));
        // Pack i32 → i16 → i8 (saturation cannot bite: |q| ≤ 127), then undo the lane
        // interleave of the 256-bit packs.
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_packs_epi16(p16a, p16b);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let p8 = _mm256_permutevar8x32_epi32(p8, order);
        _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, p8);
        (amax, first, sum)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nearest_int_rounds_half_to_even() {
        for x in [
            -127.0f32, -2.5, -1.5, -0.5, 0.0, 0.49, 0.5, 1.5, 2.5, 63.5, 126.7, 127.0,
        ] {
            assert_eq!(nearest_int(x), x.round_ties_even() as i32, "{x}");
        }
    }

    #[test]
    fn q8_k_takes_the_signed_largest_value_per_256_as_ggml_does() {
        let mut x = vec![0.0f32; 512];
        x[3] = -2.0; // the first of two values of largest magnitude
        x[9] = 2.0;
        x[10] = 1.0;
        x[100] = 0.5 * (2.0 / 127.0); // exactly half a step: rounds to even (0)
                                      // The second super-block is all zeros.
        let mut out = Q8Batch::default();
        quantize_rows_k_into(&x, 512, &mut out);
        assert_eq!((out.rows, out.blocks), (1, 16));
        // max = −2 (first by |x|), iscale = −127 / max = 63.5, d = 1 / 63.5 for 8 blocks.
        assert_eq!(out.d[0], 1.0 / (-127.0f32 / -2.0));
        assert!(out.d[..8].iter().all(|&d| d == out.d[0]) && out.d[8..].iter().all(|&d| d == 0.0));
        assert_eq!(&out.qs[..4], &[0, 0, 0, -127]);
        // 63.5 and 0.5 round half to even: 64 and 0.
        assert_eq!((out.qs[9], out.qs[10], out.qs[100]), (127, 64, 0));
        assert_eq!(out.sums16[0], 64, "−127 + 127 + 64");
        assert!(out.qs[256..].iter().all(|&q| q == 0));
    }

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

    #[test]
    fn simd_equals_scalar_on_random_and_adversarial_blocks() {
        let mut x: Vec<f32> = (0..32 * 64)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
            .collect();
        x[32..64].fill(0.0); // a zero block
        x[64..96]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as f32 + 0.5); // ties
        x[96..128].fill(-1e-30); // tiny
        x[128] = 3.0e38; // huge
                         // Scales f16 cannot hold as they are: subnormal, past its largest (infinite), and
                         // exactly halfway between two f16 values (1 + 2^-11: rounds to even, 1.0).
        x[160..192].iter_mut().for_each(|v| *v *= 1e-5);
        x[192] = 1.0e7;
        x[224] = 127.0 * (1.0 + 1.0 / 2048.0);
        x[225..256].fill(0.5);
        let (a, b) = (
            quantize_rows_with(&x, 256, false),
            quantize_rows_with(&x, 256, true),
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!((bits(&a.d), bits(&a.s)), (bits(&b.d), bits(&b.s)));
        assert_eq!((a.qs, a.sums16), (b.qs, b.sums16));
        assert!(
            a.d[5] > 0.0 && a.d[5] < 6.2e-5,
            "subnormal scale: {}",
            a.d[5]
        );
        assert_eq!(a.d[6], f32::INFINITY);
        assert_eq!(a.d[7], 1.0, "a tie rounds to even");
    }
}
