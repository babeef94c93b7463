//! AVX-512 VNNI tiles: two activation rows per 512-bit register.
//!
//! The 256-bit kernels give each activation row its own register and redo the scale, the
//! convert and the fused multiply-add per row. Here one zmm holds the same weight block twice
//! and the block of two rows side by side, so each instruction serves two rows. Each row's
//! eight f32 lanes still see exactly the sequence of fused multiply-adds the 256-bit kernel
//! applies (same lanes of four products, same block order), so the bits are the same.
//!
//! Activations come re-laid out as [`PairedRows`]: per block, the quantized values of every
//! pair of rows contiguous, and the scales and sums of every row contiguous.

use crate::dot::{hsum8, WeightRow};
use crate::quantize::{Q8Batch, QK};

/// Rows per tile, at most (four pairs).
pub const TILE_ROWS: usize = 8;

/// Activation rows regrouped for the paired kernels; odd row counts get a zero row.
#[derive(Debug, Clone, Default)]
pub struct PairedRows {
    pub rows: usize, // padded to even
    pub qs: Vec<i8>, // [blocks][rows / 2][64]: row 2p's block, then row 2p + 1's
    pub d: Vec<f32>, // [blocks][rows] (+ TILE_ROWS of padding)
    pub s: Vec<f32>, // [blocks][rows] (+ TILE_ROWS of padding)
}

impl PairedRows {
    pub fn from_batch(a: &Q8Batch) -> Self {
        let rows = a.rows + a.rows % 2;
        let nb = a.blocks;
        let mut out = PairedRows {
            rows,
            qs: vec![0; nb * rows * QK],
            d: vec![0.0; nb * rows + TILE_ROWS],
            s: vec![0.0; nb * rows + TILE_ROWS],
        };
        for r in 0..a.rows {
            for b in 0..nb {
                let src = r * nb + b;
                let dst = (b * rows + r) * QK; // pairs are adjacent rows
                out.qs[dst..dst + QK].copy_from_slice(&a.qs[src * QK..(src + 1) * QK]);
                out.d[b * rows + r] = a.d[src];
                out.s[b * rows + r] = a.s[src];
            }
        }
        out
    }
}

/// Finish a tile: each row's eight lanes summed in ggml's order, plus its min term.
#[inline(always)]
fn store_rows(lanes: &[[f32; 16]], summs: &[f32; TILE_ROWS], out: &mut [f32]) {
    for (p, l) in lanes.iter().enumerate() {
        let lo: [f32; 8] = [l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7]];
        let hi: [f32; 8] = [l[8], l[9], l[10], l[11], l[12], l[13], l[14], l[15]];
        for (j, v) in [lo, hi].into_iter().enumerate() {
            if let Some(o) = out.get_mut(2 * p + j) {
                *o = hsum8(v) + summs[2 * p + j];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// Per-pair scales: lanes 0–7 take row 2p's product, lanes 8–15 row 2p + 1's.
    #[inline(always)]
    unsafe fn pair_scale(dd: __m512, p: usize) -> __m512 {
        let lo = 2 * p as i32;
        let idx = _mm512_set_epi32(
            lo + 1,
            lo + 1,
            lo + 1,
            lo + 1,
            lo + 1,
            lo + 1,
            lo + 1,
            lo + 1,
            lo,
            lo,
            lo,
            lo,
            lo,
            lo,
            lo,
            lo,
        );
        _mm512_permutexvar_ps(idx, dd)
    }

    /// Q4_1 weights × rows `2·p0 .. 2·(p0 + P)`; `out` takes the first `out.len()` of them.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VNNI; the slices must hold the blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub unsafe fn q4_1_pairs<const P: usize>(
        w: &WeightRow,
        a: &PairedRows,
        p0: usize,
        out: &mut [f32],
    ) {
        let nb = w.d.len();
        let low = _mm_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); P];
        let mut summs = _mm256_setzero_ps();
        for b in 0..nb {
            let packed = _mm_loadu_si128(w.qs.as_ptr().add(b * 16) as *const __m128i);
            let lo = _mm_and_si128(packed, low);
            let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
            let qx = _mm512_broadcast_i64x4(_mm256_set_m128i(hi, lo));
            let (wd, wm) = (*w.d.get_unchecked(b), *w.m.get_unchecked(b));
            let rows = a.d.as_ptr().add(b * a.rows + 2 * p0);
            let dd =
                _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(wd), _mm256_loadu_ps(rows)));
            let s = _mm256_loadu_ps(a.s.as_ptr().add(b * a.rows + 2 * p0));
            // ggml: summs += m · s, a multiply then an add per row.
            summs = _mm256_add_ps(summs, _mm256_mul_ps(_mm256_set1_ps(wm), s));
            let q = a.qs.as_ptr().add((b * a.rows / 2 + p0) * 2 * QK);
            for (p, acc) in acc.iter_mut().enumerate() {
                let qy = _mm512_loadu_si512(q.add(p * 2 * QK) as *const __m512i);
                let lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, qy);
                *acc = _mm512_fmadd_ps(pair_scale(dd, p), _mm512_cvtepi32_ps(lanes), *acc);
            }
        }
        finish::<P>(&acc, summs, out);
    }

    /// Q8_0 weights × rows `2·p0 .. 2·(p0 + P)`. VNNI multiplies unsigned by signed bytes:
    /// |w| times the row with w's sign moved onto it, the same products as ggml's sign trick.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VNNI; the slices must hold the blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub unsafe fn q8_0_pairs<const P: usize>(
        w: &WeightRow,
        a: &PairedRows,
        p0: usize,
        out: &mut [f32],
    ) {
        let nb = w.d.len();
        let mut acc = [_mm512_setzero_ps(); P];
        for b in 0..nb {
            let qx = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                w.qs.as_ptr().add(b * QK) as *const __m256i
            ));
            let ax = _mm512_abs_epi8(qx);
            let negative = _mm512_movepi8_mask(qx);
            let wd = *w.d.get_unchecked(b);
            let rows = a.d.as_ptr().add(b * a.rows + 2 * p0);
            let dd =
                _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(wd), _mm256_loadu_ps(rows)));
            let q = a.qs.as_ptr().add((b * a.rows / 2 + p0) * 2 * QK);
            for (p, acc) in acc.iter_mut().enumerate() {
                let qy = _mm512_loadu_si512(q.add(p * 2 * QK) as *const __m512i);
                let sy = _mm512_mask_sub_epi8(qy, negative, _mm512_setzero_si512(), qy);
                let lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy);
                *acc = _mm512_fmadd_ps(pair_scale(dd, p), _mm512_cvtepi32_ps(lanes), *acc);
            }
        }
        finish::<P>(&acc, _mm256_setzero_ps(), out);
    }

    #[inline(always)]
    unsafe fn finish<const P: usize>(acc: &[__m512; P], summs: __m256, out: &mut [f32]) {
        let mut lanes = [[0.0f32; 16]; P];
        for (l, a) in lanes.iter_mut().zip(acc) {
            _mm512_storeu_ps(l.as_mut_ptr(), *a);
        }
        let mut s = [0.0f32; TILE_ROWS];
        _mm256_storeu_ps(s.as_mut_ptr(), summs);
        store_rows(&lanes, &s, out);
    }
}
