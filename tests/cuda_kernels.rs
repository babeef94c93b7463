//! `specgate check-kernels` as CI and an operator run it: every CUDA kernel source compiles
//! with NVRTC (no GPU needed); a build without the `cuda` feature says so in one line.

use std::process::Command;

fn check_kernels() -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_specgate"))
        .args(["check-kernels", "--arch", "sm_80,sm_90"])
        .output()
        .expect("run");
    let s = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        s(out.stdout),
        s(out.stderr),
    )
}

#[test]
fn check_kernels_compiles_every_source_or_says_why_it_cannot() {
    let (code, stdout, stderr) = check_kernels();
    if !cfg!(feature = "cuda") {
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stderr.contains("built without CUDA"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        return;
    }
    if stderr.contains("libnvrtc was not found") {
        assert!(
            std::env::var_os("SPECGATE_REQUIRE_SERVICES").is_none(),
            "libnvrtc is required here: {stderr}"
        );
        eprintln!("skipped: libnvrtc not found");
        return;
    }
    assert_eq!(code, 0, "{stdout}{stderr}");
    for src in specgate::model::cuda_kernels::SOURCES {
        for arch in ["sm_80", "sm_90"] {
            assert!(
                stdout.contains(&format!("ok {arch} {}:", src.name)),
                "{arch} {}: {stdout}",
                src.name
            );
        }
    }
}
