//! What status shows beyond the plan, as plain data: restarts, last exits, main sessions'
//! terminals, transcript sizes, folders a member cannot write, egress refusals, cgroup usage
//! and the controller's record. `observe::status_facts` reads them from the state folder and
//! the host right after the look; `team_status` only reads this value, so every row is
//! tested without an engine or a disk.
//!
//! Why not in `plan::Observed`: the planner reads none of these, and most move at every look
//! (bytes written, CPU seconds, refusals). In `Observed` they would be read at every
//! reconcile of the controller (walking every transcript folder), and every planner table
//! test would have to state them. Status asks for them once, next to the look.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::documents::ControllerStatus;
use super::rows::{EgressCounts, Usage};
use crate::core::container::LastExit;
use crate::plan::ObservedContainer;
use crate::servers::egress::log::Refusal;

/// Everything status shows that is neither the model, what the engine said, nor the plan.
#[derive(Debug, Clone)]
pub struct StatusFacts {
    /// When they were read: ages and idle times count to here.
    pub now: SystemTime,
    /// The transcript folders of the teams' sessions and members, and those observe found
    /// (the kept ones among them): size and last change. One not here counts as empty.
    pub transcripts: BTreeMap<PathBuf, TranscriptUsage>,
    /// By `(team, member)`, for every member of the model.
    pub members: BTreeMap<(String, String), MemberFacts>,
    /// By `(team, name)`: the main sessions of the model, and those whose terminal answers.
    pub sessions: BTreeMap<(String, String), SessionFacts>,
    /// What the cgroup of each running container counts now, by container id.
    pub usage: BTreeMap<String, crate::core::container::Usage>,
    /// The controller of the state folder; none if none ever ran.
    pub controller: Option<ControllerStatus>,
    /// The board of each team that has one, by team.
    pub boards: BTreeMap<String, crate::board::store::Summary>,
}

/// A transcript folder's size and when it last changed (`execute::transcript_usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TranscriptUsage {
    /// Bytes in the folder's files.
    pub bytes: u64,
    /// When anything in it last changed.
    pub last_change: Option<SystemTime>,
}

/// What the state folder and the host say of one member.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemberFacts {
    /// How often its container was restarted (its `ctl/restarts`).
    pub restarts: u64,
    /// The last exit ateam recorded (`store::Record`).
    pub last_exit: Option<LastExit>,
    /// Its write grants that the uid it runs as cannot write (`host::access`).
    pub not_writable: Vec<PathBuf>,
    /// That uid, when `not_writable` is not empty.
    pub not_writable_by: Option<u32>,
    /// Its proxy's log, for a member with an allow list.
    pub egress: Option<EgressFacts>,
    /// What its agent's own transcript says, for an agent member (`transcripts`).
    pub agent: Option<crate::transcripts::AgentFacts>,
}

/// What a member's egress proxy logged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressFacts {
    /// The refusals since the last apply, most frequent first.
    pub refused: Vec<Refusal>,
    /// The decisions of the last minute.
    pub last_minute: EgressCounts,
    /// The member's grant as its manifest says it now, when there are refusals to suggest a
    /// grant for (`manifest::edit`).
    pub grant_source: Option<String>,
    /// Its pending approvals (`approvals::pending`).
    pub approvals: Vec<crate::approvals::Pending>,
}

/// What status shows of a main session beyond the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFacts {
    /// Its tmux socket.
    pub socket: PathBuf,
    /// When ateam started it, in seconds since the epoch.
    pub started: Option<i64>,
}

impl StatusFacts {
    /// No facts at all, at `now`: every member as if never restarted, every folder empty.
    pub fn empty(now: SystemTime) -> StatusFacts {
        StatusFacts {
            now,
            transcripts: BTreeMap::new(),
            members: BTreeMap::new(),
            sessions: BTreeMap::new(),
            usage: BTreeMap::new(),
            controller: None,
            boards: BTreeMap::new(),
        }
    }

    pub(super) fn transcript(&self, dir: &Path) -> TranscriptUsage {
        self.transcripts.get(dir).copied().unwrap_or_default()
    }

    pub(super) fn member(&self, team: &str, member: &str) -> Option<&MemberFacts> {
        self.members.get(&(team.to_string(), member.to_string()))
    }

    pub(super) fn session(&self, team: &str, name: &str) -> Option<&SessionFacts> {
        self.sessions.get(&(team.to_string(), name.to_string()))
    }

    /// When the running controller restarts a crash-looping `team/member`.
    pub(super) fn restart_due(&self, team: &str, member: &str) -> Option<&String> {
        let c = self.controller.as_ref().filter(|c| c.running)?;
        c.restarts_due.get(&format!("{team}/{member}"))
    }

    /// What container `c` uses now, with the limits it runs under.
    pub(super) fn usage_of(&self, c: &ObservedContainer) -> Option<Usage> {
        let u = self.usage.get(&c.id)?;
        let limits = c.effective.as_ref();
        Some(Usage {
            cpu_seconds: u.cpu_ns.map(|ns| ns as f64 / 1e9),
            memory_bytes: u.memory,
            memory_limit_bytes: limits.map(|e| e.memory_bytes).filter(|&m| m > 0),
            pids: u.pids,
            pids_limit: limits
                .and_then(|e| u64::try_from(e.pids_limit).ok())
                .filter(|&p| p > 0),
            shared: u.shared,
        })
    }

    pub(super) fn secs_since(&self, t: SystemTime) -> u64 {
        self.now.duration_since(t).map(|d| d.as_secs()).unwrap_or(0)
    }

    /// Now, in seconds since the epoch (the unit of a container's and a session's start).
    pub(super) fn now_secs(&self) -> i64 {
        self.now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }

    pub(super) fn age(&self, c: &ObservedContainer) -> u64 {
        (self.now_secs() - c.created).max(0) as u64
    }
}
