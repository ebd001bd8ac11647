use std::process::ExitCode;

use crate::cli::{Files, Global, Output};
use ateam::observe::observe;
use ateam::plan::{PlanOptions, plan};
use ateam::report::render_diff;

use super::common::Ctx;

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
    let ctx = Ctx::new(global);
    let desired = ctx.load(files)?;
    let (backend, info) = ctx.connect(&desired.teams).await?;
    let ds = ctx.desired_state(&desired);
    let observed = observe(backend.as_ref(), &info, &ds).await?;
    let p = plan(&ds, &observed, PlanOptions { prune });
    match output {
        Output::Text => print!("{}", render_diff(&p)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&p)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&p)?),
    }
    Ok(!p.is_noop())
}
