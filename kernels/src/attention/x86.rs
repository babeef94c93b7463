//! The AVX2/FMA/F16C kernels behind [`super::attend`]: the same operations as the portable
//! ones, eight lanes at a time.

use super::*;
use std::arch::x86_64::*;

/// `s ← s · scale` for every score; returns the largest (max is exact in any order).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scale_max(scores: &mut [f32], scale: f32) -> f32 {
    let (sc, mut m) = (_mm256_set1_ps(scale), _mm256_set1_ps(f32::NEG_INFINITY));
    let mut chunks = scores.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), sc);
        _mm256_storeu_ps(c.as_mut_ptr(), v);
        m = _mm256_max_ps(m, v);
    }
    let mut lanes = [0.0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    let mut max = lanes.into_iter().fold(f32::NEG_INFINITY, f32::max);
    for s in chunks.into_remainder() {
        *s *= scale;
        max = max.max(*s);
    }
    max
}

/// `s ← f16(s · inv)` widened back to f32, eight at a time.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scale_round_f16(scores: &mut [f32], inv: f32) {
    let iv = _mm256_set1_ps(inv);
    let mut chunks = scores.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), iv);
        let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
    }
    for s in chunks.into_remainder() {
        *s = f16::from_f32(*s * inv).to_f32();
    }
}

/// `dst = src` rounded to f16 and widened back (the query's rounding), eight at a time:
/// converting one value at a time cost about 2% of an 8-row verify pass.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn round_f16_into(src: &[f32], dst: &mut Vec<f32>) {
    dst.clear();
    dst.resize(src.len(), 0.0);
    let mut chunks = dst.chunks_exact_mut(8);
    for (d, x) in (&mut chunks).zip(src.chunks_exact(8)) {
        let h = _mm256_cvtps_ph(_mm256_loadu_ps(x.as_ptr()), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
    }
    let done = src.len() - src.len() % 8;
    for (d, &x) in chunks.into_remainder().iter_mut().zip(&src[done..]) {
        *d = f16::from_f32(x).to_f32();
    }
}

/// Eight `hsum8`s at once, each in exactly `hsum8`'s order:
/// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
#[inline(always)]
pub(super) unsafe fn hsum8_x8(a: &[__m256; 8]) -> [f32; 8] {
    // [lo(a_p) | lo(a_q)] + [hi(a_p) | hi(a_q)]: lanes h0..h3 of p, then of q.
    let halves = |p: __m256, q: __m256| {
        let h = _mm256_add_ps(
            _mm256_permute2f128_ps(p, q, 0x20),
            _mm256_permute2f128_ps(p, q, 0x31),
        );
        _mm256_permute_ps(h, 0xD8) // h0 h2 h1 h3 in each half
    };
    let (b01, b23) = (halves(a[0], a[1]), halves(a[2], a[3]));
    let (b45, b67) = (halves(a[4], a[5]), halves(a[6], a[7]));
    // Pairwise adds: (h0 + h2), (h1 + h3), then their sum.
    let d0 = _mm256_hadd_ps(b01, b23);
    let d1 = _mm256_hadd_ps(b45, b67);
    let e = _mm256_hadd_ps(d0, d1); // s0 s2 s4 s6 | s1 s3 s5 s7
    let mut v = [0.0f32; 8];
    _mm256_storeu_ps(v.as_mut_ptr(), e);
    [v[0], v[4], v[1], v[5], v[2], v[6], v[3], v[7]]
}

/// `dst = src[..dst.len()]` (at most 8): a whole block is one vector store, where a plain
/// copy became a `memcpy` call per query and block (about 1% of a verify pass).
#[target_feature(enable = "avx")]
#[inline]
pub(super) unsafe fn put(dst: &mut [f32], src: &[f32; 8]) {
    if dst.len() == 8 {
        _mm256_storeu_ps(dst.as_mut_ptr(), _mm256_loadu_ps(src.as_ptr()));
    } else {
        dst.copy_from_slice(&src[..dst.len()]);
    }
}

