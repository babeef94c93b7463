//! Quantized weights repacked for products over many activation rows.
//!
//! ggml stores a weight matrix feature by feature. Here [`GROUP`] = 16 output features are
//! interleaved four bytes at a time: segment c of a (group, block) holds bytes 4c..4c+4 of
//! each of the 16 features' block, so one 64-byte load gives every feature of the group its
//! next four weights (for 4-bit formats the low nibbles are positions 4c.., the high ones
//! 16 + 4c..). An integer dot instruction then multiplies them with four activation bytes
//! broadcast to every lane, and the per-block scaling runs on 16 features in one vector
//! instead of once per feature: that float work is what made a many-row product expensive.

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
    /// 256 weights: 6-bit scales and mins per 32, nibbles; w = d·sc·q − dmin·min.
    Q4K,
    /// 256 weights: 6-bit values with an i8 scale per 16; w = d·sc·(q − 32). In the kernel
    /// layout: 32 unsigned 6-bit values per block, one scale per half.
    Q6K,
}

impl QuantFormat {
    /// Weights per GGUF block.
    pub fn block_weights(self) -> usize {
        match self {
            Self::Q4K | Self::Q6K => crate::kquants::QK_K,
            _ => QK,
        }
    }

    /// Bytes per GGUF block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
            Self::Q4K => crate::kquants::Q4_K_BYTES,
            Self::Q6K => crate::kquants::Q6_K_BYTES,
        }
    }

    /// The 32-weight layout the kernels run this format in.
    pub fn kernel(self) -> Self {
        match self {
            Self::Q4K => Self::Q4_1,
            f => f,
        }
    }

    /// Bytes of quantized values per 32 weights, in the kernel layout.
    pub fn quant_bytes(self) -> usize {
        match self.kernel() {
            Self::Q8_0 | Self::Q6K => QK,
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

/// Weights of one format in the interleaved layout, padded to whole groups with zeros.
#[derive(Debug, Clone)]
pub struct Packed {
    pub format: QuantFormat,
    pub blocks: usize, // per feature
    pub qs: Vec<u8>,   // [groups][blocks][segments][GROUP][4]
    pub d: Vec<f32>,   // [groups][blocks][scales][GROUP]
    pub m: Vec<f32>,   // Q4_1 only: [groups][blocks][GROUP]
}

/// One group's weights, as a kernel reads them.
#[derive(Debug, Clone, Copy)]
pub struct GroupView<'a> {
    pub qs: &'a [u8],
    pub d: &'a [f32],
    pub m: &'a [f32],
}

impl Packed {
    pub fn pack(format: QuantFormat, features: usize, blocks: usize, c: &Canonical) -> Self {
        let groups = features.div_ceil(GROUP);
        let (qb, segs, ns) = (format.quant_bytes(), format.segments(), format.scales());
        let with_m = format == QuantFormat::Q4_1;
        let mut out = Packed {
            format,
            blocks,
            qs: vec![0; groups * blocks * GROUP * qb],
            d: vec![0.0; groups * blocks * GROUP * ns],
            m: vec![0.0; if with_m { groups * blocks * GROUP } else { 0 }],
        };
        for f in 0..features {
            let (g, lane) = (f / GROUP, f % GROUP);
            for b in 0..blocks {
                let src = f * blocks + b;
                let dst = (g * blocks + b) * GROUP + lane;
                for k in 0..ns {
                    out.d[((g * blocks + b) * ns + k) * GROUP + lane] = c.d[src * ns + k];
                }
                if with_m {
                    out.m[dst] = c.m[src];
                }
                let q = &c.qs[src * qb..][..qb];
                for s in 0..segs {
                    let at = ((g * blocks + b) * segs + s) * GROUP * 4 + lane * 4;
                    out.qs[at..at + 4].copy_from_slice(&q[4 * s..4 * s + 4]);
                }
            }
        }
        out
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
                    c.d.push(self.d[((g * blocks + b) * ns + k) * GROUP + lane]);
                }
                if !self.m.is_empty() {
                    c.m.push(self.m[(g * blocks + b) * GROUP + lane]);
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
            d: &self.d[g * dn..][..dn],
            m: if self.m.is_empty() {
                &[]
            } else {
                &self.m[g * n..][..n]
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
        ] {
            let (features, blocks) = (21, 3);
            let n = features * blocks;
            let c = Canonical {
                d: (0..n * format.scales()).map(|i| i as f32).collect(),
                m: if format == QuantFormat::Q4_1 {
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

    fn c_bytes(format: QuantFormat, at: usize) -> [u8; 4] {
        let _ = format;
        std::array::from_fn(|i| ((at + i) * 7) as u8)
    }
}
