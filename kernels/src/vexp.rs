//! The exponential of softmax and SwiGLU, eight lanes at a time.
//!
//! libm's `expf` is one call per value; at a verify pass of 8 rows over a 300-token cache
//! that was 650 k calls in attention alone. This is the polynomial ggml's CPU backend uses
//! for the same two operations (`ggml_v_expf`, adapted from Arm's optimized routines: at most
//! 1.5 ulp from the true value), written once as a lane function and once in AVX2/FMA. The
//! two execute the same fused operations in the same order, so they give the same bits, and
//! a value's result never depends on its neighbours (tails use the lane function too).

const SHIFT: f32 = 12_582_912.0; // 0x1.8p23: adding it rounds to an integer
const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b); // 0x1.715476p+0
const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0x1.62e4p-1
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 0x1.7f7d1cp-20
const C: [f32; 5] = [
    f32::from_bits(0x3c07_2010), // 0x1.0e4020p-7
    f32::from_bits(0x3d2b_9f17), // 0x1.573e2ep-5
    f32::from_bits(0x3e2a_af33), // 0x1.555e66p-3
    f32::from_bits(0x3eff_fedb), // 0x1.fffdb6p-2
    f32::from_bits(0x3f7f_fff6), // 0x1.ffffecp-1
];

/// e^x for one value (the reference every SIMD lane equals).
#[inline]
pub fn exp_lane(x: f32) -> f32 {
    // x = n·ln2 + b with n an integer and |b| ≤ ln2/2; e^x = 2^n · e^b.
    let z = x.mul_add(LOG2E, SHIFT);
    let n = z - SHIFT;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let u = b * b;
    let j = C[0]
        .mul_add(b, C[1])
        .mul_add(u, C[2].mul_add(b, C[3]))
        .mul_add(u, C[4] * b);
    if n.abs() <= 126.0 || n.is_nan() {
        return j.mul_add(k, k);
    }
    // 2^n would leave the exponent range: scale in two steps (or saturate past 192).
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// `s ← e^(s − max)` for every score; returns their sum, accumulated as ggml's softmax does:
/// each group of eight summed in f32 (upper half onto lower, then pairs), groups and the
/// tail added in f64.
pub fn exp_sub_sum(scores: &mut [f32], max: f32) -> f64 {
    exp_sub_sum_with(scores, max, crate::avx2())
}

/// [`exp_sub_sum`] with the SIMD path chosen by the caller (tests compare both), where the
/// CPU has it.
pub fn exp_sub_sum_with(scores: &mut [f32], max: f32, simd: bool) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if simd && crate::cpu_has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked).
        return unsafe { x86::exp_sub_sum(scores, max) };
    }
    let _ = simd;
    let mut chunks = scores.chunks_exact_mut(8);
    let mut sum = 0.0f64;
    for c in &mut chunks {
        let mut v = [0.0f32; 8];
        for (o, s) in v.iter_mut().zip(c.iter_mut()) {
            *s = exp_lane(*s - max);
            *o = *s;
        }
        let h = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
        sum += ((h[0] + h[2]) + (h[1] + h[3])) as f64;
    }
    for s in chunks.into_remainder() {
        *s = exp_lane(*s - max);
        sum += *s as f64;
    }
    sum
}

/// SwiGLU: `out ← gate / (1 + e^(−gate)) · up` (all three the same length).
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    swiglu_with(gate, up, out, crate::avx2());
}

