//! `ateam doctor [-f FILES]`: every check of this host, its engines and (given) the
//! manifests (`app::doctor`), as text or JSON; fails only on a failed check, since a warning
//! alone must not stop a script that runs it before apply.

use std::path::PathBuf;

use ateam::app::Manifests;
use ateam::app::doctor::{Check, Status, doctor};

use super::exit::Exit;
use crate::cli::{DoctorOutput, Global};

/// Runs every check and prints them; exit 1 when any fails (warnings alone pass).
pub async fn run(global: &Global, files: &[PathBuf], output: DoctorOutput) -> anyhow::Result<Exit> {
    let app = super::common::app(global);
    let manifests = if files.is_empty() {
        None
    } else {
        Some(Manifests::read(files)?)
    };
    let checks = doctor(&app, manifests.as_ref()).await;
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let (failed, warnings) = (count(Status::Fail), count(Status::Warn));
    match output {
        DoctorOutput::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "checks": checks,
                "failed": failed,
                "warnings": warnings,
            }))?
        ),
        DoctorOutput::Text => {
            for c in &checks {
                print_check(c);
            }
            outln!(
                "{}",
                match (failed, warnings) {
                    (0, 0) => "all checks passed".to_string(),
                    (0, w) => format!("no check failed; {w} warning(s)"),
                    (f, w) => format!("{f} check(s) failed, {w} warning(s)"),
                }
            );
        }
    }
    Ok(if failed > 0 { Exit::Differs } else { Exit::Ok })
}

fn print_check(c: &Check) {
    let status = match c.status {
        Status::Ok => "ok",
        Status::Skip => "skip",
        Status::Warn => "warn",
        Status::Fail => "FAIL",
    };
    outln!("{status:<5} {:<9} {}", c.check, c.message);
    if let Some(fix) = &c.fix {
        // Continuation lines (a command to run) line up under the first.
        outln!(
            "{:<15} fix: {}",
            "",
            fix.replace('\n', "\n                     ")
        );
    }
}
