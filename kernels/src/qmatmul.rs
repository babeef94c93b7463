//! `y = x · Wᵀ` for quantized W (GGUF Q4_1 or Q8_0) and f32 rows x.
//!
//! Each activation row is quantized once per call; each weight row is read once and dotted
//! with every activation row while it sits in L1, so a verify pass of k+1 rows costs little
//! more memory traffic than one decode row. Output features are split across rayon threads.
//!
//! Per block the integer products are summed in eight lanes of four consecutive elements and
//! folded into eight f32 accumulators with one fused multiply-add each, then added pairwise at
//! the end: the order of ggml's AVX2 `vec_dot_q4_1_q8_1` / `vec_dot_q8_0_q8_0`, so results
//! track llama.cpp's to float rounding.

use half::f16;
use rayon::prelude::*;

use crate::quantize::{quantize_row_q8, Q8Row, QK};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KernelError {
    #[error("{format:?} weights of {in_dim} columns: not a whole number of 32-blocks")]
    Shape { format: QuantFormat, in_dim: usize },
    #[error("{format:?} data is {got} bytes, expected {expected}")]
    Size {
        format: QuantFormat,
        got: usize,
        expected: usize,
    },
}

/// The weight formats this kernel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantFormat {
    /// 32 weights = f16 d, f16 m, 16 bytes of nibbles; w = d·q + m.
    Q4_1,
    /// 32 weights = f16 d, 32 i8; w = d·q.
    Q8_0,
}

impl QuantFormat {
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
        }
    }
}

/// A quantized weight matrix [out_dim, in_dim], unpacked into flat arrays for streaming.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    format: QuantFormat,
    out_dim: usize,
    in_dim: usize,
    d: Vec<f32>, // [out_dim * blocks]
    m: Vec<f32>, // Q4_1 only: [out_dim * blocks]
    qs: Vec<u8>, // Q4_1: 16 bytes per block; Q8_0: 32 bytes (i8) per block
}

impl QuantMatrix {
    /// From GGUF/ggml block bytes of a [out_dim, in_dim] tensor.
    pub fn from_ggml_bytes(
        format: QuantFormat,
        out_dim: usize,
        in_dim: usize,
        bytes: &[u8],
    ) -> Result<Self, KernelError> {
        if !in_dim.is_multiple_of(QK) {
            return Err(KernelError::Shape { format, in_dim });
        }
        let blocks = out_dim * in_dim / QK;
        let expected = blocks * format.block_bytes();
        if bytes.len() != expected {
            return Err(KernelError::Size {
                format,
                got: bytes.len(),
                expected,
            });
        }
        let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let mut d = Vec::with_capacity(blocks);
        let mut m = Vec::new();
        let mut qs = Vec::with_capacity(blocks * 32);
        for blk in bytes.chunks_exact(format.block_bytes()) {
            d.push(half(&blk[0..2]));
            match format {
                QuantFormat::Q4_1 => {
                    m.push(half(&blk[2..4]));
                    qs.extend_from_slice(&blk[4..20]);
                }
                QuantFormat::Q8_0 => qs.extend_from_slice(&blk[2..34]),
            }
        }
        Ok(Self {
            format,
            out_dim,
            in_dim,
            d,
            m,
            qs,
        })
    }

    pub fn format(&self) -> QuantFormat {
        self.format
    }

    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    /// Dequantized row `r`: [in_dim] (tests and embedding lookups).
    pub fn dequantize_row(&self, r: usize) -> Vec<f32> {
        let nb = self.in_dim / QK;
        let mut out = vec![0.0f32; self.in_dim];
        for b in 0..nb {
            let i = r * nb + b;
            let o = &mut out[b * QK..][..QK];
            match self.format {
                QuantFormat::Q4_1 => {
                    let q = &self.qs[i * 16..][..16];
                    for j in 0..16 {
                        o[j] = self.d[i] * (q[j] & 0xF) as f32 + self.m[i];
                        o[j + 16] = self.d[i] * (q[j] >> 4) as f32 + self.m[i];
                    }
                }
                QuantFormat::Q8_0 => {
                    for (j, &q) in self.qs[i * 32..][..32].iter().enumerate() {
                        o[j] = self.d[i] * (q as i8) as f32;
                    }
                }
            }
        }
        out
    }

    /// `xs`: [rows, in_dim] → [rows, out_dim], using the fastest kernel this CPU runs.
    pub fn matmul(&self, xs: &[f32]) -> Vec<f32> {
        self.matmul_with(xs, simd_available())
    }

    /// The portable reference kernel (same arithmetic, no explicit SIMD target).
    pub fn matmul_reference(&self, xs: &[f32]) -> Vec<f32> {
        self.matmul_with(xs, false)
    }