/// Dots of `q16` with the keys at `positions`, eight positions at a time (a short last
/// block repeats its last position; the repeats are dropped).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores<T: KvElem>(
    q16: &[f32],
    kv: &KvHead<T>,
    positions: &[usize],
    scores: &mut [f32],
) {
    let chunks = q16.len() / 8;
    let base = kv.keys.as_ptr().add(kv.offset);
    for (block, out) in positions.chunks(8).zip(scores.chunks_mut(8)) {
        let last = block.len() - 1;
        let rows: [*const T; 8] = std::array::from_fn(|p| base.add(block[p.min(last)] * kv.stride));
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in 0..chunks {
            let qc = _mm256_loadu_ps(q16.as_ptr().add(c * 8));
            for (a, row) in acc.iter_mut().zip(&rows) {
                *a = _mm256_fmadd_ps(qc, T::load8(row.add(c * 8)), *a);
            }
        }
        let sums = hsum8_x8(&acc);
        put(out, &sums);
    }
}

/// `out += Σ_t w_t · v_t` in position order, one fused multiply-add per element (callers
/// start `out` at zero: the first add then rounds exactly as a product alone).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate_values<T: KvElem>(
    kv: &KvHead<T>,
    positions: &[usize],
    weights: &[f32],
    out: &mut [f32],
) {
    let base = kv.values.as_ptr().add(kv.offset);
    let rows = positions.iter().map(|&t| base.add(t * kv.stride));
    match out.len() / 8 {
        8 => in_registers::<T, 8>(rows, weights, out),
        16 => in_registers::<T, 16>(rows, weights, out),
        chunks => {
            for (row, &w) in rows.zip(weights) {
                let wv = _mm256_set1_ps(w);
                for c in 0..chunks {
                    let v = T::load8(row.add(c * 8));
                    let o = out.as_mut_ptr().add(c * 8);
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(wv, v, _mm256_loadu_ps(o)));
                }
            }
        }
    }
}

/// The usual head widths (64, 128) keep the whole output in registers.
#[inline(always)]
unsafe fn in_registers<T: KvElem, const C: usize>(
    rows: impl Iterator<Item = *const T>,
    weights: &[f32],
    out: &mut [f32],
) {
    let mut acc: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(out.as_ptr().add(c * 8)));
    for (row, &w) in rows.zip(weights) {
        let wv = _mm256_set1_ps(w);
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(wv, T::load8(row.add(c * 8)), *a);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
    }
}

/// Positions `first..first + n` of a head (keys or values: `src` at the head's offset, `stride`
/// values per position) as f32 in `buf` ([n][hd], dense), for every query of a call to read
/// from L1.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn widen_block<T: KvElem>(
    src: *const T,
    stride: usize,
    (first, n, hd): (usize, usize, usize),
    buf: &mut [f32],
) {
    for p in 0..n {
        let row = src.add((first + p) * stride);
        for c in 0..hd / 8 {
            _mm256_storeu_ps(
                buf.as_mut_ptr().add(p * hd + c * 8),
                T::load8(row.add(c * 8)),
            );
        }
    }
}

/// Each query's (`q16`: [nq][hd]) dots with the eight keys in `kbuf` ([8][hd]; the first `n`
/// are real), written to `scores[i * stride + at..][..n]` for query i: per key, exactly
/// [`scores`]' operations.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn block_scores(
    q16: &[f32],
    kbuf: &[f32],
    (hd, n): (usize, usize),
    scores: &mut [f32],
    (stride, at): (usize, usize),
) {
    let keys: [*const f32; 8] = std::array::from_fn(|p| kbuf.as_ptr().add(p * hd));
    for (i, q) in q16.chunks_exact(hd).enumerate() {
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in 0..hd / 8 {
            let qc = _mm256_loadu_ps(q.as_ptr().add(c * 8));
            for (a, k) in acc.iter_mut().zip(&keys) {
                *a = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k.add(c * 8)), *a);
            }
        }
        let sums = hsum8_x8(&acc);
        put(&mut scores[i * stride + at..][..n], &sums);
    }
}

