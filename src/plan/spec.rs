//! The desired container of a member, and its spec hash.
//!
//! `ContainerSpec` holds everything that defines a member's container and nothing else: a change
//! of any field (and only that) changes the hash and so recreates the member. What ateam decides
//! at run time without touching the container (the restart policy) lives beside it, not in it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::host::Host;
use crate::model::{Desired, Member, Network, RestartPolicy, Team};

/// Label keys that ateam puts on every container it makes.
pub mod labels {
    pub const MANAGED_BY: &str = "ateam.dev/managed-by";
    pub const STORE: &str = "ateam.dev/store";
    pub const TEAM: &str = "ateam.dev/team";
    pub const MEMBER: &str = "ateam.dev/member";
    pub const SPEC_HASH: &str = "ateam.dev/spec-hash";
    /// The whole spec as JSON, so that drift can name the field that changed.
    pub const SPEC: &str = "ateam.dev/spec";
    /// On a replacement being brought up: the id of the container it replaces.
    pub const REPLACES: &str = "ateam.dev/replaces";
}

/// The temporary name of a member's replacement, until the old container is gone. `_` never
/// appears in a team or member name (DNS-1123 labels), so this can equal no member's name.
pub fn replacement_name(name: &str) -> String {
    format!("{name}_next")
}

/// A replacement still under its temporary name: labelled as one and named as the member's
/// replacement exactly (not by a pattern). Once renamed into place it keeps the `replaces`
/// label, as labels cannot change, but it is then the member's container.
pub fn is_replacement(member_name: &str, c_name: &str, labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(labels::REPLACES) && c_name == replacement_name(member_name)
}

/// The home folder inside a member: a private tmpfs.
pub const MEMBER_HOME: &str = "/home/agent";

/// Where ateam's control folder (start gate, secrets) appears inside a member.
pub const CTL_TARGET: &str = "/.ateam";

/// A bind mount. Grants and transcripts sit at the same path inside as outside, so that paths
/// in messages and transcripts mean the same thing on both sides.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mount {
    pub target: PathBuf,
    pub source: PathBuf,
    pub read_only: bool,
}

