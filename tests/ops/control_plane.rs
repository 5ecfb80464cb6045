//! The real control plane's build (scripts/build-controlplane.sh, run by the test command).

use std::path::Path;

/// Without Go the test command stops at the control plane's build and says what to install:
/// the real control plane's tests never skip silently.
#[test]
fn without_go_the_control_plane_s_build_stops_and_names_what_to_install() {
    let bin = tempfile::tempdir().expect("tempdir");
    // A PATH with what the script needs and no Go.
    for tool in [
        "bash",
        "cat",
        "cut",
        "sha256sum",
        "dirname",
        "mkdir",
        "date",
    ] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} on this machine"));
        std::os::unix::fs::symlink(&found, bin.path().join(tool)).expect("link");
    }
    let out = std::process::Command::new(bin.path().join("bash"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-controlplane.sh"))
        .env("PATH", bin.path())
        .env("BOSUN_TOOLS_DIR", bin.path().join("tools"))
        .output()
        .expect("run the build script");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it went on without Go: {said}");
    assert!(
        said.contains("Go is missing") && said.contains("Install Go 1.26"),
        "{said}"
    );
}
