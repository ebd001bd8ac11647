//! Delete: remove every container this store made for the teams (and strangers with their
//! labels), end their main sessions, then forget their private state. Transcripts are the
//! user's: they stay unless `purge`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{App, AppError};
use crate::backend::Backend;
use crate::core::container::team_network_name;
use crate::core::layout::{session_socket_in, session_socket_path, sessions_dir, team_run_dir};
use crate::execute::{ActionError, Executor, Failure, Progress, default_concurrency};
use crate::model::{Model, Team};
use crate::plan::{Action, Finding, Plan, PlanOptions, TeamOp};

/// One team deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// Team name.
    pub team: String,
    /// Where its transcripts are (or were, with `purge`): the sessionDir.
    pub transcripts: PathBuf,
    /// Its transcripts were removed too.
    pub purged: bool,
    /// Its writers' workspaces kept (the person's data, without `purge`): the member, its
    /// folder, and how many of its commits were never collected (`None`: could not tell).
    pub workspaces: Vec<(String, PathBuf, Option<u64>)>,
}

/// What a delete did.
#[derive(Debug)]
pub enum DeleteReport {
    /// Some containers could not be removed; nothing was forgotten.
    Failed(Vec<Failure>),
    /// Every team was deleted.
    Deleted(Vec<Deleted>),
}

/// The team `delete --team NAME` acts on: as applied, else as a delete without `--purge`
/// left it, so that `--purge` still removes the transcripts that delete kept.
pub fn team_to_delete(app: &App, name: &str) -> Result<Model, AppError> {
    match app.applied(Some(name)) {
        Err(e @ AppError::NotApplied { .. }) => match app.store.deleted(name)? {
            Some(t) => Ok(Model { teams: vec![t] }),
            None => Err(e),
        },
        other => other,
    }
}

/// Deletes the teams of `desired`: removes their containers (and strangers with their labels),
/// network and main sessions, then forgets their state; their transcripts too with `purge`.
/// Waits for the store's lock unless `no_wait` (`waiting` is told who holds it). Every
/// removal is the executor's (`execute::team` for what is not a container).
pub async fn delete(
    app: &App,
    desired: &Model,
    purge: bool,
    no_wait: bool,
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
) -> Result<DeleteReport, AppError> {
    let _lock = app.store.lock(no_wait, waiting)?;
    // Nothing wanted: every container of these teams is an orphan (or a stranger), and
    // prune removes them.
    let mut empty = desired.clone();
    for t in &mut empty.teams {
        t.members.clear();
        t.sessions.clear();
    }
    let look = app.look(&empty, PlanOptions::pruning(true)).await?;
    let rt = app.runtime(&look);
    let no_secrets = |_: &str| None;
    let exec = Executor {
        rt: &rt,
        concurrency: default_concurrency(),
        secret: &no_secrets,
        progress,
    };
    let failures = exec.run(&look.plan, &[]).await;
    if !failures.is_empty() {
        return Ok(DeleteReport::Failed(failures));
    }
    let mut deleted = Vec::new();
    for t in &desired.teams {
        // Told before the folders go (a purge removes the workspaces).
        let workspaces = match purge {
            true => vec![],
            false => kept_workspaces(app, t).await,
        };
        let teardown = Plan {
            actions: teardown(app, t, &look.desired.store, &look.plan, purge),
            ..Plan::default()
        };
        if let Some(f) = exec.run(&teardown, &[]).await.into_iter().next() {
            return Err(app_error(f.error));
        }
        forget(app, t, purge, look.backend.as_ref())?;
        deleted.push(Deleted {
            team: t.name.clone(),
            transcripts: t.session_dir.clone(),
            purged: purge,
            workspaces,
        });
    }
    Ok(DeleteReport::Deleted(deleted))
}

