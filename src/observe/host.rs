//! What a look reads on the host rather than from the engine: the members' records and
//! folders, the transcripts, the main sessions' terminals and promotions, the servers' sockets,
//! pid files and policies, the team's board.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use tracing::warn;

use crate::core::layout;
use crate::plan::spec::DesiredState;
use crate::store::Record;

/// The members of the teams in scope that hold tasks on their team's board.
pub(super) fn board_held(desired: &DesiredState) -> BTreeSet<(String, String)> {
    let me = crate::files::Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    };
    let mut held = BTreeSet::new();
    for t in &desired.teams {
        let board = crate::board::store::Board::in_run_dir(&t.run_dir, me);
        let Ok(tasks) = board.tasks() else { continue };
        for task in tasks.tasks {
            if let Some(crate::board::Actor::Member(m)) = &task.owner
                && matches!(
                    task.state,
                    crate::board::TaskState::Claimed | crate::board::TaskState::InProgress
                )
            {
                held.insert((t.name.clone(), m.clone()));
            }
        }
    }
    held
}

/// What each agent member that the board may wake has there (a board that cannot be read
/// wakes nobody: `ateam tasks` says why).
pub(super) fn board_news(
    desired: &DesiredState,
    only: Option<&str>,
) -> BTreeMap<(String, String), crate::board::store::News> {
    let me = crate::files::Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    };
    desired
        .members
        .iter()
        .filter(|m| m.wake.is_some() && only.is_none_or(|o| o == m.member))
        .filter_map(|m| {
            let team = desired.teams.iter().find(|t| t.name == m.team)?;
            let board = crate::board::store::Board::in_run_dir(&team.run_dir, me);
            let news = board
                .news(&crate::board::Actor::Member(m.member.clone()))
                .ok()?;
            Some(((m.team.clone(), m.member.clone()), news))
        })
        .collect()
}

