//! GELU (tanh approximation) as ggml's CPU backend computes it for GEGLU MLPs (Gemma): the
//! input rounded to f16, looked up in a 65 536-entry table of `gelu(x)` rounded to f16, and
//! the bounds ±10 taken as 0 and x. Our logits track llama.cpp's only if the activation
//! rounds the same way, so we build the same table rather than call tanh per value.

use std::sync::OnceLock;

use half::f16;

const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// ggml's `ggml_gelu_f32`.
pub fn gelu_f32(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// `gelu(x)` as f16 bits for every f16 bit pattern x (the CUDA target uploads it, so both
/// devices look up the same values).
pub fn table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(gelu_f32(f16::from_bits(bits).to_f32())).to_bits())
            .collect()
    })
}

/// `out[i] = gelu(gate[i]) · up[i]` (ggml's `geglu`, the f16-table GELU).
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let table = table();
    for ((o, &x), &g) in out.iter_mut().zip(gate).zip(up) {
        *o = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * g
        } else {
            let y = table[f16::from_f32(x).to_bits() as usize];
            f16::from_bits(y).to_f32() * g
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geglu_is_the_f16_table_gelu_times_up() {
        let gate = [-20.0, -10.0, -1.0, 0.0, 0.5, 1.0, 3.0, 9.99, 10.0, 50.0];
        let up = [2.0; 10];
        let mut out = [0.0f32; 10];
        geglu(&gate, &up, &mut out);
        assert_eq!(out[0], 0.0);
        assert_eq!(out[1], 0.0, "ggml takes x <= -10 as 0");
        assert_eq!(out[3], 0.0);
        assert_eq!(out[8], 20.0, "ggml takes x >= 10 as x");
        assert_eq!(out[9], 100.0);
        for i in [2, 4, 5, 6, 7] {
            // Within f16 rounding of the exact GELU, and exactly its f16 value times up.
            let x = f16::from_f32(gate[i]).to_f32();
            let want = f16::from_f32(gelu_f32(x)).to_f32() * 2.0;
            assert_eq!(out[i], want, "x = {}", gate[i]);
            let exact = 0.5 * x as f64 * (1.0 + libm_erf(x as f64 / 2f64.sqrt()));
            assert!((out[i] as f64 / 2.0 - exact).abs() < 2e-3 * exact.abs().max(1.0));
        }
    }

    /// erf by its series (enough terms for |x| ≤ 10): the exact GELU the tanh form tracks.
    fn libm_erf(x: f64) -> f64 {
        if x.abs() > 4.0 {
            return x.signum();
        }
        let (mut term, mut sum, mut n) = (x, x, 0.0);
        while term.abs() > 1e-17 {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }
}
