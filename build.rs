//! Builds `gate/main.rs` into a static binary that ateam embeds and mounts into every member
//! (see src/runtime/gate.rs). rustc is called directly: the gate is one std-only file, and
//! static linking must apply to it alone, not to ateam.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=gate/main.rs");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("ateam-gate");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let status = Command::new(rustc)
        .args([
            "--edition=2024",
            "--crate-name=ateam_gate",
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
        .arg("gate/main.rs")
        .status()
        .expect("running rustc for the gate");
    assert!(status.success(), "building gate/main.rs failed");
}
