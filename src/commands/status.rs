use std::path::Path;
use std::time::SystemTime;

use anyhow::bail;

use crate::cli::{Global, OptionalFiles, Output};
use ateam::core::selector::Selector;
use ateam::report::render_status;

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
    let doc = ateam::app::status::status(&ctx, &desired, selector).await?;
    let now = SystemTime::now();
    if doc.teams.is_empty() && desired.teams.is_empty() {
        // For machines, an empty result is still a document.
        match output {
            Output::Text => outln!(
                "no teams applied (state folder {})",
                ctx.host.state_dir.display()
            ),
            Output::Json | Output::Yaml => print_document(&doc, output == Output::Yaml)?,
        }
        return Ok(Exit::Ok);
    }
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

/// Whether a controller keeps this state folder converged, and what it last saw.
fn controller_line(state_dir: &Path) -> String {
    use ateam::store::controller as status;
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
