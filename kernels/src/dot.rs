//! Dot products of one quantized weight row with a tile of T activation rows.
//!
//! Per block the integer products go into eight lanes of four consecutive elements, each lane
//! folded into an f32 accumulator with one fused multiply-add, and the eight accumulators are
//! added pairwise at the end: ggml's order (`vec_dot_q4_1_q8_1`, `vec_dot_q8_0_q8_0`), so
//! every kernel here gives the same bits, and the same as llama.cpp. The weight block is
//! unpacked once per tile, not once per activation row.

use crate::quantize::{Q8Batch, QK};

/// One weight row's blocks.
pub struct WeightRow<'a> {
    pub d: &'a [f32],
    pub m: &'a [f32], // Q4_1 only
    pub qs: &'a [u8], // Q4_1: 16 bytes per block; Q8_0: 32 (i8)
}

/// ggml's `hsum_float_8`: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
#[inline(always)]
pub fn hsum8(a: [f32; 8]) -> f32 {
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// Portable Q4_1 tile: rows `r0..r0 + out.len()`.
pub fn q4_1_portable(w: &WeightRow, a: &Q8Batch, r0: usize, out: &mut [f32]) {
    let nb = w.d.len();
    for (t, o) in out.iter_mut().enumerate() {
        let r = (r0 + t) * nb;
        let mut acc = [0.0f32; 8];
        let mut summs = 0.0f32;
        for b in 0..nb {
            let q = &w.qs[b * 16..][..16];
            let y = &a.qs[(r + b) * QK..][..QK];
            let mut lane = [0i32; 8];
            for j in 0..16 {
                lane[j / 4] += (q[j] & 0xF) as i32 * y[j] as i32;
                lane[4 + j / 4] += (q[j] >> 4) as i32 * y[j + 16] as i32;
            }
            summs += w.m[b] * a.s[r + b];
            let dd = w.d[b] * a.d[r + b];
            for l in 0..8 {
                acc[l] = dd.mul_add(lane[l] as f32, acc[l]);
            }
        }
        *o = hsum8(acc) + summs;
    }
}

/// Portable Q8_0 tile.
pub fn q8_0_portable(w: &WeightRow, a: &Q8Batch, r0: usize, out: &mut [f32]) {
    let nb = w.d.len();
    for (t, o) in out.iter_mut().enumerate() {
        let r = (r0 + t) * nb;
        let mut acc = [0.0f32; 8];
        for b in 0..nb {
            let q = &w.qs[b * QK..][..QK];
            let y = &a.qs[(r + b) * QK..][..QK];
            let mut lane = [0i32; 8];
            for j in 0..QK {
                lane[j / 4] += (q[j] as i8) as i32 * y[j] as i32;
            }
            let dd = w.d[b] * a.d[r + b];
            for l in 0..8 {
                acc[l] = dd.mul_add(lane[l] as f32, acc[l]);
            }
        }
        *o = hsum8(acc);
    }
}

/// x86 tile kernels for one instruction set. `$lanes(qx_u8, qy_i8)` must return the eight
/// i32 sums of four consecutive byte products; no i16 saturation is possible on the
/// maddubs path (Q4_1 pairs reach 2·15·127, Q8_0 pairs with the sign trick 2·127·127).
#[cfg(target_arch = "x86_64")]
macro_rules! x86_tiles {
    ($features:literal, $q4:ident, $q8:ident, $lanes:expr) => {
        /// # Safety
        /// The CPU must support the target features; the slices must hold the blocks.
        #[target_feature(enable = $features)]
        pub unsafe fn $q4<const T: usize>(w: &WeightRow, a: &Q8Batch, r0: usize, out: &mut [f32]) {
            use std::arch::x86_64::*;
            let nb = w.d.len();
            let low = _mm_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); T];
            let mut summs = [0.0f32; T];
            for b in 0..nb {
                let packed = _mm_loadu_si128(w.qs.as_ptr().add(b * 16) as *const __m128i);
                let lo = _mm_and_si128(packed, low);
                let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
                let qx = _mm256_set_m128i(hi, lo);
                let (wd, wm) = (*w.d.get_unchecked(b), *w.m.get_unchecked(b));
                for t in 0..T {
                    let i = (r0 + t) * nb + b;
                    let qy = _mm256_loadu_si256(a.qs.as_ptr().add(i * QK) as *const __m256i);
                    let lanes = $lanes(qx, qy);
                    summs[t] += wm * *a.s.get_unchecked(i);
                    let dd = _mm256_set1_ps(wd * *a.d.get_unchecked(i));
                    acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(lanes), acc[t]);
                }
            }
            for t in 0..T {
                let mut v = [0.0f32; 8];
                _mm256_storeu_ps(v.as_mut_ptr(), acc[t]);
                out[t] = hsum8(v) + summs[t];
            }
        }

        /// # Safety
        /// The CPU must support the target features; the slices must hold the blocks.
        #[target_feature(enable = $features)]
        pub unsafe fn $q8<const T: usize>(w: &WeightRow, a: &Q8Batch, r0: usize, out: &mut [f32]) {
            use std::arch::x86_64::*;
            let nb = w.d.len();
            let mut acc = [_mm256_setzero_ps(); T];
            for b in 0..nb {
                let qx = _mm256_loadu_si256(w.qs.as_ptr().add(b * QK) as *const __m256i);
                let ax = _mm256_sign_epi8(qx, qx);
                let wd = *w.d.get_unchecked(b);
                for t in 0..T {
                    let i = (r0 + t) * nb + b;
                    let qy = _mm256_loadu_si256(a.qs.as_ptr().add(i * QK) as *const __m256i);
                    let lanes = $lanes(ax, _mm256_sign_epi8(qy, qx));
                    let dd = _mm256_set1_ps(wd * *a.d.get_unchecked(i));
                    acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(lanes), acc[t]);
                }
            }
            for t in 0..T {
                let mut v = [0.0f32; 8];
                _mm256_storeu_ps(v.as_mut_ptr(), acc[t]);
                out[t] = hsum8(v);
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn lanes_avx2(x: __m256i, y: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
    }

    #[inline(always)]
    unsafe fn lanes_vnni(x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), x, y)
    }

    /// The same instruction in its AVX-512 (EVEX) encoding, on 256-bit registers: CPUs with
    /// AVX-512 VNNI but not AVX-VNNI (AMD Zen 4) run one-row products with it.
    #[inline(always)]
    unsafe fn lanes_vnni_vl(x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y)
    }

    x86_tiles!("avx2,fma", q4_1_avx2, q8_0_avx2, lanes_avx2);
    x86_tiles!("avx2,fma,avxvnni", q4_1_vnni, q8_0_vnni, lanes_vnni);
    x86_tiles!(
        "avx2,fma,avx512f,avx512vl,avx512vnni",
        q4_1_vnni_vl,
        q8_0_vnni_vl,
        lanes_vnni_vl
    );
}
