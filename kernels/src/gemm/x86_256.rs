//! The x86-64 256-bit tiles (AVX2, or AVX-VNNI): one group of weights against up to `R`
//! activation rows, as two halves of eight features.

use super::x86::{chunk, prefetch_blocks};
use super::*;
use std::arch::x86_64::*;

/// How far ahead of the block being computed its group's weights are prefetched, in
/// blocks (2 KB of Q4_1). Weights stream from memory once per call, and with the hardware
/// prefetcher alone an 8-row call ran 25-35% slower on streamed weights than on cached
/// ones (`kernels/examples/kernel_rate`); 4, 8 and 16 blocks ahead all helped, 8 most.
const PF: usize = 8;

/// Eight scales from `at` as f32.
#[target_feature(enable = "avx,f16c")]
#[inline]
unsafe fn scales8(s: Scales, at: usize) -> __m256 {
    match s {
        Scales::F32(v) => _mm256_loadu_ps(v.as_ptr().add(at)),
        Scales::F16(v) => _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(at) as *const __m128i)),
    }
}

/// 256-bit kernels: the group as two halves of eight features. `$dot(acc, u8, i8)` adds
/// the eight lanes' sums of four byte products to `acc` (no i16 saturation on the
/// maddubs path: nibbles reach 2·15·127, sign-trick Q8_0 pairs 2·128·127);
/// `$nibbles(w, y)` gives a 4-bit block's eight lanes' sums over all its segments.
macro_rules! tile256 {
    ($features:literal, $name:ident, $dot:ident, $nibbles:ident) => {
        /// # Safety
        /// The CPU must have the target features; `g` and `a` must hold `a.blocks`
        /// blocks and rows `r0..r0 + R`.
        #[target_feature(enable = $features)]
        pub unsafe fn $name<const F: u8, const R: usize>(
            g: &GroupView,
            a: &Q8Batch,
            r0: usize,
            out: &mut [[f32; GROUP]],
        ) {
            let nb = a.blocks;
            let segs = segments(F);
            let scales = if F == Q6_K { 2 } else { 1 };
            let nib = _mm256_set1_epi8(0x0F);
            for h in 0..2 {
                let mut acc = [_mm256_setzero_ps(); R];
                let mut ms = [_mm256_setzero_ps(); R];
                for b in 0..nb {
                    if h == 0 && r0 == 0 && b % 2 == 0 {
                        // Two blocks' weights and scales, PF blocks ahead (past the
                        // group's end: the next group's, which follow it); later row
                        // tiles of the group find them cached.
                        prefetch_blocks::<F>(g, b + PF);
                    }
                    let qs = g.qs.as_ptr().add(b * segs * GROUP * 4 + h * 32);
                    let mut w = [_mm256_setzero_si256(); 8];
                    if F == Q8_0 || unsigned_bytes(F) {
                        for (c, w) in w.iter_mut().enumerate() {
                            *w = _mm256_loadu_si256(qs.add(c * 64) as *const __m256i);
                        }
                    } else {
                        for c in 0..4 {
                            let v = _mm256_loadu_si256(qs.add(c * 64) as *const __m256i);
                            w[c] = _mm256_and_si256(v, nib);
                            w[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                        }
                    }
                    let wd = scales8(g.d, b * scales * GROUP + h * 8);
                    let wm = if has_min(F) {
                        scales8(g.m, b * GROUP + h * 8)
                    } else {
                        _mm256_setzero_ps()
                    };
                    for t in 0..R {
                        let i = (r0 + t) * nb + b;
                        let y = a.qs.as_ptr().add(i * QK);
                        if F == Q6_K {
                            let ad = _mm256_set1_ps(*a.d.get_unchecked(i));
                            for half in 0..2 {
                                let mut isum = _mm256_setzero_si256();
                                for c in 4 * half..4 * half + 4 {
                                    let yc = _mm256_set1_epi32(chunk(y, c));
                                    isum = $dot(isum, w[c], yc);
                                }
                                let s = *a.sums16.get_unchecked(2 * i + half);
                                isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(32 * s));
                                let at = (b * 2 + half) * GROUP + h * 8;
                                let dd = _mm256_mul_ps(scales8(g.d, at), ad);
                                acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[t]);
                            }
                            continue;
                        }
                        let mut isum = if F == Q8_0 {
                            let mut isum = _mm256_setzero_si256();
                            for (c, &wc) in w.iter().enumerate() {
                                let yc = _mm256_set1_epi32(chunk(y, c));
                                // |w| times the activations with w's sign moved onto them.
                                let (x, yc) = (_mm256_sign_epi8(wc, wc), _mm256_sign_epi8(yc, wc));
                                isum = $dot(isum, x, yc);
                            }
                            isum
                        } else if F == Q5_K {
                            // Whole bytes (0..=31): a dot per segment, widened each time
                            // (eight segments' i16 pair sums could reach 62 992).
                            let mut isum = _mm256_setzero_si256();
                            for (c, &wc) in w.iter().enumerate() {
                                isum = $dot(isum, wc, _mm256_set1_epi32(chunk(y, c)));
                            }
                            isum
                        } else {
                            $nibbles(&w, y)
                        };
                        if F == Q4_0 {
                            let o = _mm256_set1_epi32(8 * a.sum(i));
                            isum = _mm256_sub_epi32(isum, o);
                        }
                        let dd = _mm256_mul_ps(wd, _mm256_set1_ps(*a.d.get_unchecked(i)));
                        acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[t]);
                        if has_min(F) {
                            let s = _mm256_set1_ps(*a.s.get_unchecked(i));
                            ms[t] = _mm256_fmadd_ps(wm, s, ms[t]);
                        }
                    }
                }
                for t in 0..R {
                    let v = if has_min(F) {
                        _mm256_add_ps(acc[t], ms[t])
                    } else {
                        acc[t]
                    };
                    _mm256_storeu_ps(out[t].as_mut_ptr().add(h * 8), v);
                }
            }
        }
    };
}

