//! `y = x · Wᵀ` for quantized W (GGUF Q4_0, Q4_1, Q8_0, Q4_K or Q6_K) and f32 rows x.
//!
//! Each activation row is quantized to 8 bits once per call (ggml's `quantize_row_q8_1`);
//! weights are kept in the interleaved layout of [`crate::packed`], and each group of 16
//! output features is read once for all activation rows of a call while it sits in L1, so a
//! verify pass of k+1 rows costs little more memory traffic than one decode row, and its
//! float work is one vector operation per block, row and 16 features. Groups are split
//! across the threads of [`crate::pool::SpinPool`]; each task writes its own columns of the
//! output.

use std::sync::OnceLock;

use half::f16;

use crate::gemm::{self, format_tag, Q4_0, Q4_1, Q5_K, Q6_K, Q8_0};
pub use crate::packed::QuantFormat;
use crate::packed::{Canonical, GroupView, Packed, GROUP};
use crate::quantize::{quantize_rows_into, quantize_rows_k_into, Q8Batch, QK};
use crate::{kquants, q5_0};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KernelError {
    #[error("{format:?} weights of {in_dim} columns: not a whole number of blocks")]
    Shape { format: QuantFormat, in_dim: usize },
    #[error("{format:?} data is {got} bytes, expected {expected}")]
    Size {
        format: QuantFormat,
        got: usize,
        expected: usize,
    },
}

/// Activation rows per kernel call (a tile): each unpacked weight block serves all of them.
const TILE: usize = 8;

/// Groups of 16 features per thread task.
const GROUPS_PER_TASK: usize = 2;

/// A quantized weight matrix [out_dim, in_dim] in the interleaved layout.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    out_dim: usize,
    in_dim: usize,
    packed: Packed,
    /// Activations quantized per 256 as ggml's q8_K (K-quant weights), else per 32.
    per_256: bool,
}

impl QuantMatrix {
    /// From GGUF/ggml block bytes of a [out_dim, in_dim] tensor.
    pub fn from_ggml_bytes(
        format: QuantFormat,
        out_dim: usize,
        in_dim: usize,
        bytes: &[u8],
    ) -> Result<Self, KernelError> {
        if !in_dim.is_multiple_of(format.block_weights()) {
            return Err(KernelError::Shape { format, in_dim });
        }
        let expected = out_dim * in_dim / format.block_weights() * format.block_bytes();
        if bytes.len() != expected {
            return Err(KernelError::Size {
                format,
                got: bytes.len(),
                expected,
            });
        }
        let c = match format {
            QuantFormat::Q4K => kquants::q4_k_as_q4_1(bytes),
            QuantFormat::Q6K => kquants::q6_k_as_halves(bytes),
            QuantFormat::Q5K => kquants::q5_k_as_bytes(bytes),
            QuantFormat::Q5_0 => q5_0::q5_0_as_q8_0(bytes),
            _ => simple_blocks(format, bytes),
        };
        Ok(Self {
            out_dim,
            in_dim,
            packed: Packed::pack(format.kernel(), out_dim, in_dim / QK, &c),
            per_256: format.block_weights() == kquants::QK_K,
        })
    }

    /// A [out_dim, in_dim] f32 matrix quantized to Q8_0 by the activations' quantizer
    /// ([`crate::quantize_rows`]: per 32 weights, d = amax / 127 stored as f16, values rounded
    /// half to even).
    pub fn q8_0_from_f32(
        out_dim: usize,
        in_dim: usize,
        weights: &[f32],
    ) -> Result<Self, KernelError> {
        let format = QuantFormat::Q8_0;
        if weights.len() != out_dim * in_dim {
            let expected = out_dim * in_dim;
            return Err(KernelError::Size {
                format,
                got: weights.len(),
                expected,
            });
        }
        if !in_dim.is_multiple_of(QK) {
            return Err(KernelError::Shape { format, in_dim });
        }
        let q = crate::quantize_rows(weights, in_dim);
        let mut bytes = Vec::with_capacity(q.d.len() * format.block_bytes());
        for (d, qs) in q.d.iter().zip(q.qs.chunks_exact(QK)) {
            bytes.extend(f16::from_f32(*d).to_le_bytes());
            bytes.extend(qs.iter().map(|&x| x as u8));
        }
        Self::from_ggml_bytes(format, out_dim, in_dim, &bytes)
    }

