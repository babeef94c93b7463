//! Query heads' attention over an f16 KV cache: softmax(q·Kᵀ·scale)·V.
//!
//! Rounding follows llama.cpp's CPU path with its default f16 cache: the query is rounded to
//! f16 for the QK dot, the softmax weights to f16 for the weighted sum of values, and sums
//! accumulate in f32. A KV head is widened to f32 into a dense [`WideHead`] once per task,
//! and every row and query head of the task shares it (exact: f16 → f32 loses nothing).
//!
//! Every score and every output element is computed by a fixed sequence of operations that
//! does not depend on which other positions or rows share the call: a key's dot is eight
//! lanes of fused multiply-adds over the head's 8-wide chunks, summed in ggml's
//! `hsum_float_8` order; the output is one fused multiply-add per position, in position
//! order. So batched rows, tree rows and single rows give the same bits, and the SIMD path
//! gives the same bits as the portable one.

use std::sync::OnceLock;

use half::f16;

/// ggml's `hsum_float_8`: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
#[inline(always)]
fn hsum8(a: [f32; 8]) -> f32 {
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// What a cache holds: f16 as stored, or f32 widened from it (the same values).
pub trait KvElem: Copy + Sync {
    fn widen(self) -> f32;
    /// Eight consecutive values as f32.
    ///
    /// # Safety
    /// Eight values must be readable at `p`; the caller runs with AVX and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl KvElem for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
}

impl KvElem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }
}

/// One KV head of one layer's cache (f16 as stored, or a [`WideHead`]): `stride` values per
/// position, the head at `offset`.
#[derive(Debug, Clone, Copy)]
pub struct KvHead<'a, T = f32> {
    pub keys: &'a [T],
    pub values: &'a [T],
    pub stride: usize,
    pub offset: usize,
}

/// Reusable buffers for [`attend`] (one per thread; nothing is allocated per call once warm).
#[derive(Debug, Default)]
pub struct AttnScratch {
    q16: Vec<f32>,
    positions: Vec<usize>,
    scores: Vec<f32>,
}

/// One KV head of a layer's f16 cache, widened to f32 and laid out densely ([len][head_dim]):
/// every query head and row that reads this KV head in a call shares one conversion, and
/// reads contiguous memory.
#[derive(Debug, Default)]
pub struct WideHead {
    keys: Vec<f32>,
    values: Vec<f32>,
    head_dim: usize,
}

impl WideHead {
    /// Positions `0..len` of the head at `offset` in a cache of `stride` halves per position.
    pub fn fill(
        &mut self,
        (keys, values): (&[f16], &[f16]),
        (stride, offset, head_dim): (usize, usize, usize),
        len: usize,
    ) {
        self.head_dim = head_dim;
        for (src, dst) in [(keys, &mut self.keys), (values, &mut self.values)] {
            dst.clear();
            dst.resize(len * head_dim, 0.0);
            for (t, row) in dst.chunks_exact_mut(head_dim).enumerate() {
                widen_row(&src[t * stride + offset..][..head_dim], row);
            }
        }
    }

    pub fn view(&self) -> KvHead<'_> {
        KvHead {
            keys: &self.keys,
            values: &self.values,
            stride: self.head_dim,
            offset: 0,
        }
    }
}