/// What deleting team `t` does once its containers are gone, in order.
fn teardown(app: &App, t: &Team, store: &str, plan: &Plan, purge: bool) -> Vec<Action> {
    let state_dir = &app.host.state_dir;
    let run = team_run_dir(state_dir, &t.name);
    // Main sessions ateam started for the team end with it (their transcripts stay): the
    // manifests' and any left running that they no longer name.
    let mut sockets: BTreeSet<PathBuf> = t
        .sessions
        .iter()
        .map(|s| session_socket_path(state_dir, &t.name, &s.name))
        .collect();
    if let Ok(entries) = std::fs::read_dir(sessions_dir(&run)) {
        sockets.extend(entries.flatten().map(|e| session_socket_in(&e.path())));
    }
    let mut ops = vec![
        // The team's own network, if its members had one (`network: open`).
        TeamOp::RemoveNetwork {
            name: team_network_name(store, &t.name),
        },
        TeamOp::StopSessions {
            sockets: sockets.into_iter().collect(),
        },
    ];
    if purge {
        let paths = purged(app, t, plan).into_iter().collect();
        ops.push(TeamOp::Purge { paths });
    }
    ops.push(TeamOp::StopHelperServers);
    ops.push(TeamOp::ClearRunDir {
        path: run,
        all: purge,
    });
    ops.into_iter()
        .map(|op| Action::new(&t.name, "", op))
        .collect()
}

/// What `--purge` removes of team `t`: every transcript folder (its members', and those kept
/// from members removed earlier, which the empty plan reports as retained), and its writers'
/// workspaces with ateam's shadows of them.
fn purged(app: &App, t: &Team, plan: &Plan) -> BTreeSet<PathBuf> {
    let mut dirs: BTreeSet<PathBuf> = t
        .members
        .iter()
        .map(|m| m.transcript_dir.clone())
        .chain(
            t.sessions
                .iter()
                .filter(|s| !s.transcript_dir.as_os_str().is_empty())
                .map(|s| s.transcript_dir.clone()),
        )
        .collect();
    for f in &plan.findings {
        if let Finding::RetainedTranscript { path, team, .. } = f
            && *team == t.name
        {
            dirs.insert(path.clone());
        }
    }
    for m in &t.members {
        if let Some(p) = app.workspace_place(t, m) {
            let lock = p.shadow.with_extension("lock");
            dirs.extend([p.ws.path, p.shadow, lock]);
        }
        if let Some(c) = app.copy_place(t, m) {
            let lock = c.store.with_extension("lock");
            dirs.extend([c.store, lock]);
        }
    }
    dirs
}

/// The writers' workspaces a delete without `--purge` keeps (the person's data): the member,
/// its folder, and how many of its commits were never collected (`None`: could not tell).
async fn kept_workspaces(app: &App, t: &Team) -> Vec<(String, PathBuf, Option<u64>)> {
    let mut out = Vec::new();
    for m in &t.members {
        if let Some(p) = app.workspace_place(t, m)
            && p.exists()
        {
            let left = crate::workspace::changes(&p, false)
                .await
                .ok()
                .map(|c| c.uncollected);
            out.push((m.name.clone(), p.ws.path, left));
        }
    }
    out
}

/// The store forgets team `t`, and keeps the person's word that it is deleted.
fn forget(app: &App, t: &Team, purge: bool, backend: &dyn Backend) -> Result<(), AppError> {
    app.store.forget_team(&t.name)?;
    // The person's word, for a controller that still reads the team's manifests: it leaves
    // the team deleted until it is applied again (`Store::save_team`).
    app.store.mark_deleted(&t.name)?;
    if purge {
        // With --purge the record goes too: only the mark above is left.
        return Ok(());
    }
    // What `delete --team NAME --purge` needs later: where the transcripts are, and the
    // engine to sweep once more for anything of the team's.
    app.store.save_deleted(t)?;
    app.remember_engine(std::slice::from_ref(t), backend)?;
    crate::events::record(
        &app.host.state_dir,
        app.owner,
        &crate::events::Event::new(
            &t.name,
            "",
            crate::events::EventKind::Deleted,
            "deleted; its transcripts, workspaces, events, egress logs and board stay until delete --purge",
        ),
    );
    Ok(())
}

/// A failed step of a team's teardown as the error a delete returns (as before it was the
/// executor's: the engine's or the file's own).
fn app_error(e: ActionError) -> AppError {
    match e {
        ActionError::Backend { source, .. } => AppError::Backend(source),
        ActionError::Io { path, source, .. } => AppError::Io { path, source },
        other @ (ActionError::Run(_)
        | ActionError::Egress { .. }
        | ActionError::Helpers { .. }
        | ActionError::Session { .. }
        | ActionError::SessionStep { .. }) => AppError::Io {
            path: PathBuf::new(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}
