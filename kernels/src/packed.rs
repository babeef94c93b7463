//! Quantized weights repacked for products over many activation rows.
//!
//! ggml stores a weight matrix feature by feature. Here [`GROUP`] = 16 output features are
//! interleaved four bytes at a time: segment c of a (group, block) holds bytes 4c..4c+4 of
//! each of the 16 features' block, so one 64-byte load gives every feature of the group its
//! next four weights (for 4-bit formats the low nibbles are positions 4c.., the high ones
//! 16 + 4c..). An integer dot instruction then multiplies them with four activation bytes
//! broadcast to every lane, and the per-block scaling runs on 16 features in one vector
//! instead of once per feature: that float work is what made a many-row product expensive.

use half::f16;

use crate::quantize::QK;

/// Output features per interleaved group (one 512-bit register of f32).
pub const GROUP: usize = 16;

/// The GGUF weight formats the kernels read. K-quants are rewritten at load into 32-weight
/// blocks (see [`crate::kquants`]): Q4_K as Q4_1, Q6_K as its own layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantFormat {
    /// 32 weights = f16 d, 16 bytes of nibbles; w = d·(q − 8).
    Q4_0,
    /// 32 weights = f16 d, f16 m, 16 bytes of nibbles; w = d·q + m.
    Q4_1,
    /// 32 weights = f16 d, 32 i8; w = d·q.
    Q8_0,
    /// 32 weights = f16 d, 32 high bits, 16 bytes of nibbles; w = d·(q − 16). In the kernel
    /// layout: Q8_0 blocks of the same d and the values q − 16 (ggml's q5_0 × q8_0 dot takes
    /// the same integer sums and scale products).
    Q5_0,
    /// 256 weights: 6-bit scales and mins per 32, nibbles; w = d·sc·q − dmin·min.
    Q4K,
    /// 256 weights: 6-bit values with an i8 scale per 16; w = d·sc·(q − 32). In the kernel
    /// layout: 32 unsigned 6-bit values per block, one scale per half.
    Q6K,
    /// 256 weights: 5-bit values with 6-bit scales and mins per 32; w = d·sc·q − dmin·min.
    /// In the kernel layout: 32 unsigned 5-bit values as bytes per block, d and m.
    Q5K,
}

impl QuantFormat {
    /// Weights per GGUF block.
    pub fn block_weights(self) -> usize {
        match self {
            Self::Q4K | Self::Q5K | Self::Q6K => crate::kquants::QK_K,
            _ => QK,
        }
    }

    /// Bytes per GGUF block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
            Self::Q5_0 => crate::q5_0::Q5_0_BYTES,
            Self::Q4K => crate::kquants::Q4_K_BYTES,
            Self::Q6K => crate::kquants::Q6_K_BYTES,
            Self::Q5K => crate::kquants::Q5_K_BYTES,
        }
    }

    /// The 32-weight layout the kernels run this format in.
    pub fn kernel(self) -> Self {
        match self {
            Self::Q4K => Self::Q4_1,
            Self::Q5_0 => Self::Q8_0,
            f => f,
        }
    }

    /// Bytes of quantized values per 32 weights, in the kernel layout.
    pub fn quant_bytes(self) -> usize {
        match self.kernel() {
            Self::Q8_0 | Self::Q6K | Self::Q5K => QK,
            _ => QK / 2,
        }
    }

    /// Scales per 32 weights, in the kernel layout (Q6_K: one per half).
    pub fn scales(self) -> usize {
        if self == Self::Q6K {
            2
        } else {
            1
        }
    }

    /// Whether the kernel layout carries a min per block (w = d·q + m).
    pub fn has_min(self) -> bool {
        matches!(self, Self::Q4_1 | Self::Q5K)
    }

    /// 64-byte segments per (group, block).
    pub fn segments(self) -> usize {
        self.quant_bytes() / 4
    }
}

/// Weights feature by feature, as ggml orders them, with scales widened to f32.
#[derive(Debug, Clone, Default)]
pub struct Canonical {
    pub d: Vec<f32>, // [features * blocks * scales]
    pub m: Vec<f32>, // Q4_1 only: [features * blocks]
    pub qs: Vec<u8>, // [features * blocks * quant_bytes]
}

/// A matrix's block scales: f16, as GGUF stores them, where every value is one (a decode
/// step streams all of them: for Q4_1 that is 20 bytes per 32 weights against 24 in f32),
/// else f32 (the K-quants' products of two scales need more bits).
#[derive(Debug, Clone)]
pub enum ScaleVec {
    F32(Vec<f32>),
    F16(Vec<u16>),
}

impl ScaleVec {
    /// f16 when every value survives the round trip bit for bit.
    pub fn narrowest(v: Vec<f32>) -> Self {
        let exact = |x: f32| f16::from_f32(x).to_f32().to_bits() == x.to_bits();
        if v.iter().all(|&x| exact(x)) {
            Self::F16(v.iter().map(|&x| f16::from_f32(x).to_bits()).collect())
        } else {
            Self::F32(v)
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> f32 {
        self.slice(i, 1).get(0)
    }

    fn slice(&self, at: usize, len: usize) -> Scales<'_> {
        match self {
            Self::F32(v) => Scales::F32(&v[at..at + len]),
            Self::F16(v) => Scales::F16(&v[at..at + len]),
        }
    }
}

/// A group's scales as kernels read them.
#[derive(Debug, Clone, Copy)]
pub enum Scales<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
}

impl Scales<'_> {
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Self::F32(v) => v[i],
            Self::F16(v) => f16::from_bits(v[i]).to_f32(),
        }
    }
}

