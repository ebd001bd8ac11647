//! A team being deleted, once its containers are gone (`app::delete`): its network, its main
//! sessions' terminals, what `--purge` removes, its helper servers, its state folder.

use std::path::{Path, PathBuf};

use super::{ActionError, Executor};
use crate::plan::{Action, TeamOp};

impl Executor<'_> {
    /// Carries out a `TeamOp`.
    pub(super) async fn team(&self, a: &Action, op: &TeamOp) -> Result<(), ActionError> {
        let team = &a.team;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ActionError::Io {
                member: team.clone(),
                path,
                source,
            }
        };
        match op {
            TeamOp::RemoveNetwork { name } => {
                self.rt
                    .backend
                    .remove_network(name)
                    .await
                    .map_err(|source| ActionError::Backend {
                        member: team.clone(),
                        source,
                    })
            }
            // Each is gone when stop returns; one that outlives it fails the delete before
            // its state (the socket's folder) is forgotten.
            TeamOp::StopSessions { sockets } => {
                for socket in sockets {
                    crate::sessions::stop(socket).map_err(|e| {
                        io(socket)(std::io::Error::new(std::io::ErrorKind::TimedOut, e))
                    })?;
                }
                Ok(())
            }
            TeamOp::Purge { paths } => {
                for p in paths.iter().filter(|p| p.symlink_metadata().is_ok()) {
                    if p.is_file() {
                        let _ = std::fs::remove_file(p);
                        continue;
                    }
                    std::fs::remove_dir_all(p).map_err(io(p))?;
                }
                Ok(())
            }
            TeamOp::StopHelperServers => {
                crate::servers::helper::stop_team(&self.rt.state_dir, team);
                Ok(())
            }
            TeamOp::ClearRunDir { path, all } => clear_team_dir(path, *all).map_err(io(path)),
        }
    }
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

/// Removes the team's folder, or with `all` false all of it but what `kept` names. The
/// folder is ateam's own (no member mounts it): nothing here follows a link.
fn clear_team_dir(run: &Path, all: bool) -> std::io::Result<()> {
    if run.symlink_metadata().is_err() {
        return Ok(());
    }
    if all {
        return std::fs::remove_dir_all(run);
    }
    clear_below(run, Path::new(""))
}

/// Removes what lies below `run/rel` that `kept` does not name (nor leads to).
fn clear_below(run: &Path, rel: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(run.join(rel))? {
        let entry = entry?;
        let r: PathBuf = rel.join(entry.file_name());
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