fn widen_row(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd() && src.len().is_multiple_of(8) {
        // SAFETY: `simd()` checked F16C; both slices hold `len` values.
        unsafe { x86::widen(src, dst) };
        return;
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// Whether the AVX2/FMA/F16C path runs here (checked once; `SPECGATE_ISA=portable` turns it
/// off so benchmarks and tests can compare).
fn simd() -> bool {
    static SIMD: OnceLock<bool> = OnceLock::new();
    *SIMD.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::env::var("SPECGATE_ISA").as_deref() != Ok("portable")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Attention of the `group` query heads that share one KV head (contiguous in `q` and `out`:
/// [group * head_dim]) over the cache positions `visible` yields (at least one). Each head is
/// computed alone, by the same operations whatever the group.
pub fn attend<T: KvElem>(
    q: &[f32],
    group: usize,
    kv: KvHead<'_, T>,
    visible: impl Iterator<Item = usize>,
    scale: f32,
    scratch: &mut AttnScratch,
    out: &mut [f32],
) {
    attend_with(q, group, kv, visible, scale, scratch, out, simd());
}

/// [`attend`] with the SIMD path chosen by the caller (tests compare both).
#[allow(clippy::too_many_arguments)]
pub fn attend_with<T: KvElem>(
    q: &[f32],
    group: usize,
    kv: KvHead<'_, T>,
    visible: impl Iterator<Item = usize>,
    scale: f32,
    scratch: &mut AttnScratch,
    out: &mut [f32],
    simd: bool,
) {
    let AttnScratch {
        q16,
        positions,
        scores,
    } = scratch;
    let hd = q.len() / group;
    positions.clear();
    positions.extend(visible);
    let simd = simd && hd.is_multiple_of(8);
    for (qh, o) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        q16.clear();
        q16.extend(qh.iter().map(|&x| f16::from_f32(x).to_f32()));
        scores.clear();
        scores.resize(positions.len(), 0.0);
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: `simd` is only true when the CPU has AVX2, FMA and F16C, and the head
            // width is a whole number of 8-lane chunks; positions index the cache.
            unsafe { x86::scores(q16, &kv, positions, scores) };
        }
        if !simd {
            portable_scores(q16, &kv, positions, scores);
        }
        softmax_f16(scores, scale, simd);
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: as above.
            unsafe { x86::weighted_values(&kv, positions, scores, o) };
        }
        if !simd {
            portable_weighted_values(&kv, positions, scores, o);
        }
    }
}

/// Scaled scores → softmax weights rounded to f16 (the reference's f16 weighted sum). The
/// exponentials are libm's on every path; the SIMD path only vectorises the exact steps.
fn softmax_f16(scores: &mut [f32], scale: f32, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when the CPU has AVX2, FMA and F16C.
        let max = unsafe { x86::scale_max(scores, scale) };
        let inv = 1.0 / exp_sum(scores, max);
        unsafe { x86::scale_round_f16(scores, inv) };
        return;
    }
    let _ = simd;
    let mut max = f32::NEG_INFINITY;
    for s in scores.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let inv = 1.0 / exp_sum(scores, max);
    for s in scores.iter_mut() {
        *s = f16::from_f32(*s * inv).to_f32();
    }
}

/// `s ← exp(s − max)`; returns Σ s in order.
fn exp_sum(scores: &mut [f32], max: f32) -> f32 {
    let mut sum = 0.0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    sum
}

fn portable_scores<T: KvElem>(
    q16: &[f32],
    kv: &KvHead<T>,
    positions: &[usize],
    scores: &mut [f32],
) {
    let hd = q16.len();
    for (&t, s) in positions.iter().zip(scores.iter_mut()) {
        let k = &kv.keys[t * kv.stride + kv.offset..][..hd];
        let mut lanes = [0.0f32; 8];
        for (qc, kc) in q16.chunks(8).zip(k.chunks(8)) {
            for (l, (&a, &b)) in qc.iter().zip(kc).enumerate() {
                lanes[l] = a.mul_add(b.widen(), lanes[l]);
            }
        }
        *s = hsum8(lanes);
    }
}

