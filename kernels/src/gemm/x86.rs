//! The x86-64 AVX-512 VNNI tile (one group of weights against up to `R` activation rows)
//! and what the 256-bit tiles of `x86_256` share with it.

use super::*;
use std::arch::x86_64::*;

/// Four activation bytes (positions 4c..4c+4) of block `y`, in every 32-bit lane.
#[inline(always)]
pub(super) unsafe fn chunk(y: *const i8, c: usize) -> i32 {
    std::ptr::read_unaligned(y.add(4 * c) as *const i32)
}

/// Sixteen scales from `at` as f32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scales16(s: Scales, at: usize) -> __m512 {
    match s {
        Scales::F32(v) => _mm512_loadu_ps(v.as_ptr().add(at)),
        Scales::F16(v) => _mm512_cvtph_ps(_mm256_loadu_si256(v.as_ptr().add(at) as *const __m256i)),
    }
}

/// How far ahead of the block being computed the AVX-512 kernel prefetches its group's
/// weights, in blocks (see `x86_256::PF`). On Zen 5, 16 blocks ahead against 4, 8 and 32,
/// in one interleaved run on streamed weights: 1 row 18.9 → 13.7 µs, 8 rows 43.4 → 24.3
/// µs (medians of 5; 8 ahead: 16.7 and 27.3; none: the first figures).
const PF512: usize = 16;

/// Prefetch `len` bytes from `p` (any address: a prefetch never faults).
#[inline(always)]
unsafe fn prefetch(p: *const u8, len: usize) {
    for line in (0..len).step_by(64) {
        _mm_prefetch(p.wrapping_add(line) as *const i8, _MM_HINT_T0);
    }
}

/// Prefetch blocks `at` and `at + 1` of group `g`: weights and scales (any block index:
/// past the group's end lie the next group's).
#[inline(always)]
pub(super) unsafe fn prefetch_blocks<const F: u8>(g: &GroupView, at: usize) {
    let (segs, scales) = (segments(F), if F == Q6_K { 2 } else { 1 });
    prefetch(
        g.qs.as_ptr().wrapping_add(at * segs * GROUP * 4),
        2 * segs * GROUP * 4,
    );
    prefetch_scales(g.d, at * scales * GROUP, 2 * scales * GROUP);
    if has_min(F) {
        prefetch_scales(g.m, at * GROUP, 2 * GROUP);
    }
}

/// Prefetch the scales of `n` features from `at`.
#[inline(always)]
unsafe fn prefetch_scales(s: Scales, at: usize, n: usize) {
    match s {
        Scales::F32(v) => prefetch(v.as_ptr().wrapping_add(at) as *const u8, 4 * n),
        Scales::F16(v) => prefetch(v.as_ptr().wrapping_add(at) as *const u8, 2 * n),
    }
}

/// AVX-512 VNNI: all 16 features of the group in one register.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI; `g` and `a` must hold `a.blocks` blocks and
/// rows `r0..r0 + R`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile512<const F: u8, const R: usize>(
    g: &GroupView,
    a: &Q8Batch,
    r0: usize,
    out: &mut [[f32; GROUP]],
) {
    let nb = a.blocks;
    let mut acc = [_mm512_setzero_ps(); R];
    let mut ms = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        if r0 == 0 && b % 2 == 0 {
            // As in the 256-bit kernels: without it an 8-row call on streamed weights
            // ran at 64% of its rate on cached ones (Zen 5, `kernel_rate`).
            prefetch_blocks::<F>(g, b + PF512);
        }
        let w = weights512::<F>(g.qs.as_ptr().add(b * segments(F) * GROUP * 4));
        let ys: [*const i8; R] =
            std::array::from_fn(|t| a.qs.as_ptr().add(((r0 + t) * nb + b) * QK));
        let (lo, hi) = block_dots512::<F, R>(&w, &ys);
        let scales = BlockScales512::load::<F>(g, b);
        for t in 0..R {
            scale_row512::<F, R>(
                &scales,
                a,
                (r0 + t) * nb + b,
                lo[t],
                hi[t],
                &mut acc[t],
                &mut ms[t],
            );
        }
    }
    for t in 0..R {
        let v = if has_min(F) {
            _mm512_add_ps(acc[t], ms[t])
        } else {
            acc[t]
        };
        _mm512_storeu_ps(out[t].as_mut_ptr(), v);
    }
}

