//! Delete: remove every container this store made for the teams (and strangers with their
//! labels), end their main sessions, then forget their private state. Transcripts are the
//! user's: they stay unless `purge`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{App, AppError};
use crate::core::container::team_network_name;
use crate::core::layout::{session_socket_in, session_socket_path, sessions_dir, team_run_dir};
use crate::execute::{Executor, Failure, Progress, default_concurrency};
use crate::model::Desired;
use crate::plan::{Finding, PlanOptions};

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
pub fn team_to_delete(app: &App, name: &str) -> Result<Desired, AppError> {
    match app.applied(Some(name)) {
        Err(e @ AppError::NotApplied { .. }) => match app.store.deleted(name)? {
            Some(t) => Ok(Desired { teams: vec![t] }),
            None => Err(e),
        },
        other => other,
    }
}

/// Deletes the teams of `desired`: removes their containers (and strangers with their labels),
/// network and main sessions, then forgets their state; their transcripts too with `purge`.
/// Waits for the store's lock unless `no_wait` (`waiting` is told who holds it).
pub async fn delete(
    app: &App,
    desired: &Desired,
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
    let failures = Executor {
        rt: &rt,
        concurrency: default_concurrency(),
        secret: &no_secrets,
        progress,
    }
    .run(&look.plan, &[])
    .await;
    if !failures.is_empty() {
        return Ok(DeleteReport::Failed(failures));
    }
    let mut deleted = Vec::new();
    for t in &desired.teams {
        // The team's own network, if its members had one (`network: open`).
        let net = team_network_name(&look.desired.store, &t.name);
        look.backend.remove_network(&net).await?;
        // Main sessions ateam started for the team end with it (their transcripts stay):
        // the manifests' and any left running that they no longer name.
        let mut sockets: BTreeSet<PathBuf> = t
            .sessions
            .iter()
            .map(|s| session_socket_path(&app.host.state_dir, &t.name, &s.name))
            .collect();
        if let Ok(entries) =
            std::fs::read_dir(sessions_dir(&team_run_dir(&app.host.state_dir, &t.name)))
        {
            sockets.extend(entries.flatten().map(|e| session_socket_in(&e.path())));
        }
        // Each is gone when stop returns; one that outlives it fails the delete before its
        // state (the socket's folder) is forgotten.
        for socket in &sockets {
            crate::sessions::stop(socket).map_err(|e| AppError::Io {
                path: socket.clone(),
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, e),
            })?;
        }
        if purge {
            // Every transcript folder of the team: its members', and those kept from members
            // removed earlier (which the empty plan reports as retained).
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
            for f in &look.plan.findings {
                if let Finding::RetainedTranscript { path, team, .. } = f
                    && *team == t.name
                {
                    dirs.insert(path.clone());
                }
            }
            // And its writers' workspaces, with ateam's shadows of them.
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
            for d in dirs.iter().filter(|d| d.symlink_metadata().is_ok()) {
                if d.is_file() {
                    let _ = std::fs::remove_file(d);
                    continue;
                }
                std::fs::remove_dir_all(d).map_err(|source| AppError::Io {
                    path: d.clone(),
                    source,
                })?;
            }
        }
        let mut workspaces = Vec::new();
        if !purge {
            for m in &t.members {
                if let Some(p) = app.workspace_place(t, m)
                    && p.exists()
                {
                    let left = crate::workspace::changes(&p, false)
                        .await
                        .ok()
                        .map(|c| c.uncollected);
                    workspaces.push((m.name.clone(), p.ws.path, left));
                }
            }
        }
        crate::servers::helper::stop_team(&app.host.state_dir, &t.name);
        let run = team_run_dir(&app.host.state_dir, &t.name);
        clear_team_dir(&run, purge).map_err(|source| AppError::Io {
            path: run.clone(),
            source,
        })?;
        app.store.forget_team(&t.name)?;
        // The person's word, for a controller that still reads the team's manifests: it
        // leaves the team deleted until it is applied again (`Store::save_team`).
        app.store.mark_deleted(&t.name)?;
        if !purge {
            // What `delete --team NAME --purge` needs later: where the transcripts are, and
            // the engine to sweep once more for anything of the team's.
            app.store.save_deleted(t)?;
            app.remember_engine(std::slice::from_ref(t), look.backend.as_ref())?;
        }
        if !purge {
            // With --purge the record goes too: only the mark above is left.
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
        }
        deleted.push(Deleted {
            team: t.name.clone(),
            transcripts: t.session_dir.clone(),
            purged: purge,
            workspaces,
        });
    }
    Ok(DeleteReport::Deleted(deleted))
}

/// What of a team's folder outlives its delete without `--purge`: the record a person reads
/// afterwards (`ateam events`, `logs --egress`) and its board, the work of its sessions.
fn kept(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
    match parts[..] {
        ["events.jsonl" | "events.jsonl.1"] | ["board", ..] => true,
        ["members", _, "egress", _] => name.starts_with("log") && name.contains(".jsonl"),
        _ => false,
    }
}

/// Removes the team's folder, or with `keep_nothing` false all of it but what `kept` names.
/// The folder is ateam's own (no member mounts it): nothing here follows a link.
fn clear_team_dir(run: &Path, keep_nothing: bool) -> std::io::Result<()> {
    if run.symlink_metadata().is_err() {
        return Ok(());
    }
    if keep_nothing {
        return std::fs::remove_dir_all(run);
    }
    clear_below(run, Path::new(""))
}

/// Removes what lies below `run/rel` that `kept` does not name (nor leads to).
fn clear_below(run: &Path, rel: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(run.join(rel))? {
        let entry = entry?;
        let r = rel.join(entry.file_name());
        if kept(&r) {
            continue;
        }
        let leads_to_kept = matches!(
            r.iter().filter_map(|p| p.to_str()).collect::<Vec<_>>()[..],
            ["members"] | ["members", _] | ["members", _, "egress"]
        );
        if entry.file_type()?.is_dir() {
            if leads_to_kept {
                clear_below(run, &r)?;
                // An emptied folder goes (a member without an egress log).
                let _ = std::fs::remove_dir(run.join(&r));
            } else {
                std::fs::remove_dir_all(entry.path())?;
            }
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}
