use std::process::ExitCode;
use std::time::SystemTime;

use crate::cli::{Global, OptionalFiles, Output};
use ateam::core::layout::member_ctl_dir;
use ateam::execute::{restarts, transcript_usage};
use ateam::plan::PlanOptions;
use ateam::report::{Extras, render_status, team_status};

use super::common::app;

pub async fn run(
    global: &Global,
    team: Option<&str>,
    files: &OptionalFiles,
    output: Output,
    exit_code: bool,
) -> anyhow::Result<ExitCode> {
    let ctx = app(global);
    let mut desired = if files.files.is_empty() {
        ctx.applied(team)?
    } else {
        ctx.load(&files.files)?
    };
    if let Some(t) = team {
        desired.teams.retain(|x| x.name == t);
    }
    if desired.teams.is_empty() {
        // For machines, an empty result is still a document.
        match output {
            Output::Text => println!(
                "no teams applied (state folder {})",
                ctx.host.state_dir.display()
            ),
            Output::Json => println!("[]"),
            Output::Yaml => println!("[]"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let look = ctx.look(&desired, PlanOptions::default()).await?;
    let (info, observed, p) = (look.info, look.observed, look.plan);
    let state_dir = ctx.host.state_dir.clone();
    let count = move |team: &str, member: &str| restarts(&member_ctl_dir(&state_dir, team, member));
    let extras = Extras {
        now: SystemTime::now(),
        transcript_usage: &transcript_usage,
        restarts: &count,
    };
    let engine = info.kind.to_string();
    let mut teams: Vec<_> = desired
        .teams
        .iter()
        .map(|t| team_status(t, &engine, &observed, &p, &extras))
        .collect();
    // Crash-looping members waiting out their delay, as the running controller paces them.
    if let Some(record) = ateam::controller::status::read(&ctx.host.state_dir)
        && ateam::controller::status::running(&ctx.host.state_dir)
    {
        for t in &mut teams {
            for m in &mut t.members {
                if let Some(due) = record.restarts_due.get(&format!("{}/{}", t.team, m.name)) {
                    m.next_restart = Some(due.clone());
                    m.detail = Some(format!(
                        "crash-looping; the controller restarts it at {due}"
                    ));
                }
            }
        }
    }
    match output {
        Output::Text => {
            print!("{}", render_status(&teams));
            print!("{}", controller_line(&ctx.host.state_dir));
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&teams)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&teams)?),
    }
    let drifted = teams.iter().any(|t| t.drifted);
    Ok(if exit_code && drifted {
        ExitCode::from(super::EXIT_ERROR)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether a controller keeps this state folder converged, and what it last saw.
fn controller_line(state_dir: &std::path::Path) -> String {
    use ateam::controller::status;
    let Some(r) = status::read(state_dir) else {
        return "controller: not running (ateam controller keeps teams converged)\n".into();
    };
    if !status::running(state_dir) {
        return format!(
            "controller: not running (the last one started {})\n",
            r.since
        );
    }
    let mut out = format!("controller: running since {} (pid {})", r.since, r.pid);
    if let Some(l) = &r.last_reconcile {
        out.push_str(&format!(
            "; last reconcile {} of team {} ({})",
            l.at,
            l.team,
            if l.ok { "ok" } else { "failed" }
        ));
    }
    out.push('\n');
    for (member, due) in &r.restarts_due {
        out.push_str(&format!(
            "  {member}: crash-looping, next restart at {due}\n"
        ));
    }
    for (team, e) in &r.errors {
        out.push_str(&format!("  team {team}: {e}\n"));
    }
    if !r.manifest_errors.is_empty() {
        out.push_str("  the manifests were refused; the last good state stays:\n");
        for l in &r.manifest_errors {
            out.push_str(&format!("    {l}\n"));
        }
    }
    out
}
