use std::path::Path;
use std::time::SystemTime;

use anyhow::bail;

use crate::cli::{Global, OptionalFiles, Output};
use ateam::core::layout::{member_ctl_dir, member_record_path, team_run_dir};
use ateam::core::selector::Selector;
use ateam::execute::{restarts, transcript_usage};
use ateam::model::Desired;
use ateam::plan::PlanOptions;
use ateam::report::{
    ControllerStatus, Extras, LastReconcile, RowKind, StatusDocument, TeamStatus, render_status,
    team_status,
};
use ateam::store::Record;

use super::common::app;
use super::exit::Exit;
use super::output::print_document;

/// With `exit_code`: 0 in sync, 1 drift (`Plan::drifted`, as diff). Otherwise 0. Errors as
/// `exit::classify` (an unknown team is a usage error).
pub async fn run(
    global: &Global,
    team: Option<&str>,
    files: &OptionalFiles,
    output: Output,
    exit_code: bool,
    selector: Option<&Selector>,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let state_dir = ctx.host.state_dir.clone();
    let mut desired = if files.files.is_empty() {
        ctx.applied(team)?
    } else {
        ctx.load(&files.files)?
    };
    if let Some(t) = team {
        desired.teams.retain(|x| x.name == t);
        if desired.teams.is_empty() {
            bail!("team `{t}` is not in these manifests");
        }
    }
    let now = SystemTime::now();
    let controller = controller_status(&state_dir);
    if desired.teams.is_empty() {
        // For machines, an empty result is still a document.
        match output {
            Output::Text => outln!(
                "no teams applied (state folder {})",
                ctx.host.state_dir.display()
            ),
            Output::Json | Output::Yaml => print_document(
                &StatusDocument::new(vec![], controller, now),
                output == Output::Yaml,
            )?,
        }
        return Ok(Exit::Ok);
    }
    let look = ctx.look(&desired, PlanOptions::default()).await?;
    let (info, observed, p) = (look.info, look.observed, look.plan);
    // With the helpers members asked for: they are rows too.
    let desired = look.model;
    let dir = state_dir.clone();
    let count = move |team: &str, member: &str| restarts(&member_ctl_dir(&dir, team, member));
    let dir = state_dir.clone();
    let last_exit = move |team: &str, member: &str| {
        Record::load(&member_record_path(&team_run_dir(&dir, team), member)).last_exit
    };
    let dir = state_dir.clone();
    let session = move |team: &str, name: &str| {
        let d = ateam::core::layout::session_dir(&dir, team, name);
        ateam::report::SessionFacts {
            socket: ateam::core::layout::session_socket_path(&dir, team, name),
            started: ateam::sessions::started_at(&d),
        }
    };
    let default_user = ctx.host.default_member_user();
    let not_writable = move |p: &std::path::Path, user: Option<ateam::model::UserId>| {
        let user = user.unwrap_or(default_user);
        ateam::host::access::check_writable(p, user)
            .err()
            .map(|_| user.uid)
    };
    let extras = Extras {
        now,
        transcript_usage: &transcript_usage,
        restarts: &count,
        last_exit: &last_exit,
        session: &session,
        not_writable: &not_writable,
    };
    let engine = info.kind.to_string();
    let mut teams: Vec<_> = desired
        .teams
        .iter()
        .map(|t| team_status(t, &engine, &observed, &p, &extras))
        .collect();
    // Crash-looping members waiting out their delay, as the running controller paces them.
    if let Some(record) = ateam::controller::status::read(&state_dir)
        && ateam::controller::status::running(&state_dir)
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
    super::egress::add_refusals(&state_dir, &desired, &mut teams);
    if let Some(sel) = selector {
        select(&mut teams, &desired, sel);
    }
    let doc = StatusDocument::new(teams, controller, now);
    match output {
        Output::Text => {
            out!("{}", render_status(&doc.teams, now));
            out!("{}", ateam::report::render_refusals(&doc.teams));
            out!("{}", controller_line(&state_dir));
        }
        Output::Json | Output::Yaml => print_document(&doc, output == Output::Yaml)?,
    }
    Ok(Exit::verdict(exit_code && doc.drifted))
}

/// Keeps the rows of main sessions and members whose labels match (rows nothing describes,
/// an orphan or a kept transcript, have no labels), and the teams left with any; each team's
/// verdict is then its selected rows'.
fn select(teams: &mut Vec<TeamStatus>, desired: &Desired, sel: &Selector) {
    for t in teams.iter_mut() {
        let Some(model) = desired.teams.iter().find(|m| m.name == t.team) else {
            continue;
        };
        let chosen = |kind: RowKind, name: &str| match kind {
            RowKind::MainSession => model
                .sessions
                .iter()
                .any(|s| s.name == name && sel.matches(&s.labels)),
            RowKind::Member => model
                .members
                .iter()
                .any(|m| m.name == name && sel.matches(&m.labels)),
            RowKind::Transcript => false,
        };
        t.members.retain(|r| chosen(r.kind, &r.name));
        t.drifted = t.members.iter().any(|r| r.drifted);
    }
    teams.retain(|t| !t.members.is_empty());
}

/// The controller's record, for the document.
fn controller_status(state_dir: &Path) -> Option<ControllerStatus> {
    use ateam::controller::status;
    let r = status::read(state_dir)?;
    Some(ControllerStatus {
        running: status::running(state_dir),
        pid: r.pid,
        since: r.since,
        last_reconcile: r.last_reconcile.map(|l| LastReconcile {
            at: l.at,
            team: l.team,
            ok: l.ok,
        }),
        errors: r.errors,
        manifest_errors: r.manifest_errors,
    })
}

/// Whether a controller keeps this state folder converged, and what it last saw.
fn controller_line(state_dir: &Path) -> String {
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
