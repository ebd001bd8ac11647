//! `ateam diff -f FILES`: the plan apply would carry out, without carrying it out. Its exit
//! code is `kubectl diff`'s, the same verdict as `status --exit-code`, so scripts can gate on it.

use crate::cli::{Files, Global, Output};
use ateam::plan::PlanOptions;
use ateam::report::{diff_document, render_diff};

use super::common::app;
use super::exit::Exit;
use super::output::print_document;

/// Prints the plan. Exit codes as `kubectl diff`: 0 no change, 1 changes or drift (the
/// verdict `status --exit-code` gives too), an error 2 or more.
pub async fn run(
    global: &Global,
    files: &Files,
    prune: bool,
    output: Output,
) -> anyhow::Result<Exit> {
    let app = app(global);
    let desired = app.load(&files.files)?;
    let look = app.look(&desired, PlanOptions::pruning(prune)).await?;
    let secret = |name: &str| std::env::var(name).ok();
    let refused = app.would_refuse(&look, &secret);
    let p = look.plan;
    match output {
        Output::Text => {
            out!("{}", render_diff(&p));
            // What apply would refuse before its first change, all of it, as apply says it.
            for f in &refused {
                eprintln!("apply would refuse: {}", f.error);
            }
        }
        Output::Json | Output::Yaml => print_document(&diff_document(&p), output == Output::Yaml)?,
    }
    Ok(Exit::verdict(p.drifted() || !refused.is_empty()))
}
