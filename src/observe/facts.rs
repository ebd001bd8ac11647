//! What status shows beyond the plan, read from the state folder and the host right after
//! the look (`report::StatusFacts` says why it is not part of `Observed`): restarts and last
//! exits, main sessions' terminals, transcript sizes, write grants a member cannot write,
//! egress refusals, cgroup usage, the controller's record.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::core::layout;
use crate::files;
use crate::host::Host;
use crate::model::{Member, Model, Network, Team};
use crate::observe::cache::Cache;
use crate::observe::transcripts::TranscriptCache;
use crate::plan::Observed;
use crate::report::{
    ControllerStatus, EgressCounts, EgressFacts, LastReconcile, MemberFacts, SessionFacts,
    StatusFacts, TranscriptUsage, session_transcript,
};
use crate::runtime::cgroup::Usage;
use crate::servers::egress::{self, Paths};
use crate::store::Record;

/// How far back `EgressStatus::last_minute` counts, in seconds.
const RECENT_SECS: f64 = 60.0;

/// What status shows that needs no look at the engine: each member's facts and each of its
/// transcript folder's usage, for the teams in `desired`. Read while the look waits for the
/// engine (`app::status`): at 200 members it is a third of a status.
#[derive(Debug, Default)]
pub struct EarlyFacts {
    members: std::collections::BTreeMap<(String, String), MemberFacts>,
    transcripts: std::collections::BTreeMap<PathBuf, TranscriptUsage>,
    /// What the cgroups of the starts the last look kept (`observe::cache`) use, by container
    /// id and pid: 800 kernel files at 200 members, read beside the engine's list. A figure
    /// is used only for a container the look finds running under that very pid.
    usage: std::collections::BTreeMap<(String, u32), Usage>,
}

impl EarlyFacts {
    /// Reads them for `desired`, as of `now`; transcript folders through `walks` (a watch's
    /// looks share one, and walk a folder again only when due).
    pub fn read(
        host: &Host,
        desired: &Model,
        now: SystemTime,
        walks: &TranscriptCache,
    ) -> EarlyFacts {
        let since = since(now);
        let mut early = EarlyFacts::default();
        for t in &desired.teams {
            for m in &t.members {
                let u = walks.usage(&m.transcript_dir);
                let f = member_facts_with_agent(host, t, m, since, walks, u);
                early.members.insert((t.name.clone(), m.name.clone()), f);
                early.transcripts.insert(m.transcript_dir.clone(), u);
            }
            let cache = Cache::load(&layout::team_run_dir(&host.state_dir, &t.name));
            for (id, pid, cgroup) in cache.kept_starts() {
                let u = crate::runtime::cgroup::container_usage_on(id, cgroup);
                early.usage.insert((id.to_string(), pid), u);
            }
        }
        early
    }
}

/// The start of the minute before `now`, in seconds since the epoch.
fn since(now: SystemTime) -> f64 {
    now.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
        - RECENT_SECS
}

/// The facts status shows of the teams in `model` (with the helpers their members asked
/// for), as `observed` found them, at `now`; what `early` read already is not read again,
/// and transcript folders are read through `walks`.
pub fn status_facts(
    host: &Host,
    model: &Model,
    observed: &Observed,
    now: SystemTime,
    early: EarlyFacts,
    walks: &TranscriptCache,
) -> StatusFacts {
    let state_dir = &host.state_dir;
    let mut facts = StatusFacts::empty(now);
    let since = since(now);
    let EarlyFacts {
        mut members,
        mut transcripts,
        mut usage,
    } = early;
    for t in &model.teams {
        for m in &t.members {
            let key = (t.name.clone(), m.name.clone());
            let mut f = members.remove(&key).unwrap_or_else(|| {
                let u = walks.usage(&m.transcript_dir);
                member_facts_with_agent(host, t, m, since, walks, u)
            });
            // Read early, an agent's transcript may predate the exit this look saw: its last
            // lines written as it ended. Read again once for that exit.
            if let Some(a) = crate::transcripts::AgentHome::of(m)
                && let Some(id) = exited(observed, &t.name, &m.name)
            {
                let u = walks.usage(&m.transcript_dir);
                f.agent = Some(walks.agent(&a, u, Some(id)));
            }
            facts.members.insert(key, f);
        }
        let live = observed
            .live_sessions
            .iter()
            .filter(|(team, _)| *team == t.name)
            .map(|(_, name)| name);
        for name in t.sessions.iter().map(|s| &s.name).chain(live) {
            let f = session_facts(state_dir, &t.name, name);
            facts.sessions.insert((t.name.clone(), name.clone()), f);
        }
    }
    for dir in transcript_dirs(model, observed) {
        let usage = transcripts
            .remove(&dir)
            .unwrap_or_else(|| walks.usage(&dir));
        facts.transcripts.insert(dir, usage);
    }
    facts.usage = observed
        .containers
        .iter()
        .filter(|c| c.state.is_live())
        .filter_map(|c| {
            let pid = c.pid?;
            let u = usage
                .remove(&(c.id.clone(), pid))
                .unwrap_or_else(|| crate::runtime::cgroup::container_usage(&c.id, pid));
            Some((c.id.clone(), u))
        })
        .collect();
    facts.controller = controller_status(state_dir);
    for t in model.teams.iter().filter(|t| t.board) {
        // Read only: the owner is never used.
        let me = crate::files::Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        };
        let board = crate::board::store::Board::new(state_dir, &t.name, me);
        if let Ok(s) = board.summary() {
            facts.boards.insert(t.name.clone(), s);
        }
    }
    facts
}

