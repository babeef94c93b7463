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

use std::sync::OnceLock;

use half::f16;
use rayon::prelude::*;

use crate::dot::{self, WeightRow};
use crate::dot512::PairedRows;
use crate::quantize::{quantize_rows, Q8Batch, QK};

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

    /// Stack matrices with the same format and input width into one (fused Q/K/V or
    /// gate/up projections: one pass over the activations, one thread dispatch).
    pub fn concat(parts: &[&QuantMatrix]) -> Option<QuantMatrix> {
        let first = parts.first()?;
        if parts
            .iter()
            .any(|p| p.format != first.format || p.in_dim != first.in_dim)
        {
            return None;
        }
        Some(QuantMatrix {
            format: first.format,
            out_dim: parts.iter().map(|p| p.out_dim).sum(),
            in_dim: first.in_dim,
            d: parts.iter().flat_map(|p| p.d.iter().copied()).collect(),
            m: parts.iter().flat_map(|p| p.m.iter().copied()).collect(),
            qs: parts.iter().flat_map(|p| p.qs.iter().copied()).collect(),
        })
    }

    /// `xs`: [rows, in_dim] → [rows, out_dim], using the fastest kernel this CPU runs.
    pub fn matmul(&self, xs: &[f32]) -> Vec<f32> {
        self.matmul_with(xs, Isa::detect())
    }

    /// The same product with a chosen instruction set (tests compare them all).
    pub fn matmul_with(&self, xs: &[f32], isa: Isa) -> Vec<f32> {
        let acts = quantize_rows(xs, self.in_dim);
        let rows = acts.rows;
        if rows == 0 {
            return Vec::new();
        }
        // Two rows per 512-bit register pay from two rows on; one row runs 256 bits wide.
        let paired = (isa == Isa::Avx512Vnni && rows >= 2).then(|| PairedRows::from_batch(&acts));
        // Each task computes a chunk of output features for every row (features-major in a
        // small per-thread buffer) and writes its columns of `y` itself.
        let mut y = vec![0.0f32; rows * self.out_dim];
        let out = SharedOut(y.as_mut_ptr());
        let features_per_task = 32;
        let tasks = self.out_dim.div_ceil(features_per_task);
        (0..tasks).into_par_iter().for_each_init(Vec::new, |local, c| {
            let features = c * features_per_task..((c + 1) * features_per_task).min(self.out_dim);
            local.clear();
            local.resize(features.len() * rows, 0.0);
            for (f, o) in features.clone().zip(local.chunks_exact_mut(rows)) {
                match &paired {
                    Some(p) => self.row_dots_paired(f, p, o),
                    None => self.row_dots(f, &acts, o, isa),
                }
            }
            for r in 0..rows {
                // SAFETY: tasks write disjoint column ranges of `y`, which outlives the loop.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        out.at(r * self.out_dim + features.start),
                        features.len(),
                    )
                };
                for (k, d) in dst.iter_mut().enumerate() {
                    *d = local[k * rows + r];
                }
            }
        });
        y
    }

    /// Weight row `f` as the kernels read it.
    fn weight_row(&self, f: usize) -> WeightRow<'_> {
        let nb = self.in_dim / QK;
        WeightRow {
            d: &self.d[f * nb..][..nb],
            m: if self.m.is_empty() {
                &[]
            } else {
                &self.m[f * nb..][..nb]
            },
            qs: match self.format {
                QuantFormat::Q4_1 => &self.qs[f * nb * 16..][..nb * 16],
                QuantFormat::Q8_0 => &self.qs[f * nb * QK..][..nb * QK],
            },
        }
    }

    /// Weight row `f` dotted with every activation row, in tiles of up to 4 rows.
    fn row_dots(&self, f: usize, acts: &Q8Batch, out: &mut [f32], isa: Isa) {
        let w = self.weight_row(f);
        let mut r0 = 0;
        while r0 < out.len() {
            let n = (out.len() - r0).min(4);
            tile(self.format, isa, n, &w, acts, r0, &mut out[r0..r0 + n]);
            r0 += n;
        }
    }
}

/// The output of a product, written by every task at its own columns.
struct SharedOut(*mut f32);

// SAFETY: tasks only write disjoint ranges through it (see `matmul_with`).
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn at(&self, i: usize) -> *mut f32 {
        // SAFETY: callers index inside the output vector.
        unsafe { self.0.add(i) }
    }
}

/// The instruction set a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Portable,
    Avx2,
    AvxVnni,
    /// AVX-512 F/BW/VNNI: two activation rows per register from two rows on.
    Avx512Vnni,
}

impl Isa {
    const ALL: [Isa; 4] = [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni];