fn portable_weighted_values<T: KvElem>(
    kv: &KvHead<T>,
    positions: &[usize],
    weights: &[f32],
    out: &mut [f32],
) {
    let hd = out.len();
    out.fill(0.0);
    for (&t, &w) in positions.iter().zip(weights) {
        let v = &kv.values[t * kv.stride + kv.offset..][..hd];
        for (o, &x) in out.iter_mut().zip(v) {
            *o = w.mul_add(x.widen(), *o);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// f16 → f32, eight at a time (exact).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn widen(src: &[f16], dst: &mut [f32]) {
        for (s, d) in src.chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr() as *const __m128i));
            _mm256_storeu_ps(d.as_mut_ptr(), v);
        }
    }

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

    /// Eight `hsum8`s at once, each in exactly `hsum8`'s order:
    /// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
    #[inline(always)]
    unsafe fn hsum8_x8(a: &[__m256; 8]) -> [f32; 8] {
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
            let rows: [*const T; 8] =
                std::array::from_fn(|p| base.add(block[p.min(last)] * kv.stride));
            let mut acc = [_mm256_setzero_ps(); 8];
            for c in 0..chunks {
                let qc = _mm256_loadu_ps(q16.as_ptr().add(c * 8));
                for (a, row) in acc.iter_mut().zip(&rows) {
                    *a = _mm256_fmadd_ps(qc, T::load8(row.add(c * 8)), *a);
                }
            }
            let sums = hsum8_x8(&acc);
            out.copy_from_slice(&sums[..out.len()]);
        }
    }

    /// `out = Σ_t w_t · v_t` in position order, one fused multiply-add per element.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn weighted_values<T: KvElem>(
        kv: &KvHead<T>,
        positions: &[usize],
        weights: &[f32],
        out: &mut [f32],
    ) {
        match out.len() / 8 {
            8 => in_registers::<T, 8>(kv, positions, weights, out),
            16 => in_registers::<T, 16>(kv, positions, weights, out),
            chunks => {
                out.fill(0.0);
                let base = kv.values.as_ptr().add(kv.offset);
                for (&t, &w) in positions.iter().zip(weights) {
                    let (row, wv) = (base.add(t * kv.stride), _mm256_set1_ps(w));
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
        kv: &KvHead<T>,
        positions: &[usize],
        weights: &[f32],
        out: &mut [f32],
    ) {
        let base = kv.values.as_ptr().add(kv.offset);
        let mut acc = [_mm256_setzero_ps(); C];
        for (&t, &w) in positions.iter().zip(weights) {
            let (row, wv) = (base.add(t * kv.stride), _mm256_set1_ps(w));
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(wv, T::load8(row.add(c * 8)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A cache as the engine holds it (f16).
    fn cache(rng: &mut ChaCha8Rng, positions: usize, stride: usize) -> Vec<f16> {
        (0..positions * stride)
            .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect()
    }

    #[test]
    fn simd_equals_portable_for_any_length_position_set_group_and_storage() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for (hd, group) in [(8, 1), (64, 1), (64, 3), (128, 2), (40, 3)] {
            let stride = 3 * hd;
            let (k16, v16) = (cache(&mut rng, 41, stride), cache(&mut rng, 41, stride));
            let widen = |h: &[f16]| h.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
            let (keys, values) = (widen(&k16), widen(&v16));
            let kv = KvHead {
                keys: &keys,
                values: &values,
                stride,
                offset: hd,
            };
            let kv16 = KvHead {
                keys: &k16,
                values: &v16,
                stride,
                offset: hd,
            };
            let q: Vec<f32> = (0..group * hd)
                .map(|_| rng.random_range(-3.0f32..3.0))
                .collect();
            let mut sets: Vec<Vec<usize>> = (1..=41).map(|len| (0..len).collect()).collect();
            sets.push((0..17).chain([20, 23, 40]).collect()); // a tree row
            let mut scratch = AttnScratch::default();
            for visible in &sets {
                let mut run = |simd: bool, f16_cache: bool| {
                    let mut out = vec![0.0f32; group * hd];
                    let it = visible.iter().copied();
                    if f16_cache {
                        attend_with(&q, group, kv16, it, 0.3, &mut scratch, &mut out, simd);
                    } else {
                        attend_with(&q, group, kv, it, 0.3, &mut scratch, &mut out, simd);
                    }
                    out
                };
                let want = run(false, false);
                let case = format!("head {hd}, group {group}, {visible:?}");
                assert_eq!(run(true, false), want, "{case}: SIMD on the widened cache");
                assert_eq!(run(true, true), want, "{case}: SIMD on the f16 cache");
                assert_eq!(run(false, true), want, "{case}: portable on the f16 cache");
            }
        }
    }

    #[test]
    fn a_key_scores_the_same_wherever_it_sits_in_a_block() {
        // Batched, tree and single rows see a key at different slots of the 8-key blocks (or
        // in a padded short block); its score must not depend on that.
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let hd = 64;
        let keys = cache(&mut rng, 20, hd);
        let kv = KvHead {
            keys: &keys,
            values: &keys,
            stride: hd,
            offset: 0,
        };
        let q: Vec<f32> = (0..hd).map(|_| rng.random_range(-3.0f32..3.0)).collect();
        let all: Vec<usize> = (0..20).collect();
        let score_of_9 = |positions: &[usize], simd: bool| {
            let mut s = vec![0.0f32; positions.len()];
            #[cfg(target_arch = "x86_64")]
            if simd {
                // SAFETY: checked by `super::simd()` below before asking for it.
                unsafe { x86::scores(&q, &kv, positions, &mut s) };
            }
            if !simd {
                portable_scores(&q, &kv, positions, &mut s);
            }
            s[positions
                .iter()
                .position(|&t| t == 9)
                .expect("9 is visible")]
        };
        let want = score_of_9(&all, false);
        for simd in [false, super::simd()] {
            for start in 0..=9 {
                for end in 10..=20 {
                    assert_eq!(score_of_9(&all[start..end], simd), want, "{start}..{end}");
                }
            }
        }
    }
}
