//! What observe found on the machine, as plain data. The planner reads nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::core::container::{ContainerState, Effective, LastExit};

/// What observe found: the containers, folders, sockets and records of the teams in scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// Containers with ateam's labels, plus any container whose name a desired member would
    /// take (so that conflicts are seen).
    pub containers: Vec<ObservedContainer>,
    /// Transcript folders that exist: members' (`<sessionDir>/members/<name>`) and the
    /// wanted main sessions' (`<sessionDir>/<name>`).
    pub transcript_dirs: BTreeSet<PathBuf>,
    /// Unix sockets that something answers on (a socket file alone does not count); a
    /// member's egress or helpers socket only when it belongs to the uid the member runs as.
    pub live_sockets: BTreeSet<PathBuf>,
    /// The allowlist each egress proxy's policy file holds now, by socket.
    #[serde(default)]
    pub egress_policies: BTreeMap<PathBuf, crate::core::intercept::EgressPolicy>,
    /// Members (team, member) of the teams in scope with an egress proxy's pid file: a proxy
    /// that may run and would have to be stopped.
    #[serde(default)]
    pub egress_proxies: BTreeSet<(String, String)>,
    /// The engine ignores memory, pids and CPU limits (rootless Podman on cgroup v1).
    pub limits_unenforced: bool,
    /// Ids of the containers this store made (its records, `store::Record`), for the teams in
    /// scope. A container with ateam's labels whose id is not here is a stranger.
    #[serde(default)]
    pub recorded: BTreeSet<String>,
    /// Members (team, member) of the teams in scope with a helper server's pid file: a server
    /// that may run and would have to be stopped.
    #[serde(default)]
    pub helper_servers: BTreeSet<(String, String)>,
    /// Main sessions (team, name) of the teams in scope whose terminal answers, wanted or not
    /// (`<state>/teams/<t>/sessions/<name>/tmux.sock`).
    #[serde(default)]
    pub live_sessions: BTreeSet<(String, String)>,
    /// Promotions under way (their journals), in the teams in scope.
    #[serde(default)]
    pub promotions: Vec<crate::core::session::Promotion>,
    /// What each agent member of a team with a board has there (team, member), for its wake.
    #[serde(default)]
    pub board_news: BTreeMap<(String, String), crate::board::store::News>,
    /// Members (team, member) that hold tasks on their team's board (claimed or started).
    #[serde(default)]
    pub board_held: BTreeSet<(String, String)>,
}

/// A container as observe saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedContainer {
    /// The engine's id.
    pub id: String,
    /// Its name, without a leading `/`: how the planner pairs it with a member.
    pub name: String,
    /// ateam's labels on it: which team, member and spec it was made for.
    pub labels: BTreeMap<String, String>,
    /// Created, running, paused, restarting or exited, as the engine lists it.
    pub state: ContainerState,
    /// Seconds since the epoch when created; the newest of duplicates is kept.
    pub created: i64,
    /// From inspect; None when it was not inspected.
    pub effective: Option<Effective>,
    /// Its start gate was released for the start now running (its command runs). False for a
    /// container that an interrupted apply started but never verified, and for one that the
    /// engine or a person restarted since: its gate holds until ateam checks it again.
    #[serde(default = "yes")]
    pub released: bool,
    /// How it ended, while it is exited (from inspect; the planner does not read it).
    #[serde(default)]
    pub last_exit: Option<LastExit>,
    /// The host pid of its first process while it runs (from inspect): where status reads
    /// what it uses from its cgroup. The planner does not read it.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Where its engine writes each start's pids (from inspect): a restart finds the new
    /// first process there. The planner does not read it.
    #[serde(default)]
    pub pid_files: Option<crate::core::container::PidFiles>,
}

fn yes() -> bool {
    true
}