/// Weights of one format in the interleaved layout, padded to whole groups with zeros.
#[derive(Debug, Clone)]
pub struct Packed {
    pub format: QuantFormat,
    pub blocks: usize, // per feature
    pub qs: Vec<u8>,   // [groups][blocks][segments][GROUP][4]
    pub d: ScaleVec,   // [groups][blocks][scales][GROUP]
    pub m: ScaleVec,   // Q4_1 only: [groups][blocks][GROUP]
}

/// One group's weights, as a kernel reads them.
#[derive(Debug, Clone, Copy)]
pub struct GroupView<'a> {
    pub qs: &'a [u8],
    pub d: Scales<'a>,
    pub m: Scales<'a>,
}

impl Packed {
    pub fn pack(format: QuantFormat, features: usize, blocks: usize, c: &Canonical) -> Self {
        let groups = features.div_ceil(GROUP);
        let (qb, segs, ns) = (format.quant_bytes(), format.segments(), format.scales());
        let with_m = format.has_min();
        let mut qs = vec![0; groups * blocks * GROUP * qb];
        let mut d = vec![0.0; groups * blocks * GROUP * ns];
        let mut m = vec![0.0; if with_m { groups * blocks * GROUP } else { 0 }];
        for f in 0..features {
            let (g, lane) = (f / GROUP, f % GROUP);
            for b in 0..blocks {
                let src = f * blocks + b;
                let dst = (g * blocks + b) * GROUP + lane;
                for k in 0..ns {
                    d[((g * blocks + b) * ns + k) * GROUP + lane] = c.d[src * ns + k];
                }
                if with_m {
                    m[dst] = c.m[src];
                }
                let q = &c.qs[src * qb..][..qb];
                for s in 0..segs {
                    let at = ((g * blocks + b) * segs + s) * GROUP * 4 + lane * 4;
                    qs[at..at + 4].copy_from_slice(&q[4 * s..4 * s + 4]);
                }
            }
        }
        Packed {
            format,
            blocks,
            qs,
            d: ScaleVec::narrowest(d),
            m: ScaleVec::narrowest(m),
        }
    }

    /// Back to feature order (for stacking matrices and for tests).
    pub fn unpack(&self, features: usize) -> Canonical {
        let format = self.format;
        let (qb, segs, ns) = (format.quant_bytes(), format.segments(), format.scales());
        let blocks = self.blocks;
        let mut c = Canonical::default();
        for f in 0..features {
            let (g, lane) = (f / GROUP, f % GROUP);
            for b in 0..blocks {
                for k in 0..ns {
                    c.d.push(self.d.get(((g * blocks + b) * ns + k) * GROUP + lane));
                }
                if !self.m.is_empty() {
                    c.m.push(self.m.get((g * blocks + b) * GROUP + lane));
                }
                for s in 0..segs {
                    let at = ((g * blocks + b) * segs + s) * GROUP * 4 + lane * 4;
                    c.qs.extend_from_slice(&self.qs[at..at + 4]);
                }
            }
        }
        debug_assert_eq!(c.qs.len(), features * blocks * qb);
        c
    }

    pub fn group(&self, g: usize) -> GroupView<'_> {
        let n = self.blocks * GROUP;
        let (qn, dn) = (n * self.format.quant_bytes(), n * self.format.scales());
        GroupView {
            qs: &self.qs[g * qn..][..qn],
            d: self.d.slice(g * dn, dn),
            m: if self.m.is_empty() {
                self.m.slice(0, 0)
            } else {
                self.m.slice(g * n, n)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_then_unpack_is_the_identity_with_a_ragged_last_group() {
        for format in [
            QuantFormat::Q4_0,
            QuantFormat::Q4_1,
            QuantFormat::Q8_0,
            QuantFormat::Q6K,
            QuantFormat::Q5K,
        ] {
            let (features, blocks) = (21, 3);
            let n = features * blocks;
            let c = Canonical {
                d: (0..n * format.scales()).map(|i| i as f32).collect(),
                m: if format.has_min() {
                    (0..n).map(|i| -(i as f32)).collect()
                } else {
                    vec![]
                },
                qs: (0..n * format.quant_bytes())
                    .map(|i| (i * 7) as u8)
                    .collect(),
            };
            let p = Packed::pack(format, features, blocks, &c);
            let u = p.unpack(features);
            assert_eq!((u.d, u.m, u.qs), (c.d, c.m, c.qs), "{format:?}");
            // Feature 17 (group 1, lane 1), block 2, segment 1 holds its bytes 4..8.
            let g = p.group(1);
            let at = (2 * format.segments() + 1) * GROUP * 4 + 4;
            let src = (17 * blocks + 2) * format.quant_bytes() + 4;
            assert_eq!(&g.qs[at..at + 4], &c_bytes(format, src));
        }
    }

    #[test]
    fn scales_are_kept_in_f16_only_when_every_value_survives_it() {
        let halves = vec![1.5, -0.25, 0.0, 65504.0, 2f32.powi(-24)];
        let h = ScaleVec::narrowest(halves.clone());
        assert!(matches!(h, ScaleVec::F16(_)));
        assert_eq!((0..5).map(|i| h.get(i)).collect::<Vec<_>>(), halves);
        // One value f16 cannot hold (a K-quant's d·sc) keeps the whole matrix in f32.
        let mixed = vec![1.5, 1.0 + 2f32.powi(-20)];
        let w = ScaleVec::narrowest(mixed.clone());
        assert!(matches!(w, ScaleVec::F32(_)));
        assert_eq!((0..2).map(|i| w.get(i)).collect::<Vec<_>>(), mixed);
    }

    fn c_bytes(format: QuantFormat, at: usize) -> [u8; 4] {
        let _ = format;
        std::array::from_fn(|i| ((at + i) * 7) as u8)
    }
}
