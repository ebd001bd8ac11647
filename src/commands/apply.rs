use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{Files, Global, Output};
use ateam::core::container::{is_replacement, labels};
use ateam::execute::{Executor, default_concurrency};
use ateam::observe::observe;
use ateam::plan::{ContainerState, Finding, PlanOptions, plan};
use ateam::report::render_diff;

use super::common::Ctx;
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
    let ctx = Ctx::new(global);
    let manifests = super::validate::read(files)?;
    // Refused manifests are refused before the store is touched (not even its lock)...
    ctx.judge(&manifests)?;
    let _lock = ctx
        .store
        .lock(o.no_wait, |holder| {
            eprintln!("waiting for another ateam command to finish ({holder})...")
        })
        .context("locking the state folder")?;
    // ...and judged again under the lock, against the teams stored by an apply that held it.
    let desired = ctx.judge(&manifests)?;
    let (backend, info) = ctx.connect(&desired.teams).await?;
    let ds = ctx.desired_state(&desired);
    let observed = observe(backend.as_ref(), &info, &ds).await?;
    let p = plan(&ds, &observed, PlanOptions { prune: o.prune });
    for f in &p.findings {
        match f {
            Finding::Orphan { .. }
            | Finding::Stranger { .. }
            | Finding::Conflict { .. }
            | Finding::RetainedTranscript { .. } => {
                // The same words as diff, for what apply leaves alone.
                let one = ateam::plan::Plan {
                    actions: vec![],
                    findings: vec![f.clone()],
                };
                eprint!(
                    "{}",
                    render_diff(&one)
                        .lines()
                        .filter(|l| l.starts_with("  "))
                        .map(|l| format!("{}\n", l.trim_start()))
                        .collect::<String>()
                );
            }
            Finding::Finished { .. } => {}
        }
    }
    let members = ds.members.len();
    if p.is_noop() {
        for t in &desired.teams {
            ctx.store.save_team(t)?;
        }
        ctx.remember_engine(&desired.teams, backend.as_ref())?;
        println!(
            "no changes: {members} member(s) as the manifests say ({})",
            info.kind
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rt = ctx.runtime(backend.clone(), info.clone(), ds.store.clone());
    let display = Display::new();
    let secret = |name: &str| std::env::var(name).ok();
    let exec = Executor {
        rt: &rt,
        concurrency: o.concurrency.unwrap_or_else(default_concurrency),
        secret: &secret,
        progress: &display,
    };
    let refused = exec.preflight(&p, &ds.members);
    if !refused.is_empty() {
        for f in &refused {
            eprintln!("error: {}", f.error);
        }
        eprintln!("{} member(s) refused; nothing was changed", refused.len());
        return Ok(ExitCode::from(super::EXIT_ERROR));
    }
    let failures = exec.run(&p, &ds.members).await;
    for t in &desired.teams {
        ctx.store.save_team(t)?;
    }
    ctx.remember_engine(&desired.teams, backend.as_ref())?;
    let mut failed = failures.len();
    for f in &failures {
        eprintln!("error: {}", f.error);
    }
    // Wait-until-running: one more look, and the reason for every member that is not up.
    // A list call is enough: states only, no inspects.
    let ours = std::collections::BTreeMap::from([(labels::STORE.to_string(), ds.store.clone())]);
    let after = backend.list(&ours).await?;
    for m in &ds.members {
        if failures
            .iter()
            .any(|f| f.team == m.team && f.member == m.member)
        {
            continue;
        }
        let record = ateam::store::Record::load(&m.record);
        let c = after.iter().find(|c| {
            record.ids.contains(&c.id) && !is_replacement(&m.spec.name, &c.name, &c.labels)
        });
        match c.map(|c| (c, c.state)) {
            Some((_, ContainerState::Running)) => {}
            // Done already, and its restart policy leaves it done: not a failure.
            Some((_, ContainerState::Exited { code: 0 }))
                if m.restart != ateam::model::RestartPolicy::Always =>
            {
                println!("{}/{} finished (exit 0)", m.team, m.member);
            }
            Some((c, ContainerState::Exited { code })) => {
                failed += 1;
                let logs = ateam::backend::logs_text(backend.as_ref(), &c.id, 10)
                    .await
                    .unwrap_or_default();
                eprintln!(
                    "error: {}/{} exited with code {code}; last output:\n{}",
                    m.team,
                    m.member,
                    indent(&logs)
                );
            }
            Some((c, state)) => {
                failed += 1;
                eprintln!("error: {}/{} is {state:?} ({})", m.team, m.member, c.name);
            }
            None => {
                failed += 1;
                eprintln!("error: {}/{} has no container", m.team, m.member);
            }
        }
    }
    if failed == 0 {
        println!("applied: {members} member(s) running ({})", info.kind);
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{failed} of {members} member(s) not running");
        Ok(ExitCode::from(super::EXIT_ERROR))
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}