    /// Whether this CPU runs `self`.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            match self {
                Isa::Portable => true,
                Isa::Avx2 => avx2,
                Isa::AvxVnni => avx2 && is_x86_feature_detected!("avxvnni"),
                Isa::Avx512Vnni => {
                    avx2 && is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bw")
                        && is_x86_feature_detected!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Isa::Portable
        }
    }

    /// The best this CPU supports (checked once). `SPECGATE_ISA=avx2|avxvnni|portable` caps it
    /// (benchmarks compare kernels that way).
    pub fn detect() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            let cap = std::env::var("SPECGATE_ISA").ok();
            let capped = |i: &Isa| match cap.as_deref() {
                Some("portable") => *i == Isa::Portable,
                Some("avx2") => *i <= Isa::Avx2,
                Some("avxvnni") => *i <= Isa::AvxVnni,
                _ => true,
            };
            Self::ALL
                .into_iter()
                .rev()
                .find(|i| capped(i) && i.supported())
                .unwrap_or(Isa::Portable)
        })
    }

    /// Every instruction set this CPU can run (for tests).
    pub fn available() -> Vec<Isa> {
        Self::ALL.into_iter().filter(|i| i.supported()).collect()
    }
}

impl PartialOrd for Isa {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some((*self as u8).cmp(&(*other as u8)))
    }
}

impl QuantMatrix {
    /// Weight row `f` dotted with every (paired) activation row, in tiles of up to 4 pairs.
    fn row_dots_paired(&self, f: usize, acts: &PairedRows, out: &mut [f32]) {
        let w = self.weight_row(f);
        let pairs = acts.rows / 2;
        let mut p0 = 0;
        while p0 < pairs {
            let n = (pairs - p0).min(4);
            let rows = 2 * p0..(2 * (p0 + n)).min(out.len());
            paired_tile(self.format, n, &w, acts, p0, &mut out[rows]);
            p0 += n;
        }
    }
}

/// Dispatch one paired tile of `n` (1..=4) pairs. Only called when AVX-512 VNNI was detected.
fn paired_tile(
    format: QuantFormat,
    n: usize,
    w: &WeightRow,
    a: &PairedRows,
    p0: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::dot512::x86::*;
        macro_rules! by_size {
            ($k:ident) => {
                // SAFETY: paired rows exist only when Isa::Avx512Vnni is supported; the weight
                // row and the paired activations hold `nb` blocks, and `d`/`s` are padded.
                unsafe {
                    match n {
                        4 => $k::<4>(w, a, p0, out),
                        3 => $k::<3>(w, a, p0, out),
                        2 => $k::<2>(w, a, p0, out),
                        _ => $k::<1>(w, a, p0, out),
                    }
                }
            };
        }
        match format {
            QuantFormat::Q4_1 => by_size!(q4_1_pairs),
            QuantFormat::Q8_0 => by_size!(q8_0_pairs),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (format, n, w, a, p0, out);
        unreachable!("paired tiles are x86-64 only");
    }
}

/// Dispatch one tile of `n` (1..=4) rows to the kernel for `format` and `isa`.
fn tile(
    format: QuantFormat,
    isa: Isa,
    n: usize,
    w: &WeightRow,
    a: &Q8Batch,
    r0: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        use dot::x86::*;
        macro_rules! by_size {
            ($k:ident) => {
                // SAFETY: `isa` comes from Isa::detect (or is below it), so the CPU has the
                // features; the weight row and activations hold `nb` blocks per row.
                unsafe {
                    match n {
                        4 => $k::<4>(w, a, r0, out),
                        3 => $k::<3>(w, a, r0, out),
                        2 => $k::<2>(w, a, r0, out),
                        _ => $k::<1>(w, a, r0, out),
                    }
                }
            };
        }
        match (format, isa) {
            // One row on AVX-512 machines: 256-bit registers, the VNNI instruction.
            (QuantFormat::Q4_1, Isa::Avx512Vnni) => return by_size!(q4_1_vnni_vl),
            (QuantFormat::Q8_0, Isa::Avx512Vnni) => return by_size!(q8_0_vnni_vl),
            (QuantFormat::Q4_1, Isa::AvxVnni) => return by_size!(q4_1_vnni),
            (QuantFormat::Q8_0, Isa::AvxVnni) => return by_size!(q8_0_vnni),
            (QuantFormat::Q4_1, Isa::Avx2) => return by_size!(q4_1_avx2),
            (QuantFormat::Q8_0, Isa::Avx2) => return by_size!(q8_0_avx2),
            _ => {}
        }
    }
    let _ = n;
    match format {
        QuantFormat::Q4_1 => dot::q4_1_portable(w, a, r0, out),
        QuantFormat::Q8_0 => dot::q8_0_portable(w, a, r0, out),
    }
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
                let reference = m.matmul_with(&x, Isa::Portable);
                if rows == 1 {
                    eprintln!("kernels compared: {:?}", Isa::available());
                }
                for isa in Isa::available() {
                    let got = m.matmul_with(&x, isa);
                    assert_eq!(
                        got, reference,
                        "{format:?} {isa:?} rows {rows}: must equal portable"
                    );
                }
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
