//! Builds `gate/main.rs` and `bridge/main.rs` into static binaries that ateam embeds and
//! mounts into members (see src/runtime/gate.rs). rustc is called directly: each is one
//! std-only file, and static linking must apply to them alone, not to ateam.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    build("gate/main.rs", "ateam_gate", "ateam-gate");
    build("bridge/main.rs", "ateam_bridge", "ateam-bridge");
}

fn build(source: &str, crate_name: &str, file: &str) {
    println!("cargo:rerun-if-changed={source}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join(file);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let status = Command::new(rustc)
        .args([
            "--edition=2024",
            &format!("--crate-name={crate_name}"),
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
        ])
        .args([
            "-C",
            "target-feature=+crt-static",
            "-C",
            "strip=symbols",
            "--target",
            &target,
        ])
        .arg("-o")
        .arg(&out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("running rustc for {source}: {e}"));
    assert!(status.success(), "building {source} failed");
}
