//! A head's weight matrix as Q8_0 (8-bit weights, one scale per 32), run by specgate's
//! quantized matmul kernel. The target's pass before a draft step evicts the heads from cache,
//! so a step is bound by reading their matrices from memory: a quarter of the f32 bytes,
//! integer dot products and both threads make a head's state several times cheaper.

use specgate_kernels::QuantMatrix;

/// A square [hidden, hidden] head matrix in Q8_0.
#[derive(Debug, Clone)]
pub struct Q8Matrix(QuantMatrix);

impl Q8Matrix {
    /// `m` ([hidden, hidden]) quantized; None where the kernel cannot hold it (a hidden size
    /// that is not a whole number of 32-weight blocks): the f32 weights then serve.
    pub fn from_f32(m: &[f32], hidden: usize) -> Option<Self> {
        QuantMatrix::q8_0_from_f32(hidden, hidden, m).ok().map(Self)
    }

    /// The matrix times `x` ([hidden]) → [hidden].
    pub fn mul(&self, x: &[f32]) -> Vec<f32> {
        self.0.matmul(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_stay_within_half_a_step_per_weight_of_the_f32_ones() {
        let d = 64;
        let m: Vec<f32> = (0..d * d)
            .map(|i| (i as f32 * 0.37).sin() * if i % 9 == 0 { 4.0 } else { 1.0 })
            .collect();
        let x: Vec<f32> = (0..d).map(|i| (i as f32 * 0.91).cos()).collect();
        let got = Q8Matrix::from_f32(&m, d)
            .expect("64 is whole blocks")
            .mul(&x);
        for (r, row) in m.chunks_exact(d).enumerate() {
            let want: f32 = row.iter().zip(&x).map(|(a, b)| a * b).sum();
            // Weights move by at most half a step (amax / 254) and the activations, quantized
            // to 8 bits per 32 as well, by half of theirs.
            let bound: f32 = row
                .chunks(32)
                .zip(x.chunks(32))
                .map(|(w, v)| {
                    let amax = |b: &[f32]| b.iter().fold(0.0f32, |a, y| a.max(y.abs()));
                    let (wa, va) = (amax(w), amax(v));
                    32.0 * (wa / 254.0 * va + va / 254.0 * wa)
                })
                .sum();
            assert!(
                (got[r] - want).abs() <= bound,
                "row {r}: {} vs {want}",
                got[r]
            );
        }
        assert!(
            Q8Matrix::from_f32(&[0.0; 16], 4).is_none(),
            "4 columns: no Q8_0 blocks"
        );
    }
}
