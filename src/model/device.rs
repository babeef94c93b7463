//! Which device the target runs on (`--device cpu|cuda|cuda:N|auto`), and the start-up
//! self-check that a GPU computes what the CPU computes before it serves anything.

use std::fmt;
use std::str::FromStr;

use super::{LogitRows, ModelError, TargetBackend};
use specgate_strategies::TokenId;

/// The device named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The CPU (the default and the fallback).
    #[default]
    Cpu,
    /// CUDA device N.
    Cuda(usize),
    /// The first CUDA device when a driver and a device are found, else the CPU.
    Auto,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown device {0:?} (expected cpu, cuda, cuda:N or auto)")]
pub struct BadDevice(String);

impl FromStr for DeviceChoice {
    type Err = BadDevice;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            "auto" => Ok(Self::Auto),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| BadDevice(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Auto => write!(f, "auto"),
        }
    }
}

/// CUDA devices this machine has: 0 without the `cuda` feature or a driver.
pub fn cuda_devices() -> usize {
    #[cfg(feature = "cuda")]
    {
        super::cuda::device_count()
    }
    #[cfg(not(feature = "cuda"))]
    {
        0
    }
}

/// The self-check's limits. Both devices multiply the same integers (GGUF weights and the
/// same 8-bit activations) and differ only in the order floats are added (AVX lanes and f64
/// norm sums on the CPU, 32-lane warp trees on the GPU): ~1e-6 relative per sum. That moves
/// a logit through an activation landing on the other side of an 8-bit rounding step; on
/// this model a *systematic* rounding difference (our kernels vs candle's) moves logits by a
/// median 0.2, at most 4 (tests/engine.rs), so rare flips stay far below these limits, and a
/// wrong kernel (a bad index, a missed row, a wrong mask) lands far above them.
pub const SELF_CHECK_MAX_ABS: f32 = 1.0;
pub const SELF_CHECK_MEDIAN_ABS: f32 = 0.1;
/// Where the CPU's best token leads its second by more than this, the GPU must agree.
pub const SELF_CHECK_CLEAR_GAP: f32 = 0.5;

/// How closely two devices' logits for the same rows agree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agreement {
    pub rows: usize,
    pub max_abs: f32,
    pub median_abs: f32,
    /// Rows with a clear best token (gap above [`SELF_CHECK_CLEAR_GAP`]) the other device
    /// ranks differently.
    pub argmax_flips: usize,
}

impl Agreement {
    pub fn passes(&self) -> bool {
        self.max_abs <= SELF_CHECK_MAX_ABS
            && self.median_abs <= SELF_CHECK_MEDIAN_ABS
            && self.argmax_flips == 0
    }
}

impl fmt::Display for Agreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rows: max |Δlogit| {:.4} (limit {SELF_CHECK_MAX_ABS}), median {:.5} (limit \
             {SELF_CHECK_MEDIAN_ABS}), {} clear argmax flips",
            self.rows, self.max_abs, self.median_abs, self.argmax_flips
        )
    }
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &v)| if v > b.1 { (i, v) } else { b },
        )
        .0
}

/// Compare `other`'s logit rows with `reference`'s ([rows, vocab] each).
pub fn compare_logits(reference: &[f32], other: &[f32], vocab: usize) -> Agreement {
    let mut diffs: Vec<f32> = reference
        .iter()
        .zip(other)
        .map(|(a, b)| (a - b).abs())
        .map(|d| if d.is_nan() { f32::INFINITY } else { d })
        .collect();
    if reference.len() != other.len() {
        diffs.push(f32::INFINITY);
    }
    let mut flips = 0;
    for (r, o) in reference.chunks_exact(vocab).zip(other.chunks_exact(vocab)) {
        let best = argmax(r);
        let second = r
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != best)
            .map(|(_, &v)| v)
            .fold(f32::NEG_INFINITY, f32::max);
        if r[best] - second > SELF_CHECK_CLEAR_GAP && argmax(o) != best {
            flips += 1;
        }
    }
    diffs.sort_by(f32::total_cmp);
    Agreement {
        rows: reference.len() / vocab.max(1),
        max_abs: diffs.last().copied().unwrap_or(0.0),
        median_abs: diffs.get(diffs.len() / 2).copied().unwrap_or(0.0),
        argmax_flips: flips,
    }
}

/// Run `ids` through both targets (all rows' logits, then a short decode) and compare.
pub fn self_check(
    reference: &mut dyn TargetBackend,
    device: &mut dyn TargetBackend,
    ids: &[TokenId],
) -> Result<Agreement, ModelError> {
    let (vocab, expected) = check_run(reference, ids)?;
    let (_, got) = check_run(device, ids)?;
    Ok(compare_logits(&expected, &got, vocab))
}

/// The check's logits on one target: every prompt row, then three one-token steps, each
/// the previous row's best token. Returns (vocab, [rows, vocab]).
fn check_run(m: &mut dyn TargetBackend, ids: &[TokenId]) -> Result<(usize, Vec<f32>), ModelError> {
    let s = m.new_sequence();
    let run = (|| {
        let prefill = m.forward_one(s, ids, LogitRows::All)?;
        let mut out = prefill.logits.clone();
        let mut next = argmax(prefill.row(0, ids.len().saturating_sub(1))) as TokenId;
        for _ in 0..3 {
            let step = m.forward_one(s, &[next], LogitRows::Last)?;
            out.extend_from_slice(&step.logits);
            next = argmax(step.row(0, 0)) as TokenId;
        }
        Ok((prefill.vocab, out))
    })();
    m.release(s);
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print_back() {
        for (s, d) in [
            ("cpu", DeviceChoice::Cpu),
            ("cuda", DeviceChoice::Cuda(0)),
            ("cuda:3", DeviceChoice::Cuda(3)),
            ("auto", DeviceChoice::Auto),
        ] {
            assert_eq!(s.parse::<DeviceChoice>().unwrap(), d);
        }
        assert_eq!(DeviceChoice::Cuda(2).to_string(), "cuda:2");
        for bad in ["tpu", "cuda:", "cuda:x", ""] {
            assert!(bad.parse::<DeviceChoice>().is_err(), "{bad}");
        }
    }

    #[test]
    fn agreement_flags_drift_flips_and_nan() {
        let a = [1.0, 3.0, 0.0, 5.0, 0.0, 0.0];
        assert!(compare_logits(&a, &a, 3).passes());
        let mut b = a;
        b[1] = 3.01;
        let ok = compare_logits(&a, &b, 3);
        assert!((ok.max_abs - 0.01).abs() < 1e-6 && ok.passes(), "{ok}");
        // Row 0's clear best (3 vs 1) moves to token 0.
        let flip = compare_logits(&a, &[3.5, 3.0, 0.0, 5.0, 0.0, 0.0], 3);
        assert_eq!(flip.argmax_flips, 1);
        assert!(!flip.passes());
        let nan = compare_logits(&a, &[f32::NAN, 3.0, 0.0, 5.0, 0.0, 0.0], 3);
        assert!(!nan.passes(), "{nan}");
        assert!(!compare_logits(&a, &a[..3], 3).passes(), "rows missing");
    }
}
