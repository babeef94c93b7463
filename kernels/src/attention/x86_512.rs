//! AVX-512 versions of the blocked kernels in [`super::rows`] for 64-wide heads: a register
//! holds a chunk of two keys (scores) or twice the lanes of an output (values), and two
//! queries share every load, so a verify pass's attention issues half the multiply-adds and
//! fewer loads. Per lane, the operations and their order are the AVX2 kernels', so the bits
//! are the same.

use super::x86::{hsum8_x8, put};
use super::*;
use std::arch::x86_64::*;

/// The head width these kernels take.
pub const HEAD: usize = 64;
const CHUNKS: usize = HEAD / 8;

/// A 64-wide head's 8-lane chunk `c` of query `q`, in both halves of a register.
#[inline(always)]
unsafe fn both_halves(q: *const f32, c: usize) -> __m512 {
    let h = _mm256_castps_pd(_mm256_loadu_ps(q.add(c * 8)));
    _mm512_castpd_ps(_mm512_broadcast_f64x4(h))
}

/// Positions `first..first + n` (n ≤ 8) of a head's keys, widened into `buf` key pair by
/// key pair: for pair j and chunk c, 16 values = chunk c of key 2j, then of key 2j + 1.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn widen_key_pairs<T: KvElem>(
    src: *const T,
    stride: usize,
    (first, n): (usize, usize),
    buf: &mut [f32],
) {
    debug_assert!(n <= 8 && buf.len() >= 8 * HEAD);
    for p in 0..n {
        let row = src.add((first + p) * stride);
        for c in 0..CHUNKS {
            let at = ((p / 2) * CHUNKS + c) * 16 + (p % 2) * 8;
            _mm256_storeu_ps(buf.as_mut_ptr().add(at), T::load8(row.add(c * 8)));
        }
    }
}

/// `sums` of one query: its four registers of key-pair lanes as the eight keys' `hsum8`s.
#[inline(always)]
unsafe fn key_sums(acc: &[__m512; 4]) -> [f32; 8] {
    let lo = |a: __m512| _mm512_castps512_ps256(a);
    let hi = |a: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    let keys = [
        lo(acc[0]),
        hi(acc[0]),
        lo(acc[1]),
        hi(acc[1]),
        lo(acc[2]),
        hi(acc[2]),
        lo(acc[3]),
        hi(acc[3]),
    ];
    hsum8_x8(&keys)
}

/// [`super::x86::block_scores`] for 64-wide heads over keys widened by [`widen_key_pairs`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn block_scores(
    q16: &[f32],
    kbuf: &[f32],
    n: usize,
    scores: &mut [f32],
    (stride, at): (usize, usize),
) {
    let queries = q16.len() / HEAD;
    let key = kbuf.as_ptr();
    let mut i = 0;
    while i + 2 <= queries {
        let (qa, qb) = (q16.as_ptr().add(i * HEAD), q16.as_ptr().add((i + 1) * HEAD));
        let (mut a, mut b) = ([_mm512_setzero_ps(); 4], [_mm512_setzero_ps(); 4]);
        for c in 0..CHUNKS {
            let (xa, xb) = (both_halves(qa, c), both_halves(qb, c));
            for j in 0..4 {
                let k = _mm512_loadu_ps(key.add((j * CHUNKS + c) * 16));
                a[j] = _mm512_fmadd_ps(xa, k, a[j]);
                b[j] = _mm512_fmadd_ps(xb, k, b[j]);
            }
        }
        put(&mut scores[i * stride + at..][..n], &key_sums(&a));
        put(&mut scores[(i + 1) * stride + at..][..n], &key_sums(&b));
        i += 2;
    }
    if i < queries {
        let q = q16.as_ptr().add(i * HEAD);
        let mut a = [_mm512_setzero_ps(); 4];
        for c in 0..CHUNKS {
            let x = both_halves(q, c);
            for (j, a) in a.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(x, _mm512_loadu_ps(key.add((j * CHUNKS + c) * 16)), *a);
            }
        }
        put(&mut scores[i * stride + at..][..n], &key_sums(&a));
    }
}

/// [`super::x86::block_values`] for 64-wide heads (`vbuf`: [n][64], as `widen_block` gives).
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn block_values(
    vbuf: &[f32],
    n: usize,
    weights: &[f32],
    (stride, at): (usize, usize),
    out: &mut [f32],
) {
    let queries = out.len() / HEAD;
    let o = out.as_mut_ptr();
    let vals = vbuf.as_ptr();
    let mut i = 0;
    while i + 2 <= queries {
        let (wa, wb) = (
            &weights[i * stride + at..][..n],
            &weights[(i + 1) * stride + at..][..n],
        );
        let (mut a, mut b) = (load4(o.add(i * HEAD)), load4(o.add((i + 1) * HEAD)));
        for p in 0..n {
            let (xa, xb) = (_mm512_set1_ps(wa[p]), _mm512_set1_ps(wb[p]));
            for c in 0..4 {
                let v = _mm512_loadu_ps(vals.add(p * HEAD + c * 16));
                a[c] = _mm512_fmadd_ps(xa, v, a[c]);
                b[c] = _mm512_fmadd_ps(xb, v, b[c]);
            }
        }
        store4(o.add(i * HEAD), a);
        store4(o.add((i + 1) * HEAD), b);
        i += 2;
    }
    if i < queries {
        let w = &weights[i * stride + at..][..n];
        let mut a = load4(o.add(i * HEAD));
        for (p, &wp) in w.iter().enumerate() {
            let x = _mm512_set1_ps(wp);
            for (c, a) in a.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(x, _mm512_loadu_ps(vals.add(p * HEAD + c * 16)), *a);
            }
        }
        store4(o.add(i * HEAD), a);
    }
}

#[inline(always)]
unsafe fn load4(p: *const f32) -> [__m512; 4] {
    [
        _mm512_loadu_ps(p),
        _mm512_loadu_ps(p.add(16)),
        _mm512_loadu_ps(p.add(32)),
        _mm512_loadu_ps(p.add(48)),
    ]
}

#[inline(always)]
unsafe fn store4(p: *mut f32, a: [__m512; 4]) {
    for (c, a) in a.iter().enumerate() {
        _mm512_storeu_ps(p.add(c * 16), *a);
    }
}