/// The members with a folder in the team's run folder `run_dir` (a record, a proxy, a
/// helper server): every one, or `only`.
pub(super) fn member_dirs(run_dir: &std::path::Path, only: Option<&str>) -> Vec<String> {
    match only {
        Some(m) => vec![m.to_string()],
        None => std::fs::read_dir(layout::members_dir(run_dir))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Ids of the containers this store made (its records), for the teams in scope.
pub(super) fn recorded(desired: &DesiredState, only: Option<&str>) -> BTreeSet<String> {
    let mut recorded = BTreeSet::new();
    for t in &desired.teams {
        for member in member_dirs(&t.run_dir, only) {
            recorded.extend(Record::load(&layout::member_record_path(&t.run_dir, &member)).ids);
        }
    }
    recorded
}

/// The transcript folders that exist: the members' of the teams in scope (or `only`'s),
/// and the wanted main sessions'.
pub(super) fn transcript_dirs(desired: &DesiredState, only: Option<&str>) -> BTreeSet<PathBuf> {
    let mut transcript_dirs = BTreeSet::new();
    for t in &desired.teams {
        let members = layout::transcripts_dir(&t.session_dir);
        let paths: Vec<PathBuf> = match only {
            Some(m) => vec![members.join(m)],
            None => std::fs::read_dir(&members)
                .map(|entries| entries.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
        };
        transcript_dirs.extend(paths.into_iter().filter(|p| p.is_dir()));
    }
    transcript_dirs.extend(
        desired
            .sessions
            .iter()
            .filter(|s| s.transcript_dir.is_dir())
            .map(|s| s.transcript_dir.clone()),
    );
    transcript_dirs
}

/// The main sessions whose terminal answers, and the promotions under way (their journals).
pub(super) fn sessions(
    desired: &DesiredState,
) -> (
    BTreeSet<(String, String)>,
    Vec<crate::core::session::Promotion>,
) {
    let mut promotions = Vec::new();
    let mut live_sessions = BTreeSet::new();
    for t in &desired.teams {
        if let Ok(entries) = std::fs::read_dir(layout::sessions_dir(&t.run_dir)) {
            for e in entries.flatten() {
                if std::os::unix::net::UnixStream::connect(layout::session_socket_in(&e.path()))
                    .is_ok()
                {
                    live_sessions
                        .insert((t.name.clone(), e.file_name().to_string_lossy().into_owned()));
                }
                let path = layout::promotion_path(&e.path());
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                match serde_json::from_slice::<crate::core::session::Promotion>(&bytes) {
                    Ok(p) if p.team == t.name => promotions.push(p),
                    Ok(_) => {
                        warn!(path = %path.display(), "a promotion journal of another team: left alone")
                    }
                    Err(e) => {
                        warn!(path = %path.display(), error = %e, "an unreadable promotion journal: left alone")
                    }
                }
            }
        }
    }
    (live_sessions, promotions)
}

/// The wanted sockets something answers on, less those that cannot serve their member as
/// it is now (`not_live_for_their_member`).
pub(super) fn live_sockets(desired: &DesiredState) -> BTreeSet<PathBuf> {
    let sockets = desired
        .sessions
        .iter()
        .map(|s| &s.socket)
        .chain(
            desired
                .members
                .iter()
                .filter_map(|m| Some(&m.egress.as_ref()?.socket)),
        )
        .chain(desired.members.iter().filter_map(|m| m.helpers.as_ref()));
    let mut live_sockets: BTreeSet<_> = sockets
        .filter(|p| std::os::unix::net::UnixStream::connect(p).is_ok())
        .cloned()
        .collect();
    not_live_for_their_member(desired, &mut live_sockets);
    live_sockets
}

/// What the members' egress proxies and helper servers left in the state folder.
pub(super) struct Servers {
    /// The allowlist each proxy's policy file holds, by socket.
    pub(super) egress_policies: BTreeMap<PathBuf, crate::core::intercept::EgressPolicy>,
    /// Members (team, member) with a proxy's pid file.
    pub(super) egress_proxies: BTreeSet<(String, String)>,
    /// Members (team, member) with a helper server's pid file.
    pub(super) helper_servers: BTreeSet<(String, String)>,
}

/// The servers of the teams in scope (or `only`'s): each proxy's policy, and the pid files
/// of those that may run.
pub(super) fn servers(desired: &DesiredState, only: Option<&str>) -> Servers {
    let mut egress_policies = BTreeMap::new();
    let mut egress_proxies = BTreeSet::new();
    let mut helper_servers = BTreeSet::new();
    for t in &desired.teams {
        for m in desired.members.iter().filter(|m| m.team == t.name) {
            if let Some(e) = &m.egress {
                let path =
                    layout::egress_policy_path(&layout::egress_dir_in(&t.run_dir, &m.member));
                if let Some(p) = crate::servers::egress::read_policy(&path) {
                    egress_policies.insert(e.socket.clone(), p.policy());
                }
            }
        }
        for member in member_dirs(&t.run_dir, only) {
            let dir = layout::egress_dir_in(&t.run_dir, &member);
            if layout::egress_pid_path(&dir).exists() {
                egress_proxies.insert((t.name.clone(), member.clone()));
            }
            if layout::helpers_pid_path(&t.run_dir, &member).exists() {
                helper_servers.insert((t.name.clone(), member));
            }
        }
    }
    Servers {
        egress_policies,
        egress_proxies,
        helper_servers,
    }
}

/// Drops from `live` the member sockets that answer ateam but cannot serve the member as it is
/// now, so that the plan starts their proxy or helper server again:
/// - one that belongs to another uid than the member runs as now (its `user` changed): the
///   member cannot connect to it (0600);
/// - one whose server runs a binary that has since been replaced (an upgrade of ateam): it
///   answers, but runs the old code (a helper request then fails to start its helper). Only
///   judged when this process is not itself a replaced binary (an old controller, which could
///   start nothing newer), and only when the kernel says so (`/proc/<pid>/exe`).
pub(super) fn not_live_for_their_member(
    desired: &DesiredState,
    live: &mut BTreeSet<std::path::PathBuf>,
) {
    let judge_binaries = !crate::detached::runs_a_replaced_binary(std::process::id());
    for m in &desired.members {
        let uid = m
            .spec
            .user
            .parse::<crate::model::UserId>()
            .ok()
            .map(|u| u.uid);
        let Some(run_dir) = desired
            .teams
            .iter()
            .find(|t| t.name == m.team)
            .map(|t| &t.run_dir)
        else {
            continue;
        };
        let egress_pid = layout::egress_pid_path(&layout::egress_dir_in(run_dir, &m.member));
        let helpers_pid = layout::helpers_pid_path(run_dir, &m.member);
        let servers = m
            .egress
            .iter()
            .map(|e| (&e.socket, &egress_pid))
            .chain(m.helpers.iter().map(|h| (h, &helpers_pid)));
        for (socket, pid_file) in servers {
            if !live.contains(socket) {
                continue;
            }
            let owner = std::fs::symlink_metadata(socket).ok().map(|md| md.uid());
            if owner != uid {
                warn!(socket = %socket.display(), ?owner, ?uid, member = %m.member, "a member's socket belongs to another uid: started again");
                live.remove(socket);
            } else if judge_binaries && crate::detached::pid_runs_a_replaced_binary(pid_file) {
                warn!(socket = %socket.display(), member = %m.member, "a member's server runs a binary replaced since (an upgrade): started again");
                live.remove(socket);
            }
        }
    }
}
