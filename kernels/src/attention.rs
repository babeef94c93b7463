//! Query heads' attention over an f16 KV cache: softmax(q·Kᵀ·scale)·V.
//!
//! Rounding follows llama.cpp's CPU path with its default f16 cache: the query is rounded to
//! f16 for the QK dot, the softmax weights to f16 for the weighted sum of values, and sums
//! accumulate in f32. The rows of a multi-row call share each block of the cache, widened
//! once into L1 for all of their query heads ([`attend_rows`]; exact: f16 → f32 loses
//! nothing).
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

/// One KV head of one layer's cache (f16 as stored, or f32 in tests): `stride` values per
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

/// Which kernels run attention. Every path gives the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttnPath {
    Portable,
    /// AVX2/FMA/F16C, one query head at a time.
    Avx2,
    /// AVX-512VL's 32 registers: the query heads of a group (2 or 3 of width 64) share each
    /// key and value load; other shapes as `Avx2`.
    Avx512,
}

impl AttnPath {
    /// The best this CPU runs, capped with the matmul by `SPECGATE_ISA` (checked once).
    pub fn detect() -> AttnPath {
        static PATH: OnceLock<AttnPath> = OnceLock::new();
        *PATH.get_or_init(|| {
            let best = AttnPath::available().pop().unwrap_or(AttnPath::Portable);
            match crate::Isa::detect() {
                crate::Isa::Portable => AttnPath::Portable,
                crate::Isa::Avx512Vnni => best,
                _ => best.min(AttnPath::Avx2),
            }
        })
    }

    /// Whether this path shares each key and value load among a group's query heads.
    pub fn shares_loads(self, group: usize, head_dim: usize) -> bool {
        self == AttnPath::Avx512 && head_dim == 64 && matches!(group, 2 | 3)
    }

    /// Every path this CPU can run, portable first.
    pub fn available() -> Vec<AttnPath> {
        let mut paths = vec![AttnPath::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            let f = |name: &str| match name {
                "avx2" => is_x86_feature_detected!("avx2"),
                "fma" => is_x86_feature_detected!("fma"),
                "f16c" => is_x86_feature_detected!("f16c"),
                "avx512f" => is_x86_feature_detected!("avx512f"),
                _ => is_x86_feature_detected!("avx512vl"),
            };
            if ["avx2", "fma", "f16c"].into_iter().all(f) {
                paths.push(AttnPath::Avx2);
                if ["avx512f", "avx512vl"].into_iter().all(f) {
                    paths.push(AttnPath::Avx512);
                }
            }
        }
        paths
    }
}

/// Attention of the `group` query heads that share one KV head (contiguous in `q` and `out`:
/// [group * head_dim]) over the cache positions `visible` yields (at least one). Each head's
/// result is the same whatever the group and whichever path runs.
pub fn attend<T: KvElem>(
    q: &[f32],
    group: usize,
    kv: KvHead<'_, T>,
    visible: impl Iterator<Item = usize>,
    scale: f32,
    scratch: &mut AttnScratch,
    out: &mut [f32],
) {
    attend_with(
        q,
        group,
        kv,
        visible,
        scale,
        scratch,
        out,
        AttnPath::detect(),
    );
}

/// [`attend`] on the path chosen by the caller (tests compare them all).
#[allow(clippy::too_many_arguments)]
pub fn attend_with<T: KvElem>(
    q: &[f32],
    group: usize,
    kv: KvHead<'_, T>,
    visible: impl Iterator<Item = usize>,
    scale: f32,
    scratch: &mut AttnScratch,
    out: &mut [f32],
    path: AttnPath,
) {
    let AttnScratch {
        q16,
        positions,
        scores,
    } = scratch;
    let hd = q.len() / group;
    positions.clear();
    positions.extend(visible);
    #[cfg(target_arch = "x86_64")]
    if path.shares_loads(group, hd) {
        scores.clear();
        scores.resize(group * positions.len(), 0.0);
        // SAFETY: the Avx512 path is only asked for where the CPU has AVX-512F/VL, AVX2, FMA
        // and F16C; positions index the cache; shapes were checked just above.
        unsafe {
            x86::round_f16_into(q, q16);
            match group {
                2 => x86::attend_group::<T, 2>(q16, &kv, positions, scale, scores, out),
                _ => x86::attend_group::<T, 3>(q16, &kv, positions, scale, scores, out),
            }
        }
        return;
    }
    let simd = path != AttnPath::Portable && hd.is_multiple_of(8);
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
            o.fill(0.0);
            // SAFETY: as above.
            unsafe { x86::accumulate_values(&kv, positions, scores, o) };
        }
        if !simd {
            portable_weighted_values(&kv, positions, scores, o);
        }
    }
}

/// Scaled scores → softmax weights rounded to f16 (the reference's f16 weighted sum). The
/// exponentials and their sum are ggml's vectorised softmax's ([`crate::vexp`]), the same
/// bits on every path.
fn softmax_f16(scores: &mut [f32], scale: f32, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when the CPU has AVX2, FMA and F16C.
        let max = unsafe { x86::scale_max(scores, scale) };
        let inv = (1.0 / crate::vexp::exp_sub_sum_with(scores, max, true)) as f32;
        unsafe { x86::scale_round_f16(scores, inv) };
        return;
    }
    let _ = simd;
    let mut max = f32::NEG_INFINITY;
    for s in scores.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let inv = (1.0 / crate::vexp::exp_sub_sum_with(scores, max, false)) as f32;
    for s in scores.iter_mut() {
        *s = f16::from_f32(*s * inv).to_f32();
    }
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

mod rows;
pub use rows::{attend_rows, RowsScratch};

#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_512;

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
        for (hd, group) in [
            (8, 1),
            (64, 1),
            (64, 2),
            (64, 3),
            (64, 4),
            (128, 2),
            (40, 3),
        ] {
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
                let mut run = |path: AttnPath, f16_cache: bool| {
                    let mut out = vec![0.0f32; group * hd];
                    let it = visible.iter().copied();
                    if f16_cache {
                        attend_with(&q, group, kv16, it, 0.3, &mut scratch, &mut out, path);
                    } else {
                        attend_with(&q, group, kv, it, 0.3, &mut scratch, &mut out, path);
                    }
                    out
                };
                let want = run(AttnPath::Portable, false);
                let case = format!("head {hd}, group {group}, {visible:?}");
                for path in AttnPath::available() {
                    assert_eq!(run(path, false), want, "{case}: {path:?}, widened cache");
                    assert_eq!(run(path, true), want, "{case}: {path:?}, f16 cache");
                }
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
                // SAFETY: only asked for where the CPU runs a SIMD path (checked below).
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
        for simd in [false, AttnPath::detect() != AttnPath::Portable] {
            for start in 0..=9 {
                for end in 10..=20 {
                    assert_eq!(score_of_9(&all[start..end], simd), want, "{start}..{end}");
                }
            }
        }
    }
}
