//! `ateam approvals`: the pending approvals of the applied teams, and the person's answers
//! (`app::approvals` decides and writes; this renders and picks the exit code).

use crate::cli::{ApprovalAnswer, Global, OnceOrAlways, Output};
use ateam::app::approvals::{self, Always, ApprovalError};

use super::common::{app, waiting};
use super::exit::Exit;
use super::progress::Display;

/// 0: listed, or answered as asked; 4: the answer was refused (nothing written); other
/// errors as `exit::classify`.
pub async fn run(
    global: &Global,
    team: Option<&str>,
    output: Output,
    proposal: bool,
    answer: Option<ApprovalAnswer>,
) -> anyhow::Result<Exit> {
    let app = app(global);
    let Some(answer) = answer else {
        if proposal {
            return propose(&app, team);
        }
        return list(&app, team, output);
    };
    let done = match answer {
        ApprovalAnswer::Allow { id, how } => allow(&app, team, &id, &how).await,
        ApprovalAnswer::Deny { id, how } => deny(&app, team, &id, &how).await,
    };
    match done {
        Ok(exit) => Ok(exit),
        Err(ApprovalError::App(e)) => Err(e.into()),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(Exit::Refused)
        }
    }
}

/// The grants that would allow every approvable ask, as a diff of the manifests. 0: nothing
/// to propose; 1: a change is proposed (as `diff`).
fn propose(app: &ateam::app::App, team: Option<&str>) -> anyhow::Result<Exit> {
    let files = approvals::proposal(app, team)?;
    if files.is_empty() {
        outln!("nothing to propose: no approvable ask of a host");
        return Ok(Exit::Ok);
    }
    for (path, old, new) in &files {
        out!(
            "{}",
            ateam::manifest::edit::diff(&path.display().to_string(), old, new)
        );
    }
    Ok(Exit::Differs)
}

fn list(app: &ateam::app::App, team: Option<&str>, output: Output) -> anyhow::Result<Exit> {
    let found = approvals::list(app, team)?;
    match output {
        Output::Text => {
            if found.is_empty() {
                outln!("no pending approvals");
            }
            let now = ateam::servers::egress::log::Event::now();
            for f in &found {
                outln!("{}", ateam::approvals::line(&f.pending, now));
            }
        }
        Output::Json | Output::Yaml => {
            let all: Vec<&ateam::approvals::Pending> = found.iter().map(|f| &f.pending).collect();
            super::output::print_document(&all, output == Output::Yaml)?;
        }
    }
    Ok(Exit::Ok)
}

async fn allow(
    app: &ateam::app::App,
    team: Option<&str>,
    id: &str,
    how: &OnceOrAlways,
) -> Result<Exit, ApprovalError> {
    let f = approvals::find(app, team, id, true)?;
    if how.once {
        approvals::allow_once(app, &f, &waiting)?;
        outln!(
            "allowed {} for {}/{} until its next start (its next try goes through)",
            f.pending.want.describe(),
            f.team.name,
            f.member.name
        );
        if let Some(h) = &f.pending.helper {
            outln!(
                "note: a request for helper `{h}` asked for it; a helper is judged by its requester's grant in the manifests, so that request passes only once it is allowed always"
            );
        }
        return Ok(Exit::Ok);
    }
    let secret = |name: &str| std::env::var(name).ok();
    let display = Display::new();
    let w = approvals::always(app, &f, Always::Allow, &secret, &display, &waiting).await?;
    outln!(
        "{}: added {} to AccessGrant `{}` (commit it when you are ready)",
        w.file.display(),
        f.pending.want.describe(),
        f.pending.grant
    );
    Ok(if w.report.converged() {
        outln!(
            "applied: {}/{} may reach it now",
            f.team.name,
            f.member.name
        );
        Exit::Ok
    } else {
        eprintln!("the apply after it did not converge: see `ateam status`");
        Exit::Differs
    })
}

async fn deny(
    app: &ateam::app::App,
    team: Option<&str>,
    id: &str,
    how: &OnceOrAlways,
) -> Result<Exit, ApprovalError> {
    let f = approvals::find(app, team, id, false)?;
    if how.always {
        let secret = |name: &str| std::env::var(name).ok();
        let display = Display::new();
        let w = approvals::always(app, &f, Always::Deny, &secret, &display, &waiting).await?;
        outln!(
            "{}: {} added to the deny list of AccessGrant `{}` (commit it when you are ready); never asked again",
            w.file.display(),
            f.pending.want.describe(),
            f.pending.grant
        );
        return Ok(if w.report.converged() {
            Exit::Ok
        } else {
            eprintln!("the apply after it did not converge: see `ateam status`");
            Exit::Differs
        });
    }
    approvals::deny_once(app, &f, &waiting)?;
    outln!(
        "dismissed {}: {} stays refused for {}/{}",
        f.pending.id,
        f.pending.want.describe(),
        f.team.name,
        f.member.name
    );
    Ok(Exit::Ok)
}
