use std::process::ExitCode;

use crate::cli::{Files, Global, Output};
use ateam::app::Manifests;
use ateam::app::apply::{ApplyOptions, Outcome, apply};
use ateam::plan::Plan;
use ateam::report::render_diff;

use super::common::{app, waiting};
use super::progress::Display;

pub struct Opts {
    pub prune: bool,
    pub dry_run: bool,
    pub concurrency: Option<usize>,
    pub no_wait: bool,
}

pub async fn run(global: &Global, files: &Files, o: Opts) -> anyhow::Result<ExitCode> {
    if o.dry_run {
        return Ok(super::diff::run(global, files, o.prune, Output::Text).await);
    }
    let app = app(global);
    let manifests = Manifests::read(&files.files)?;
    let secret = |name: &str| std::env::var(name).ok();
    let display = Display::new();
    let opts = ApplyOptions {
        prune: o.prune,
        concurrency: o.concurrency,
        no_wait: o.no_wait,
    };
    let report = apply(&app, &manifests, opts, &secret, &display, waiting).await?;
    // What apply leaves alone, in the same words as diff.
    let notes = Plan {
        actions: vec![],
        findings: report.left_alone.clone(),
    };
    eprint!(
        "{}",
        render_diff(&notes)
            .lines()
            .filter(|l| l.starts_with("  "))
            .map(|l| format!("{}\n", l.trim_start()))
            .collect::<String>()
    );
    let members = report.members;
    match &report.outcome {
        Outcome::NoChanges => {
            println!(
                "no changes: {members} member(s) as the manifests say ({})",
                report.engine
            );
        }
        Outcome::Refused(refused) => {
            for f in refused {
                eprintln!("error: {}", f.error);
            }
            eprintln!("{} member(s) refused; nothing was changed", refused.len());
        }
        Outcome::Applied {
            failures,
            not_running,
            finished,
        } => {
            for f in failures {
                eprintln!("error: {}", f.error);
            }
            for (team, member) in finished {
                println!("{team}/{member} finished (exit 0)");
            }
            for n in not_running {
                eprintln!("error: {}/{} {}", n.team, n.member, n.why);
            }
            let failed = failures.len() + not_running.len();
            if failed == 0 {
                println!("applied: {members} member(s) running ({})", report.engine);
            } else {
                eprintln!("{failed} of {members} member(s) not running");
            }
        }
    }
    Ok(if report.converged() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::EXIT_ERROR)
    })
}
