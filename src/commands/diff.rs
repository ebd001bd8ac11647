use std::process::ExitCode;

use crate::cli::{Files, Global, Output};
use ateam::plan::PlanOptions;
use ateam::report::render_diff;

use super::common::app;

/// Exit codes as `kubectl diff`: 0 no change, 1 changes, 2 (or more) an error.
pub async fn run(global: &Global, files: &Files, prune: bool, output: Output) -> ExitCode {
    match diff(global, files, prune, output).await {
        Ok(true) => ExitCode::from(1),
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints the plan; true when it changes anything.
pub async fn diff(
    global: &Global,
    files: &Files,
    prune: bool,
    output: Output,
) -> anyhow::Result<bool> {
    let app = app(global);
    let desired = app.load(&files.files)?;
    let p = app.look(&desired, PlanOptions { prune }).await?.plan;
    match output {
        Output::Text => print!("{}", render_diff(&p)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&p)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&p)?),
    }
    Ok(!p.is_noop())
}