/// `out_i += Σ_p w_i[at + p] · vbuf[p]` for each query i (`out`: [nq][hd]; its weights at
/// `weights[i * stride..]`), the `n` positions of `vbuf` in order: per element, exactly
/// [`accumulate_values`]' operations.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn block_values(
    vbuf: &[f32],
    (hd, n): (usize, usize),
    weights: &[f32],
    (stride, at): (usize, usize),
    out: &mut [f32],
) {
    let rows = |_: ()| (0..n).map(|p| vbuf.as_ptr().add(p * hd));
    for (i, o) in out.chunks_exact_mut(hd).enumerate() {
        let w = &weights[i * stride + at..][..n];
        match hd / 8 {
            8 => in_registers::<f32, 8>(rows(()), w, o),
            16 => in_registers::<f32, 16>(rows(()), w, o),
            chunks => {
                for (row, &wp) in rows(()).zip(w) {
                    let wv = _mm256_set1_ps(wp);
                    for c in 0..chunks {
                        let v = _mm256_loadu_ps(row.add(c * 8));
                        let d = o.as_mut_ptr().add(c * 8);
                        _mm256_storeu_ps(d, _mm256_fmadd_ps(wv, v, _mm256_loadu_ps(d)));
                    }
                }
            }
        }
    }
}

/// [`super::attend`] for the `G` query heads of a group (`q16`: [G][64], already rounded to
/// f16) at once: each key and value is loaded once for all of them. Per head, scores,
/// softmax and the weighted sum are the single-head kernels' operations in the same order.
/// `scores`: [G][positions.len()] scratch; `out`: [G][64].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[allow(clippy::needless_range_loop)] // register blocks indexed by head and chunk
pub unsafe fn attend_group<T: KvElem, const G: usize>(
    q16: &[f32],
    kv: &KvHead<T>,
    positions: &[usize],
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    const HD: usize = 64;
    let n = positions.len();
    let base = kv.keys.as_ptr().add(kv.offset);
    for (b, block) in positions.chunks(8).enumerate() {
        let last = block.len() - 1;
        let rows: [*const T; 8] = std::array::from_fn(|p| base.add(block[p.min(last)] * kv.stride));
        let mut acc = [[_mm256_setzero_ps(); 8]; G];
        for c in 0..HD / 8 {
            let q: [__m256; G] =
                std::array::from_fn(|g| _mm256_loadu_ps(q16.as_ptr().add(g * HD + c * 8)));
            for (p, row) in rows.iter().enumerate() {
                let k = T::load8(row.add(c * 8));
                for g in 0..G {
                    acc[g][p] = _mm256_fmadd_ps(q[g], k, acc[g][p]);
                }
            }
        }
        for (g, a) in acc.iter().enumerate() {
            let sums = hsum8_x8(a);
            put(&mut scores[g * n + b * 8..][..block.len()], &sums);
        }
    }
    for g in 0..G {
        super::softmax_f16(&mut scores[g * n..(g + 1) * n], scale, true);
    }
    let base = kv.values.as_ptr().add(kv.offset);
    let mut acc = [[_mm256_setzero_ps(); HD / 8]; G];
    for (i, &t) in positions.iter().enumerate() {
        let row = base.add(t * kv.stride);
        let w: [__m256; G] =
            std::array::from_fn(|g| _mm256_set1_ps(*scores.get_unchecked(g * n + i)));
        for c in 0..HD / 8 {
            let v = T::load8(row.add(c * 8));
            for g in 0..G {
                acc[g][c] = _mm256_fmadd_ps(w[g], v, acc[g][c]);
            }
        }
    }
    for (g, a) in acc.iter().enumerate() {
        for (c, v) in a.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(g * HD + c * 8), *v);
        }
    }
}