/// Few rows, and Q6_K (a scale per half), keep a block's two halves in separate dot chains;
/// else one chain per row (see [`block_dots512`]).
const fn split512(f: u8, rows: usize) -> bool {
    rows < 6 || f == Q6_K
}

/// A block's eight segments of the group's weights as unsigned bytes: 4-bit formats their
/// low then high nibbles, Q8_0 w + 128, Q6_K and Q5_K as stored.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn weights512<const F: u8>(qs: *const u8) -> [__m512i; 8] {
    let mut w = [_mm512_setzero_si512(); 8];
    if F == Q8_0 {
        for (c, w) in w.iter_mut().enumerate() {
            let v = _mm512_loadu_si512(qs.add(c * 64) as *const __m512i);
            *w = _mm512_xor_si512(v, _mm512_set1_epi8(-128)); // w + 128, unsigned
        }
    } else if unsigned_bytes(F) {
        for (c, w) in w.iter_mut().enumerate() {
            *w = _mm512_loadu_si512(qs.add(c * 64) as *const __m512i);
        }
    } else {
        let nib = _mm512_set1_epi8(0x0F);
        for c in 0..4 {
            let v = _mm512_loadu_si512(qs.add(c * 64) as *const __m512i);
            w[c] = _mm512_and_si512(v, nib);
            w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        }
    }
    w
}

/// One block's integer dots with every row's activations `ys`, as (first half, second
/// half) chains; with one chain per row the second stays zero.
///
/// Segment by segment across the rows: independent chains of dot instructions, where row
/// by row gave two chains of four per row and ran at latency (the row loop was not
/// unrolled).
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn block_dots512<const F: u8, const R: usize>(
    w: &[__m512i; 8],
    ys: &[*const i8; R],
) -> ([__m512i; R], [__m512i; R]) {
    let mut lo = [_mm512_setzero_si512(); R];
    let mut hi = [_mm512_setzero_si512(); R];
    for (c, &wc) in w.iter().enumerate() {
        for t in 0..R {
            let s = if split512(F, R) && c >= 4 {
                &mut hi[t]
            } else {
                &mut lo[t]
            };
            *s = _mm512_dpbusd_epi32(*s, wc, _mm512_set1_epi32(chunk(ys[t], c)));
        }
    }
    (lo, hi)
}

/// The group's float scales for one block: `d` (Q6_K: per half) and Q4_1's min.
struct BlockScales512 {
    d: __m512,
    d2: __m512,
    m: __m512,
}

impl BlockScales512 {
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load<const F: u8>(g: &GroupView, b: usize) -> Self {
        let per_block = if F == Q6_K { 2 } else { 1 };
        Self {
            d: scales16(g.d, b * per_block * GROUP),
            d2: scales16(g.d, (b * per_block + per_block - 1) * GROUP),
            m: if has_min(F) {
                scales16(g.m, b * GROUP)
            } else {
                _mm512_setzero_ps()
            },
        }
    }
}

/// Adds activation block `i`'s integer dots (`lo`, `hi`), scaled, to its row's
/// accumulator `acc` (and Q4_1's min term to `ms`).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scale_row512<const F: u8, const R: usize>(
    s: &BlockScales512,
    a: &Q8Batch,
    i: usize,
    lo: __m512i,
    hi: __m512i,
    acc: &mut __m512,
    ms: &mut __m512,
) {
    let ad = _mm512_set1_ps(*a.d.get_unchecked(i));
    if F == Q6_K {
        for (h, (sum, wd)) in [(lo, s.d), (hi, s.d2)].into_iter().enumerate() {
            let o = _mm512_set1_epi32(32 * *a.sums16.get_unchecked(2 * i + h));
            let isum = _mm512_sub_epi32(sum, o);
            *acc = _mm512_fmadd_ps(_mm512_mul_ps(wd, ad), _mm512_cvtepi32_ps(isum), *acc);
        }
        return;
    }
    // One chain per row leaves `hi` zero; adding it anyway would cost an instruction.
    let mut isum = if split512(F, R) {
        _mm512_add_epi32(lo, hi)
    } else {
        lo
    };
    let offset = match F {
        Q4_0 => 8,
        Q8_0 => 128,
        _ => 0,
    };
    if offset != 0 {
        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(offset * a.sum(i)));
    }
    *acc = _mm512_fmadd_ps(_mm512_mul_ps(s.d, ad), _mm512_cvtepi32_ps(isum), *acc);
    if has_min(F) {
        *ms = _mm512_fmadd_ps(s.m, _mm512_set1_ps(*a.s.get_unchecked(i)), *ms);
    }
}