#[inline(always)]
unsafe fn dot_avx2(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(x, y);
    _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

#[inline(always)]
unsafe fn dot_vnni(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, x, y)
}

/// A 4-bit block's eight segments (nibbles 0..=15) against activations `y`, as the
/// eight features' i32 sums. The pair sums of `maddubs` are added in i16 and widened
/// once: |Σ| ≤ 8 · 2 · 15 · 127 = 30 480 fits, so the result is exact and one multiply
/// per segment is saved, which is what bounds this kernel at several rows.
#[inline(always)]
unsafe fn nibbles_avx2(w: &[__m256i; 8], y: *const i8) -> __m256i {
    let mut pairs = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(chunk(y, 0)));
    for (c, &wc) in w.iter().enumerate().skip(1) {
        let yc = _mm256_set1_epi32(chunk(y, c));
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(wc, yc));
    }
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// `$name`: a 4-bit block's eight segments against activations `y` with one `$dot` (a
/// VNNI instruction, which sums in i32 itself) per segment.
macro_rules! nibbles_dot {
    ($name:ident, $dot:ident) => {
        #[inline(always)]
        unsafe fn $name(w: &[__m256i; 8], y: *const i8) -> __m256i {
            let mut isum = _mm256_setzero_si256();
            for (c, &wc) in w.iter().enumerate() {
                isum = $dot(isum, wc, _mm256_set1_epi32(chunk(y, c)));
            }
            isum
        }
    };
}

nibbles_dot!(nibbles_vnni, dot_vnni);

tile256!("avx2,fma,f16c", tile_avx2, dot_avx2, nibbles_avx2);
tile256!("avx2,fma,f16c,avxvnni", tile_vnni, dot_vnni, nibbles_vnni);

/// The AVX-VNNI instruction in its AVX-512 encoding: lets the tests run the AVX-VNNI
/// kernel's logic on CPUs that have AVX-512 VNNI but not AVX-VNNI (AMD Zen 4).
#[cfg(test)]
#[inline(always)]
unsafe fn dot_vnni_evex(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, x, y)
}

#[cfg(test)]
nibbles_dot!(nibbles_vnni_evex, dot_vnni_evex);

#[cfg(test)]
tile256!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    tile_vnni_evex,
    dot_vnni_evex,
    nibbles_vnni_evex
);