/// The controller's record, and whether it still runs.
pub fn controller_status(state_dir: &Path) -> Option<ControllerStatus> {
    use crate::store::controller as status;
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
        restarts_due: r.restarts_due,
        left_deleted: r.left_deleted,
    })
}

/// A member's restarts, last recorded exit, unwritable grants and egress log. `since`: the
/// start of the last minute, in seconds since the epoch.
fn member_facts(host: &Host, t: &Team, m: &Member, since: f64) -> MemberFacts {
    let state_dir = &host.state_dir;
    let record = layout::member_record_path(&layout::team_run_dir(state_dir, &t.name), &m.name);
    let user = m.user.unwrap_or(host.default_member_user());
    let not_writable: Vec<PathBuf> = m
        .access
        .write
        .iter()
        .filter(|p| crate::host::access::check_writable(p, user).is_err())
        .cloned()
        .collect();
    MemberFacts {
        restarts: restarts(&layout::member_ctl_dir(state_dir, &t.name, &m.name)),
        last_exit: Record::load(&record).last_exit,
        not_writable_by: (!not_writable.is_empty()).then_some(user.uid),
        not_writable,
        egress: matches!(m.access.network, Network::Allow(_)).then(|| {
            let mut e = egress_facts(state_dir, t, m, since);
            if !e.refused.is_empty() && !m.access.name.is_empty() {
                e.grant_source =
                    crate::manifest::edit::grant_document(&t.manifests, &t.name, &m.access.name);
            }
            e
        }),
        agent: None,
    }
}

/// `member_facts`, with what its agent's transcript says (through `walks`, which reads it
/// again only when the folder's usage moved).
fn member_facts_with_agent(
    host: &Host,
    t: &Team,
    m: &Member,
    since: f64,
    walks: &TranscriptCache,
    usage: TranscriptUsage,
) -> MemberFacts {
    let mut f = member_facts(host, t, m, since);
    f.agent = crate::transcripts::AgentHome::of(m).map(|a| walks.agent(&a, usage, None));
    f
}

/// The id of `team`'s `member`'s container when the look saw it exited (or dead).
fn exited<'a>(observed: &'a Observed, team: &str, member: &str) -> Option<&'a str> {
    use crate::core::container::{ContainerState, labels};
    observed
        .containers
        .iter()
        .find(|c| {
            c.labels.get(labels::TEAM).map(String::as_str) == Some(team)
                && c.labels.get(labels::MEMBER).map(String::as_str) == Some(member)
                && matches!(
                    c.state,
                    ContainerState::Exited { .. } | ContainerState::Dead
                )
        })
        .map(|c| c.id.as_str())
}

/// What a member's proxy refused since the last apply, and decided in the last minute.
fn egress_facts(state_dir: &Path, t: &Team, m: &Member, since: f64) -> EgressFacts {
    let paths = Paths::new(state_dir, &t.name, &m.name);
    let events = egress::log::read(&paths.log);
    EgressFacts {
        refused: egress::log::refusals(&events, egress::since_last_apply(&paths)),
        last_minute: EgressCounts::of(&events, since),
        grant_source: None,
        approvals: crate::approvals::of_member(state_dir, t, m, &events),
    }
}

/// A main session's terminal and when ateam started it.
fn session_facts(state_dir: &Path, team: &str, name: &str) -> SessionFacts {
    SessionFacts {
        socket: layout::session_socket_path(state_dir, team, name),
        started: crate::sessions::started_at(&layout::session_dir(state_dir, team, name)),
    }
}

/// The transcript folders status shows: the sessions' and members' of the model, and those
/// observe found (among them the kept transcripts of members no manifest wants).
fn transcript_dirs(model: &Model, observed: &Observed) -> std::collections::BTreeSet<PathBuf> {
    let mut dirs = observed.transcript_dirs.clone();
    for t in &model.teams {
        dirs.extend(t.sessions.iter().map(|s| session_transcript(t, s)));
        dirs.extend(t.members.iter().map(|m| m.transcript_dir.clone()));
    }
    dirs
}

