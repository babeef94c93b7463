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
    let pairs = queries / 2 * 2;
    for i in (0..pairs).step_by(2) {
        let sums = dots::<2>(q16.as_ptr().add(i * HEAD), kbuf.as_ptr());
        for (j, s) in sums.iter().enumerate() {
            put(&mut scores[(i + j) * stride + at..][..n], &key_sums(s));
        }
    }
    if pairs < queries {
        let [s] = dots::<1>(q16.as_ptr().add(pairs * HEAD), kbuf.as_ptr());
        put(&mut scores[pairs * stride + at..][..n], &key_sums(&s));
    }
}

/// Q consecutive queries (from `q`) against the 8 widened keys at `key`: per query, four
/// registers of key-pair lanes. Every key load serves all Q queries.
#[inline(always)]
unsafe fn dots<const Q: usize>(q: *const f32, key: *const f32) -> [[__m512; 4]; Q] {
    let mut acc = [[_mm512_setzero_ps(); 4]; Q];
    for c in 0..CHUNKS {
        let x: [__m512; Q] = std::array::from_fn(|i| both_halves(q.add(i * HEAD), c));
        for j in 0..4 {
            let k = _mm512_loadu_ps(key.add((j * CHUNKS + c) * 16));
            for (a, &x) in acc.iter_mut().zip(&x) {
                a[j] = _mm512_fmadd_ps(x, k, a[j]);
            }
        }
    }
    acc
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
    let pairs = queries / 2 * 2;
    let w = |i: usize| weights[i * stride + at..][..n].as_ptr();
    for i in (0..pairs).step_by(2) {
        weighted::<2>(
            vbuf.as_ptr(),
            n,
            [w(i), w(i + 1)],
            out.as_mut_ptr().add(i * HEAD),
        );
    }
    if pairs < queries {
        weighted::<1>(
            vbuf.as_ptr(),
            n,
            [w(pairs)],
            out.as_mut_ptr().add(pairs * HEAD),
        );
    }
}

/// `out_i += Σ_p w_i[p] · vals[p]` for Q consecutive outputs at `out`, positions in order;
/// every value load serves all Q outputs.
#[inline(always)]
unsafe fn weighted<const Q: usize>(vals: *const f32, n: usize, w: [*const f32; Q], out: *mut f32) {
    let mut acc: [[__m512; 4]; Q] = std::array::from_fn(|i| load4(out.add(i * HEAD)));
    for p in 0..n {
        let x: [__m512; Q] = std::array::from_fn(|i| _mm512_set1_ps(*w[i].add(p)));
        for c in 0..4 {
            let v = _mm512_loadu_ps(vals.add(p * HEAD + c * 16));
            for (a, &x) in acc.iter_mut().zip(&x) {
                a[c] = _mm512_fmadd_ps(x, v, a[c]);
            }
        }
    }
    for (i, a) in acc.into_iter().enumerate() {
        store4(out.add(i * HEAD), a);
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