    fn matmul_with(&self, xs: &[f32], simd: bool) -> Vec<f32> {
        let rows = xs.len() / self.in_dim;
        let acts: Vec<Q8Row> = xs
            .chunks_exact(self.in_dim)
            .map(|x| {
                let mut q = Q8Row::default();
                quantize_row_q8(x, &mut q);
                q
            })
            .collect();
        // Features-major scratch so each thread owns a contiguous chunk: [out_dim, rows].
        let mut t = vec![0.0f32; self.out_dim * rows];
        let chunk = 16usize;
        t.par_chunks_mut(chunk * rows.max(1))
            .enumerate()
            .for_each(|(c, out)| {
                for (k, o) in out.chunks_exact_mut(rows.max(1)).enumerate() {
                    let r = c * chunk + k;
                    for (a, v) in acts.iter().zip(o.iter_mut()) {
                        *v = self.dot(r, a, simd);
                    }
                }
            });
        let mut y = vec![0.0f32; rows * self.out_dim];
        for f in 0..self.out_dim {
            for r in 0..rows {
                y[r * self.out_dim + f] = t[f * rows + r];
            }
        }
        y
    }

    #[inline]
    fn dot(&self, r: usize, a: &Q8Row, simd: bool) -> f32 {
        let nb = self.in_dim / QK;
        let w = WeightRow {
            d: &self.d[r * nb..][..nb],
            m: if self.m.is_empty() {
                &[]
            } else {
                &self.m[r * nb..][..nb]
            },
            qs: match self.format {
                QuantFormat::Q4_1 => &self.qs[r * nb * 16..][..nb * 16],
                QuantFormat::Q8_0 => &self.qs[r * nb * 32..][..nb * 32],
            },
        };
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: `simd` is true only when the CPU reports AVX2 and FMA.
            return unsafe {
                match self.format {
                    QuantFormat::Q4_1 => dot_q4_1_avx2(&w, a),
                    QuantFormat::Q8_0 => dot_q8_0_avx2(&w, a),
                }
            };
        }
        let _ = simd;
        match self.format {
            QuantFormat::Q4_1 => dot_q4_1(&w, a),
            QuantFormat::Q8_0 => dot_q8_0(&w, a),
        }
    }
}

/// One weight row's blocks.
struct WeightRow<'a> {
    d: &'a [f32],
    m: &'a [f32],
    qs: &'a [u8],
}

pub fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// ggml's `hsum_float_8`: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
#[inline(always)]
fn hsum8(a: [f32; 8]) -> f32 {
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

#[inline(always)]
fn dot_q4_1(w: &WeightRow, a: &Q8Row) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for b in 0..w.d.len() {
        let q = &w.qs[b * 16..][..16];
        let y = &a.qs[b * QK..][..QK];
        let mut lane = [0i32; 8];
        for j in 0..16 {
            lane[j / 4] += (q[j] & 0xF) as i32 * y[j] as i32;
            lane[4 + j / 4] += (q[j] >> 4) as i32 * y[j + 16] as i32;
        }
        summs += w.m[b] * a.s[b];
        let dd = w.d[b] * a.d[b];
        for l in 0..8 {
            acc[l] = dd.mul_add(lane[l] as f32, acc[l]);
        }
    }
    hsum8(acc) + summs
}

#[inline(always)]
fn dot_q8_0(w: &WeightRow, a: &Q8Row) -> f32 {
    let mut acc = [0.0f32; 8];
    for b in 0..w.d.len() {
        let q = &w.qs[b * QK..][..QK];
        let y = &a.qs[b * QK..][..QK];
        let mut lane = [0i32; 8];
        for j in 0..QK {
            lane[j / 4] += (q[j] as i8) as i32 * y[j] as i32;
        }
        let dd = w.d[b] * a.d[b];
        for l in 0..8 {
            acc[l] = dd.mul_add(lane[l] as f32, acc[l]);
        }
    }
    hsum8(acc)
}