    pub fn format(&self) -> QuantFormat {
        self.packed.format
    }

    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    /// Dequantized row `r`: [in_dim] (tests).
    pub fn dequantize_row(&self, r: usize) -> Vec<f32> {
        let c = self.packed.unpack(r + 1);
        let (nb, qb) = (self.in_dim / QK, self.format().quant_bytes());
        let mut out = vec![0.0f32; self.in_dim];
        for b in 0..nb {
            let i = r * nb + b;
            let (d, q) = (c.d[i * self.format().scales()], &c.qs[i * qb..][..qb]);
            let o = &mut out[b * QK..][..QK];
            match self.format() {
                QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                    let (offset, m) = match self.format() {
                        QuantFormat::Q4_1 => (0.0, c.m[i]),
                        _ => (-8.0, 0.0),
                    };
                    for j in 0..16 {
                        o[j] = d * ((q[j] & 0xF) as f32 + offset) + m;
                        o[j + 16] = d * ((q[j] >> 4) as f32 + offset) + m;
                    }
                }
                QuantFormat::Q8_0 => {
                    for (j, &v) in q.iter().enumerate() {
                        o[j] = d * (v as i8) as f32;
                    }
                }
                QuantFormat::Q5K => {
                    for (j, &v) in q.iter().enumerate() {
                        o[j] = d * v as f32 + c.m[i];
                    }
                }
                QuantFormat::Q6K => {
                    for (j, &v) in q.iter().enumerate() {
                        o[j] = c.d[2 * i + j / 16] * (v as i32 - 32) as f32;
                    }
                }
                QuantFormat::Q4K | QuantFormat::Q5_0 => {
                    unreachable!("Q4_K is held as Q4_1, Q5_0 as Q8_0")
                }
            }
        }
        out
    }

    /// Stack matrices with the same format and input width into one (fused Q/K/V or
    /// gate/up projections: one pass over the activations, one thread dispatch).
    pub fn concat(parts: &[&QuantMatrix]) -> Option<QuantMatrix> {
        let first = parts.first()?;
        if parts.iter().any(|p| {
            p.format() != first.format() || p.in_dim != first.in_dim || p.per_256 != first.per_256
        }) {
            return None;
        }
        let mut c = Canonical::default();
        for p in parts {
            let u = p.packed.unpack(p.out_dim);
            c.d.extend(u.d);
            c.m.extend(u.m);
            c.qs.extend(u.qs);
        }
        let out_dim = parts.iter().map(|p| p.out_dim).sum();
        let packed = Packed::pack(first.format(), out_dim, first.in_dim / QK, &c);
        Some(QuantMatrix {
            out_dim,
            in_dim: first.in_dim,
            packed,
            per_256: first.per_256,
        })
    }

    /// `xs`: [rows, in_dim] → [rows, out_dim], using the fastest kernel this CPU runs.
    pub fn matmul(&self, xs: &[f32]) -> Vec<f32> {
        self.matmul_with(xs, Isa::detect())
    }

    /// The same product with a chosen instruction set (tests compare them all); one this CPU
    /// cannot run falls back to the portable kernel.
    pub fn matmul_with(&self, xs: &[f32], isa: Isa) -> Vec<f32> {
        let mut y = vec![0.0f32; xs.len() / self.in_dim * self.out_dim];
        self.matmul_into_with(xs, &mut Q8Batch::default(), &mut y, isa);
        y
    }

    /// [`QuantMatrix::matmul`] into `y` ([rows, out_dim], every element overwritten), with
    /// the quantized activations in `acts`: nothing is allocated once `acts` has grown to the
    /// call's size, so a caller that keeps both buffers allocates nothing per call.
    pub fn matmul_into(&self, xs: &[f32], acts: &mut Q8Batch, y: &mut [f32]) {
        self.matmul_into_with(xs, acts, y, Isa::detect());
    }

    /// [`QuantMatrix::matmul_into`] with a chosen instruction set.
    pub fn matmul_into_with(&self, xs: &[f32], acts: &mut Q8Batch, y: &mut [f32], isa: Isa) {
        let isa = if isa.supported() { isa } else { Isa::Portable };
        match self.per_256 {
            true => quantize_rows_k_into(xs, self.in_dim, acts),
            false => quantize_rows_into(xs, self.in_dim, crate::avx2(), acts),
        }
        let rows = acts.rows;
        assert_eq!(y.len(), rows * self.out_dim, "output shape");
        if rows == 0 {
            return;
        }
        let acts = &*acts;
        let out = SharedOut(y.as_mut_ptr());
        let groups = self.out_dim.div_ceil(GROUP);
        let tasks = groups.div_ceil(GROUPS_PER_TASK);
        let body = |task: usize| {
            let first = task * GROUPS_PER_TASK;
            let mut local = [[0.0f32; GROUP]; TILE];
            for g in first..(first + GROUPS_PER_TASK).min(groups) {
                let view = self.packed.group(g);
                let features = g * GROUP..((g + 1) * GROUP).min(self.out_dim);
                for r0 in (0..rows).step_by(TILE) {
                    let n = (rows - r0).min(TILE);
                    tile(self.format(), isa, &view, acts, r0, &mut local[..n]);
                    for (r, lanes) in (r0..).zip(&local[..n]) {
                        // SAFETY: in bounds (r < rows, features within out_dim, checked
                        // above); tasks write disjoint column ranges of `y`, which outlives
                        // them.
                        let dst = out.at(r * self.out_dim + features.start);
                        if features.len() == GROUP {
                            // A constant length copies inline: a `memcpy` call per group and
                            // row cost about 1% of an 8-row verify pass.
                            unsafe { std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, GROUP) };
                        } else {
                            let dst =
                                unsafe { std::slice::from_raw_parts_mut(dst, features.len()) };
                            dst.copy_from_slice(&lanes[..features.len()]);
                        }
                    }
                }
            }
        };
        crate::pool::SpinPool::global().for_each(tasks, &body);
    }
}