/// How often ateam restarted a member (by its restart policy), kept in its control folder
/// (read without following a link or opening a FIFO there).
pub fn restarts(ctl_dir: &Path) -> u64 {
    files::read_small(&crate::core::layout::restarts_path(ctl_dir), 64)
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AccessGrant, Parent, RestartPolicy, UserId};

    fn member(dir: &Path) -> Member {
        Member {
            runtime: Default::default(),
            name: "a".into(),
            user: Some(UserId {
                uid: 4242,
                gid: 4242,
            }),
            parent: Parent::MainSession("lead".into()),
            depth: 1,
            access: AccessGrant {
                name: "g".into(),
                read: vec![],
                write: vec![dir.join("private")],
                network: Network::Allow(vec!["example.com".into()]),
                intercept: vec![],
                host_listeners: vec![],
                deny: vec![],
            },
            image: "ateam-demo:latest".into(),
            image_build: None,
            command: None,
            cwd: dir.into(),
            env: Default::default(),
            secret_env: vec![],
            memory_bytes: 1 << 30,
            pids: 512,
            nano_cpus: None,
            restart: RestartPolicy::OnFailure,
            image_pull_policy: Default::default(),
            labels: Default::default(),
            transcript_dir: dir.join("sessions/members/a"),
            workspace: None,
            snapshot_writes: None,
            agent: None,
            origin: Default::default(),
            share_writes: false,
        }
    }

    /// Each fact is read from where ateam keeps it, for the model's members and sessions and
    /// for the terminals observe found.
    #[test]
    fn facts_are_read_from_the_state_folder() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let state = dir.join("state");
        let private = dir.join("private");
        std::fs::create_dir_all(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ctl = layout::member_ctl_dir(&state, "t", "a");
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::write(ctl.join("restarts"), "3\n").unwrap();
        let old = layout::session_dir(&state, "t", "old");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(layout::session_started_path(&old), "1234").unwrap();
        let transcript = dir.join("sessions/members/a");
        std::fs::create_dir_all(&transcript).unwrap();
        std::fs::write(transcript.join("log"), "hello").unwrap();
        let team = Team::named("t", dir.join("sessions")).with_members(vec![member(dir)]);
        let host = Host {
            uid: 1000,
            gid: 1000,
            home: dir.into(),
            memory_bytes: 1 << 30,
            state_dir: state.clone(),
            sudo_user: None,
            engine_dirs: Default::default(),
        };
        let observed = Observed {
            live_sessions: [("t".into(), "old".into()), ("u".into(), "x".into())].into(),
            ..Default::default()
        };
        let now = UNIX_EPOCH + std::time::Duration::from_secs(1000);
        let model = Model { teams: vec![team] };
        let walks = TranscriptCache::default();
        let f = status_facts(&host, &model, &observed, now, EarlyFacts::default(), &walks);
        assert_eq!(f.now, now);
        let a = &f.members[&("t".to_string(), "a".to_string())];
        assert_eq!(a.restarts, 3);
        assert_eq!(a.not_writable, [private]);
        assert_eq!(a.not_writable_by, Some(4242));
        assert_eq!(a.egress, Some(EgressFacts::default()));
        assert_eq!(f.transcripts[&transcript].bytes, 5);
        let sessions: Vec<_> = f.sessions.keys().collect();
        assert_eq!(sessions, [&("t".to_string(), "old".to_string())]);
        let old = &f.sessions[&("t".to_string(), "old".to_string())];
        assert_eq!(old.started, Some(1234));
        assert_eq!(old.socket, layout::session_socket_path(&state, "t", "old"));
        assert!(f.usage.is_empty() && f.controller.is_none());

        // Read early (while the look waits for the engine), the same facts; a member the
        // early read did not know (a helper asked for since) is read then.
        let early = EarlyFacts::read(&host, &Model { teams: vec![] }, now, &walks);
        assert!(early.members.is_empty());
        let early = EarlyFacts::read(&host, &model, now, &walks);
        assert_eq!(early.members.len(), 1);
        std::fs::write(ctl.join("restarts"), "4\n").unwrap();
        let g = status_facts(&host, &model, &observed, now, early, &walks);
        assert_eq!(
            g.members[&("t".to_string(), "a".to_string())].restarts,
            3,
            "the early read"
        );
        assert_eq!(g.transcripts, f.transcripts);
        let late = status_facts(&host, &model, &observed, now, EarlyFacts::default(), &walks);
        assert_eq!(
            late.members[&("t".to_string(), "a".to_string())].restarts,
            4
        );
    }
}
