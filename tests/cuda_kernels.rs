//! `specgate check-kernels` as CI and an operator run it: every CUDA kernel source compiles
//! with NVRTC (no GPU needed); a build without the `cuda` feature says so in one line.

mod common;

#[test]
fn check_kernels_compiles_every_source_or_says_why_it_cannot() {
    let (code, stdout, stderr) = common::specgate(&["check-kernels", "--arch", "sm_80,sm_90"]);
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
    for src in specgate::model::cuda::kernels::SOURCES {
        for arch in ["sm_80", "sm_90"] {
            assert!(
                stdout.contains(&format!("ok {arch} {}:", src.name)),
                "{arch} {}: {stdout}",
                src.name
            );
        }
    }
}