// AVX2 versions: the same lanes (maddubs pairs bytes, madd pairs those, so i32 lane l holds
// elements 4l..4l+3), the same fused multiply-add per block and the same final fold as the
// portable bodies above, so both give identical results. No i16 saturation is possible:
// Q4_1 pairs reach 2·15·127, Q8_0 pairs (sign trick) 2·127·127, both below 32767.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_q4_1_avx2(w: &WeightRow, a: &Q8Row) -> f32 {
    use std::arch::x86_64::*;
    let nb = w.d.len();
    debug_assert!(w.qs.len() >= nb * 16 && a.qs.len() >= nb * QK && w.m.len() >= nb);
    let low = _mm_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for b in 0..nb {
        // SAFETY: the slices hold nb blocks (asserted above); loads are unaligned.
        let packed = _mm_loadu_si128(w.qs.as_ptr().add(b * 16) as *const __m128i);
        let lo = _mm_and_si128(packed, low);
        let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
        let qx = _mm256_set_m128i(hi, lo);
        let qy = _mm256_loadu_si256(a.qs.as_ptr().add(b * QK) as *const __m256i);
        let lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(qx, qy), ones);
        summs += *w.m.get_unchecked(b) * *a.s.get_unchecked(b);
        let dd = _mm256_set1_ps(*w.d.get_unchecked(b) * *a.d.get_unchecked(b));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(lanes), acc);
    }
    let mut out = [0.0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), acc);
    hsum8(out) + summs
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_q8_0_avx2(w: &WeightRow, a: &Q8Row) -> f32 {
    use std::arch::x86_64::*;
    let nb = w.d.len();
    debug_assert!(w.qs.len() >= nb * QK && a.qs.len() >= nb * QK);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        // SAFETY: the slices hold nb blocks (asserted above); loads are unaligned.
        let qx = _mm256_loadu_si256(w.qs.as_ptr().add(b * QK) as *const __m256i);
        let qy = _mm256_loadu_si256(a.qs.as_ptr().add(b * QK) as *const __m256i);
        let ax = _mm256_sign_epi8(qx, qx);
        let sy = _mm256_sign_epi8(qy, qx);
        let lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), ones);
        let dd = _mm256_set1_ps(*w.d.get_unchecked(b) * *a.d.get_unchecked(b));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(lanes), acc);
    }
    let mut out = [0.0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), acc);
    hsum8(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Random blocks, plus adversarial ones: zero blocks, extreme scales, saturated nibbles.
    fn random_bytes(format: QuantFormat, blocks: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
        let mut out = Vec::with_capacity(blocks * format.block_bytes());
        for b in 0..blocks {
            let d = match b % 5 {
                0 => 0.0,
                1 => 60000.0,
                2 => 1e-7,
                _ => rng.random_range(-0.1f32..0.1),
            };
            out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            if format == QuantFormat::Q4_1 {
                out.extend_from_slice(&f16::from_f32(rng.random_range(-1.0f32..1.0)).to_le_bytes());
            }
            let n = if format == QuantFormat::Q4_1 { 16 } else { 32 };
            for _ in 0..n {
                let v: u8 = if b % 5 == 3 { 0xFF } else { rng.random() };
                out.push(if format == QuantFormat::Q8_0 && v == 0x80 {
                    0x81
                } else {
                    v
                });
            }
        }
        out
    }

    fn exact_f64(m: &QuantMatrix, x: &[f32]) -> Vec<f64> {
        let rows = x.len() / m.in_dim();
        let mut y = vec![0.0f64; rows * m.out_dim()];
        for r in 0..rows {
            for f in 0..m.out_dim() {
                let w = m.dequantize_row(f);
                let xr = &x[r * m.in_dim()..][..m.in_dim()];
                y[r * m.out_dim() + f] = w.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
            }
        }
        y
    }

    #[test]
    fn simd_equals_reference_and_both_track_the_float_product() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for format in [QuantFormat::Q4_1, QuantFormat::Q8_0] {
            let (out_dim, in_dim) = (37, 96);
            let bytes = random_bytes(format, out_dim * in_dim / QK, &mut rng);
            let m = QuantMatrix::from_ggml_bytes(format, out_dim, in_dim, &bytes).unwrap();
            for rows in 1..=33 {
                let x: Vec<f32> = (0..rows * in_dim)
                    .map(|i| {
                        if i % 97 == 0 {
                            0.0
                        } else {
                            rng.random_range(-3.0f32..3.0)
                        }
                    })
                    .collect();
                let fast = m.matmul(&x);
                let reference = m.matmul_reference(&x);
                assert_eq!(
                    fast, reference,
                    "{format:?} rows {rows}: SIMD must equal reference"
                );
                // Against the unquantized product: 8-bit activations cost at most ~1% of the
                // row's magnitude.
                let exact = exact_f64(&m, &x);
                for (i, (&got, &want)) in reference.iter().zip(&exact).enumerate() {
                    let f = i % out_dim;
                    let scale: f64 = m
                        .dequantize_row(f)
                        .iter()
                        .map(|w| w.abs() as f64)
                        .sum::<f64>()
                        * 3.0;
                    assert!(
                        (got as f64 - want).abs() <= 0.01 * scale + 1e-6,
                        "{format:?} rows {rows} [{i}]: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(QuantMatrix::from_ggml_bytes(QuantFormat::Q8_0, 2, 33, &[0; 68]).is_err());
        assert!(QuantMatrix::from_ggml_bytes(QuantFormat::Q4_1, 2, 32, &[0; 39]).is_err());
    }
}