impl Mount {
    /// The same folder at the same path.
    pub fn same(path: &std::path::Path, read_only: bool) -> Mount {
        Mount {
            target: path.to_path_buf(),
            source: path.to_path_buf(),
            read_only,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub cwd: PathBuf,
    /// Plain environment (secrets are not here: only their names, in `secret_env`).
    pub env: BTreeMap<String, String>,
    pub secret_env: Vec<String>,
    /// `uid:gid` it runs as: the Member's or Team's `user`, else `Host::default_member_user`.
    pub user: String,
    /// Granted folders, the transcript folder and the control folder, sorted by target so
    /// that parents mount first.
    pub mounts: Vec<Mount>,
    /// Mount point -> options.
    pub tmpfs: BTreeMap<String, String>,
    pub memory_bytes: u64,
    pub pids: u32,
    pub nano_cpus: Option<u64>,
    pub network: Network,
    /// The user's labels from the manifest.
    pub labels: BTreeMap<String, String>,
}

impl ContainerSpec {
    /// A short, stable hash of the canonical JSON of the spec (struct fields in a fixed order,
    /// maps sorted).
    pub fn hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("a spec always serializes");
        let digest = Sha256::digest(&json);
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// One member as the planner wants it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredMember {
    pub team: String,
    pub member: String,
    pub spec: ContainerSpec,
    pub hash: String,
    pub restart: RestartPolicy,
    pub transcript_dir: PathBuf,
    /// Private per-member files on the host: the start gate, the secrets file.
    pub ctl_dir: PathBuf,
    /// The ids of the containers ateam made for it (`member_record_path`).
    pub record: PathBuf,
    /// From the Team: start even where memory and pids limits are not enforced.
    pub allow_unenforced_limits: bool,
    /// The egress proxy's socket, when the network is an allowlist.
    pub egress_socket: Option<PathBuf>,
}

/// A main session as the planner wants it: a terminal on the host, on its own socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredSession {
    pub team: String,
    pub name: String,
    pub socket: PathBuf,
    pub cwd: PathBuf,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
}

impl DesiredMember {
    /// The labels the container is created with.
    pub fn container_labels(&self, store: &str) -> BTreeMap<String, String> {
        let mut l = self.spec.labels.clone();
        l.insert(labels::MANAGED_BY.into(), "ateam".into());
        l.insert(labels::STORE.into(), store.into());
        l.insert(labels::TEAM.into(), self.team.clone());
        l.insert(labels::MEMBER.into(), self.member.clone());
        l.insert(labels::SPEC_HASH.into(), self.hash.clone());
        l.insert(
            labels::SPEC.into(),
            serde_json::to_string(&self.spec).expect("a spec always serializes"),
        );
        l
    }
}

/// What the planner compares against the machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DesiredState {
    /// Which ateam store (state folder) owns these containers.
    pub store: String,
    /// Teams in scope: only their containers and transcripts are looked at.
    pub teams: Vec<TeamScope>,
    pub sessions: Vec<DesiredSession>,
    pub members: Vec<DesiredMember>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamScope {
    pub name: String,
    pub session_dir: PathBuf,
    /// `team_run_dir`: where its members' records are.
    pub run_dir: PathBuf,
}

/// The container name of a member. Team and member names are DNS-1123 labels (no `_`), so
/// `_` separates them without ambiguity: team `t` member `a-b` and team `t-a` member `b` get
/// two names. Containers are still identified by labels and the store's record, never by name.
pub fn container_name(team: &str, member: &str) -> String {
    format!("ateam_{team}_{member}")
}

/// An id for a state folder, so that two stores on one machine never touch each other's
/// containers.
pub fn store_id(state_dir: &std::path::Path) -> String {
    let digest = Sha256::digest(state_dir.as_os_str().as_encoded_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// A member's private folder under the state folder.
pub fn member_ctl_dir(state_dir: &std::path::Path, team: &str, member: &str) -> PathBuf {
    team_run_dir(state_dir, team)
        .join("members")
        .join(member)
        .join("ctl")
}

/// The record of the containers ateam made for a member (`store::Record`), beside its control
/// folder and never mounted into it.
pub fn member_record_path(run_dir: &std::path::Path, member: &str) -> PathBuf {
    run_dir.join("members").join(member).join("containers.json")
}

pub fn member_spec(team: &Team, m: &Member, host: &Host) -> ContainerSpec {
    let ctl = member_ctl_dir(&host.state_dir, &team.name, &m.name);
    let mut mounts: Vec<Mount> = m
        .access
        .read
        .iter()
        .map(|p| Mount::same(p, true))
        .chain(m.access.write.iter().map(|p| Mount::same(p, false)))
        .chain([
            Mount::same(&m.transcript_dir, false),
            Mount {
                target: CTL_TARGET.into(),
                source: ctl,
                read_only: true,
            },
        ])
        .collect();
    mounts.sort();
    mounts.dedup();
    let mut env = m.env.clone();
    env.insert("HOME".into(), MEMBER_HOME.into());
    env.insert("ATEAM_TEAM".into(), team.name.clone());
    env.insert("ATEAM_MEMBER".into(), m.name.clone());
    env.insert(
        "ATEAM_SESSION_DIR".into(),
        m.transcript_dir.display().to_string(),
    );
    let join = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    };
    env.insert("ATEAM_READ_DIRS".into(), join(&m.access.read));
    env.insert("ATEAM_WRITE_DIRS".into(), join(&m.access.write));
    let tmpfs = BTreeMap::from([
        ("/tmp".to_string(), "rw,nosuid,nodev,size=256m".to_string()),
        (
            MEMBER_HOME.to_string(),
            "rw,nosuid,nodev,size=256m".to_string(),
        ),
    ]);
    ContainerSpec {
        name: container_name(&team.name, &m.name),
        image: m.image.clone(),
        command: m.command.clone(),
        cwd: m.cwd.clone(),
        env,
        secret_env: m.secret_env.clone(),
        user: m
            .user
            .unwrap_or_else(|| host.default_member_user())
            .to_string(),
        mounts,
        tmpfs,
        memory_bytes: m.memory_bytes,
        pids: m.pids,
        nano_cpus: m.nano_cpus,
        network: m.access.network.clone(),
        labels: m.labels.clone(),
    }
}

/// Where a team's sockets live: under the state folder, private to the user.
pub fn team_run_dir(state_dir: &std::path::Path, team: &str) -> PathBuf {
    state_dir.join("teams").join(team)
}

/// Where a main session's tmux server listens.
pub fn session_socket_path(state_dir: &std::path::Path, team: &str, session: &str) -> PathBuf {
    team_run_dir(state_dir, team)
        .join("sessions")
        .join(session)
        .join("tmux.sock")
}

/// Longest path a Unix socket can be bound at: `sun_path` holds 108 bytes, NUL included.
/// Validation checks every socket path against it, so that a long name or state folder is
/// refused up front rather than failing when tmux or the egress proxy tries to listen.
pub const MAX_SOCKET_PATH: usize = 107;

/// Where a member's egress proxy will listen.
pub fn egress_socket_path(state_dir: &std::path::Path, team: &str, member: &str) -> PathBuf {
    team_run_dir(state_dir, team)
        .join("members")
        .join(member)
        .join("egress.sock")
}

/// The planner's view of a validated set of manifests.
pub fn desired_state(desired: &Desired, host: &Host) -> DesiredState {
    let mut members = Vec::new();
    let mut sessions = Vec::new();
    for team in &desired.teams {
        for s in &team.sessions {
            sessions.push(DesiredSession {
                team: team.name.clone(),
                name: s.name.clone(),
                socket: session_socket_path(&host.state_dir, &team.name, &s.name),
                cwd: s.cwd.clone(),
                command: s.command.clone(),
                env: s.env.clone(),
            });
        }
        for m in &team.members {
            let spec = member_spec(team, m, host);
            members.push(DesiredMember {
                team: team.name.clone(),
                member: m.name.clone(),
                hash: spec.hash(),
                spec,
                restart: m.restart,
                transcript_dir: m.transcript_dir.clone(),
                ctl_dir: member_ctl_dir(&host.state_dir, &team.name, &m.name),
                record: member_record_path(&team_run_dir(&host.state_dir, &team.name), &m.name),
                allow_unenforced_limits: team.allow_unenforced_limits,
                // The allowlisting egress proxy is not built yet: until it is, an allowlist
                // member runs with no network at all (the narrower side), and no proxy is
                // planned. Its socket will be `egress_socket_path(..)`.
                egress_socket: None,
            });
        }
    }
    DesiredState {
        store: store_id(&host.state_dir),
        teams: desired
            .teams
            .iter()
            .map(|t| TeamScope {
                name: t.name.clone(),
                session_dir: t.session_dir.clone(),
                run_dir: team_run_dir(&host.state_dir, &t.name),
            })
            .collect(),
        sessions,
        members,
    }
}