/// 32-weight GGUF blocks (Q4_0, Q4_1, Q8_0) in feature order, scales widened to f32.
fn simple_blocks(format: QuantFormat, bytes: &[u8]) -> Canonical {
    let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    let mut c = Canonical::default();
    let scales = format.block_bytes() - format.quant_bytes();
    for blk in bytes.chunks_exact(format.block_bytes()) {
        c.d.push(half(&blk[0..2]));
        if format == QuantFormat::Q4_1 {
            c.m.push(half(&blk[2..4]));
        }
        c.qs.extend_from_slice(&blk[scales..]);
    }
    c
}

/// The output of a product, written by every task at its own columns.
struct SharedOut(*mut f32);

// SAFETY: tasks only write disjoint ranges through it (see `matmul_with`).
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn at(&self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// The instruction set a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Portable,
    Avx2,
    AvxVnni,
    /// AVX-512 F/BW/VNNI: a whole group of 16 features per register.
    Avx512Vnni,
}

impl Isa {
    const ALL: [Isa; 4] = [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni];

    /// Whether this CPU runs `self`.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
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

/// Run one tile of `out.len()` (1..=TILE) rows on the kernel for `format` and `isa`.
fn tile(
    format: QuantFormat,
    isa: Isa,
    g: &GroupView,
    a: &Q8Batch,
    r0: usize,
    out: &mut [[f32; GROUP]],
) {
    macro_rules! sized {
        ($k:ident, $f:expr) => {
            match out.len() {
                8 => $k::<$f, 8>(g, a, r0, out),
                7 => $k::<$f, 7>(g, a, r0, out),
                6 => $k::<$f, 6>(g, a, r0, out),
                5 => $k::<$f, 5>(g, a, r0, out),
                4 => $k::<$f, 4>(g, a, r0, out),
                3 => $k::<$f, 3>(g, a, r0, out),
                2 => $k::<$f, 2>(g, a, r0, out),
                _ => $k::<$f, 1>(g, a, r0, out),
            }
        };
    }
    macro_rules! formats {
        ($k:ident) => {
            match format_tag(format) {
                Q4_0 => sized!($k, Q4_0),
                Q4_1 => sized!($k, Q4_1),
                Q6_K => sized!($k, Q6_K),
                Q5_K => sized!($k, Q5_K),
                _ => sized!($k, Q8_0),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    {
        use gemm::{x86::*, x86_256::*};
        // SAFETY: `matmul_with` only passes an `isa` this CPU supports; the group view and
        // activations hold `a.blocks` blocks and the tile's rows.
        unsafe {
            match isa {
                Isa::Avx512Vnni => return formats!(tile512),
                Isa::AvxVnni => return formats!(tile_vnni),
                Isa::Avx2 => return formats!(tile_avx2),
                Isa::Portable => {}
            }
        }
    }
    let _ = isa;
    match format_tag(format) {
        Q4_0 => gemm::portable::<Q4_0>(g, a, r0, out),
        Q4_1 => gemm::portable::<Q4_1>(g, a, r0, out),
        Q6_K => gemm::portable::<Q6_K>(g, a, r0, out),
        Q5_K => gemm::portable::<Q5_K>(g, a, r0, out),
        _ => gemm::portable::<Q8_0>(g, a, r0, out),
    }
}