/// [`swiglu`] with the SIMD path chosen by the caller, where the CPU has it.
pub fn swiglu_with(gate: &[f32], up: &[f32], out: &mut [f32], simd: bool) {
    assert!(
        gate.len() == up.len() && up.len() == out.len(),
        "SwiGLU shapes"
    );
    #[cfg(target_arch = "x86_64")]
    if simd && crate::cpu_has_avx2() {
        // SAFETY: as in `exp_sub_sum_with`; the lengths are equal.
        return unsafe { x86::swiglu(gate, up, out) };
    }
    let _ = simd;
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp_lane(-g)) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`exp_lane`] on eight lanes.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let shift = _mm256_set1_ps(SHIFT);
        let z = _mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), shift);
        let n = _mm256_sub_ps(z, shift);
        let b = _mm256_fnmadd_ps(
            n,
            _mm256_set1_ps(LN2_LO),
            _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x),
        );
        let e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
        let one = _mm256_castps_si256(_mm256_set1_ps(1.0));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, one));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0), _CMP_GT_OQ);
        let u = _mm256_mul_ps(b, b);
        let c = |i: usize| _mm256_set1_ps(C[i]);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(c(0), b, c(1)),
                u,
                _mm256_fmadd_ps(c(2), b, c(3)),
            ),
            u,
            _mm256_mul_ps(c(4), b),
        );
        let small = _mm256_fmadd_ps(j, k, k);
        if _mm256_movemask_ps(big) == 0 {
            return small;
        }
        let nonpos = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ);
        let g = _mm256_and_si256(
            _mm256_castps_si256(nonpos),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0), _CMP_GT_OQ);
        let scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
        let far = _mm256_blendv_ps(scaled, _mm256_mul_ps(s1, s1), huge);
        _mm256_blendv_ps(small, far, big)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_sub_sum(scores: &mut [f32], max: f32) -> f64 {
        let m = _mm256_set1_ps(max);
        let mut chunks = scores.chunks_exact_mut(8);
        let mut sum = 0.0f64;
        for c in &mut chunks {
            let v = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m));
            _mm256_storeu_ps(c.as_mut_ptr(), v);
            // (v0+v4, v1+v5, v2+v6, v3+v7), then (h0+h2, h1+h3), then their sum.
            let h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_movehdup_ps(h));
            sum += _mm_cvtss_f32(h) as f64;
        }
        for s in chunks.into_remainder() {
            *s = exp_lane(*s - max);
            sum += *s as f64;
        }
        sum
    }

    /// # Safety
    /// AVX2 and FMA; the three slices have one length.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
        let one = _mm256_set1_ps(1.0);
        let mut os = out.chunks_exact_mut(8);
        let (gs, us) = (gate.chunks_exact(8), up.chunks_exact(8));
        let (g_tail, u_tail) = (gs.remainder(), us.remainder());
        for ((o, g), u) in (&mut os).zip(gs).zip(us) {
            let x = _mm256_loadu_ps(g.as_ptr());
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
            let silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
            let y = _mm256_mul_ps(silu, _mm256_loadu_ps(u.as_ptr()));
            _mm256_storeu_ps(o.as_mut_ptr(), y);
        }
        for ((o, &g), &u) in os.into_remainder().iter_mut().zip(g_tail).zip(u_tail) {
            *o = g / (1.0 + exp_lane(-g)) * u;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values across the whole range: ordinary, near the exponent limits, beyond them.
    fn probes() -> Vec<f32> {
        let mut xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.0625).collect();
        xs.extend([
            -150.0, -103.9, -103.0, -88.7, -87.5, 0.0, -0.0, 1e-30, -1e-30, 88.3, 88.8,
        ]);
        xs.extend([f32::NEG_INFINITY, -1e30, 1e30, f32::INFINITY]);
        xs
    }

    #[test]
    fn lanes_stay_within_two_ulps_of_the_true_exponential() {
        for x in probes() {
            let want = (x as f64).exp();
            let got = exp_lane(x) as f64;
            if want > f32::MAX as f64 {
                assert!(got.is_infinite(), "e^{x} = {got}");
            } else if want < f32::MIN_POSITIVE as f64 {
                assert!(got < f32::MIN_POSITIVE as f64 * 2.0, "e^{x} = {got}");
            } else {
                let ulp = (want as f32).to_bits();
                let diff = (got as f32).to_bits().abs_diff(ulp);
                assert!(diff <= 2, "e^{x}: {got} vs {want} ({diff} ulps)");
            }
        }
    }

    #[test]
    fn simd_equals_the_lane_function_bit_for_bit() {
        if !crate::avx2() {
            return; // nothing to compare on this CPU
        }
        let xs = probes();
        for len in [1, 7, 8, 9, 31, xs.len()] {
            let (mut a, mut b) = (xs[..len].to_vec(), xs[..len].to_vec());
            let (sa, sb) = (
                exp_sub_sum_with(&mut a, 1.5, true),
                exp_sub_sum_with(&mut b, 1.5, false),
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "exp, {len} values");
            assert!(
                sa == sb || (sa.is_nan() && sb.is_nan()),
                "sum, {len} values"
            );
            let up: Vec<f32> = (0..len).map(|i| i as f32 * 0.25 - 3.0).collect();
            let finite: Vec<f32> = xs[..len].iter().map(|x| x.clamp(-200.0, 200.0)).collect();
            let (mut a, mut b) = (vec![0.0; len], vec![0.0; len]);
            swiglu_with(&finite, &up, &mut a, true);
            swiglu_with(&finite, &up, &mut b, false);
            assert_eq!(bits(&a), bits(&b), "swiglu, {len} values");
        }
    }

    #[test]
    fn softmax_sum_adds_each_group_of_eight_in_ggml_order() {
        let mut s: Vec<f32> = (0..11).map(|i| i as f32 * 0.5).collect();
        let sum = exp_sub_sum_with(&mut s, 5.0, false);
        let v = &s;
        let group = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        let want = group as f64 + v[8] as f64 + v[9] as f64 + v[10] as f64;
        assert_eq!(sum, want);
        assert_eq!(s[10], 1.0, "e^0");
    }
}
