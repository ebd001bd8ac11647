//! The desired container of a member, and its spec hash.
//!
//! `ContainerSpec` holds everything that defines a member's container and nothing else: a change
//! of any field (and only that) changes the hash and so recreates the member. What ateam decides
//! at run time without touching the container (the restart policy) lives beside it, not in it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::core::container::{
    CTL_TARGET, ContainerRuntime, ContainerSpec, MEMBER_HOME, Mount, SpecNetwork, container_name,
    labels, team_network_name,
};
use crate::core::env::{CA_VARS, PROXY_VARS};
use crate::core::intercept::EgressPolicy;
use crate::core::layout::{
    EGRESS_SOCKET_NAME, HELPERS_SOCKET_NAME, egress_socket_path, helpers_socket_path,
    member_ctl_dir, member_record_path, session_dir, session_socket_path, session_transcript_dir,
    store_id, team_run_dir, transcript_dir as transcript_dir_of,
};
use crate::host::Host;
use crate::model::{MainSession, Member, Model, Network, PullPolicy, RestartPolicy, Team};

/// Where the egress bridge listens inside a member with an allowlist: its own loopback (each
/// member has its own network namespace). `HTTP_PROXY` and friends point here.
pub(crate) const BRIDGE_LISTEN: &str = "127.0.0.1:3128";

/// Where a member of a team with `helperRequests` reaches its helper server: a second bridge
/// on its own loopback, joined to `/.ateam/helpers.sock`.
pub(crate) const HELPERS_LISTEN: &str = "127.0.0.1:3129";

/// What tells the gate to start the helpers bridge, and the agent where to ask
/// (`crate::requests`). Wget through an HTTP proxy would not reach a loopback address, so
/// the URL is one that `NO_PROXY` names.
fn helpers_env(env: &mut BTreeMap<String, String>) {
    env.insert("ATEAM_HELPERS_LISTEN".into(), HELPERS_LISTEN.into());
    env.insert(
        "ATEAM_HELPERS_SOCKET".into(),
        format!("{CTL_TARGET}/{HELPERS_SOCKET_NAME}"),
    );
    env.insert(
        "ATEAM_HELPERS_URL".into(),
        format!("http://{HELPERS_LISTEN}/helpers"),
    );
}

/// One member as the planner wants it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredMember {
    /// Team name.
    pub team: String,
    /// Member name.
    pub member: String,
    /// Its container, as the manifests decide it.
    pub spec: ContainerSpec,
    /// `spec`'s hash (`ContainerSpec::hash`), as the container's label will carry it.
    pub hash: String,
    /// What to do when its process ends (ateam restarts, not the engine).
    pub restart: RestartPolicy,
    /// Not part of the spec: a changed policy replaces nothing.
    pub pull: PullPolicy,
    /// Its transcript folder on the host.
    pub transcript_dir: PathBuf,
    /// Private per-member files on the host: the start gate, the secrets file.
    pub ctl_dir: PathBuf,
    /// The ids of the containers ateam made for it (`member_record_path`).
    pub record: PathBuf,
    /// From the Team: start even where memory and pids limits are not enforced.
    pub allow_unenforced_limits: bool,
    /// Its egress proxy, when the network is an allowlist.
    pub egress: Option<DesiredEgress>,
    /// Its helper server's socket, when its team allows helper requests.
    #[serde(default)]
    pub helpers: Option<PathBuf>,
    /// Its own repository, made and snapshotted before each start.
    #[serde(default)]
    pub workspace: Option<crate::model::Workspace>,
    /// Copies of its write grants before each start (`Member.snapshotWrites`).
    #[serde(default)]
    pub copies: Option<DesiredCopies>,
    /// Its agent's state folder, in its transcript folder, made before each start.
    #[serde(default)]
    pub agent_home: Option<PathBuf>,
    /// Its agent's native build in the host's cache: fetched when missing and checked before
    /// a start (`runtime::agents`).
    #[serde(default)]
    pub agent_build: Option<crate::core::agents::Cached>,
    /// The agent (`claude`, `codex`) whose terminal UI it runs, told before each start what
    /// it would otherwise ask a person first (`core::agents::claude_ui_state`).
    #[serde(default)]
    pub agent_ui: Option<String>,
    /// The build of its image, when its repository defines it: made when the engine lacks
    /// the tag, before the member is.
    #[serde(default)]
    pub build: Option<crate::model::ImageBuild>,
    /// The model host its `agent:` added to its allow list (the grant did not name it).
    #[serde(default)]
    pub agent_model_host: Option<String>,
    /// Where its agent reads its subscription login from (Codex's `auth.json`): placeholder
    /// tokens, written before each start.
    #[serde(default)]
    pub login_file: Option<PathBuf>,
    /// Its agent's command when the board wakes it (an agent of a team with `board: true`
    /// that runs one task at a time): its next task, `core::agents::WAKE_TASK`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<Vec<String>>,
    /// Since when the person has it suspended (`ateam suspend`, read from the state folder
    /// by every look): the plan keeps it down, its proxy and helper server stopped, and gives
    /// the tasks it held on the board back (its command starts again at `resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<String>,
}

/// A member's copy snapshots: its write grants, where the copies go, their bound in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredCopies {
    /// Its write grants.
    pub folders: Vec<PathBuf>,
    /// `<sessionDir>/snapshots/<member>`.
    pub store: PathBuf,
    /// The most bytes one snapshot holds.
    pub max_bytes: u64,
}

/// A member's egress proxy as the planner wants it: listening on `socket`, judging by `allow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredEgress {
    /// Where it listens: in the member's control folder.
    pub socket: PathBuf,
    /// What it lets through.
    pub policy: EgressPolicy,
}

/// A main session as the planner wants it: a terminal on the host, on its own socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredSession {
    /// Team name.
    pub team: String,
    /// Session name.
    pub name: String,
    /// Its terminal's socket.
    pub socket: PathBuf,
    /// Its working directory.
    pub cwd: PathBuf,
    /// What it runs.
    pub command: Vec<String>,
    /// Its whole environment, ATEAM_ROLE and the rest included (tmux starts it clean).
    pub env: BTreeMap<String, String>,
    /// Its transcript folder (at the top of the team's `sessionDir`).
    pub transcript_dir: PathBuf,
    /// `<state>/teams/<t>/sessions/<s>`: its socket, start time, promotion journal.
    pub dir: PathBuf,
    /// A member of this name becomes this session: where its transcript is now.
    pub promoted_from: Option<PathBuf>,
    /// The removed session this one takes over.
    pub takes_over: Option<String>,
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
    /// The teams' main sessions.
    pub sessions: Vec<DesiredSession>,
    /// The teams' members.
    pub members: Vec<DesiredMember>,
}

/// A team in scope: its containers, transcripts and sessions are looked at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamScope {
    /// Team name.
    pub name: String,
    /// Where its transcripts live (the Team's `sessionDir`).
    pub session_dir: PathBuf,
    /// `team_run_dir`: where its members' records are.
    pub run_dir: PathBuf,
}

/// A member's bind mounts: its grants, its workspace, its agent's build, its transcript
/// folder and its control folder (`ctl`), sorted.
fn member_mounts(m: &Member, ctl: PathBuf) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = m
        .access
        .read
        .iter()
        .map(|p| Mount::same(p, true))
        .chain(m.access.write.iter().map(|p| Mount::same(p, false)))
        .chain(m.workspace.iter().flat_map(|w| {
            // The member's repository, and the person's objects it borrows, read-only.
            [Mount::same(&w.path, false), Mount::same(&w.objects, true)]
        }))
        .chain(m.agent.as_ref().and_then(|a| a.dir.as_ref()).map(|dir| {
            // Its agent's native build, from the host's cache, read-only.
            Mount {
                target: crate::core::agents::AGENT_DIR.into(),
                source: dir.clone(),
                read_only: true,
            }
        }))
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
    mounts
}

/// The container spec of member `m` of `team` on `host`: what drift is measured against.
pub(crate) fn member_spec(team: &Team, m: &Member, host: &Host) -> ContainerSpec {
    let mounts = member_mounts(m, member_ctl_dir(&host.state_dir, &team.name, &m.name));
    let mut env = m.env.clone();
    env.insert("HOME".into(), MEMBER_HOME.into());
    env.insert("ATEAM_ROLE".into(), "member".into());
    env.insert("ATEAM_TEAM".into(), team.name.clone());
    env.insert("ATEAM_NAME".into(), m.name.clone());
    env.insert("ATEAM_MEMBER".into(), m.name.clone());
    // The gate refuses user namespaces under gVisor (gate/main.rs `no_user_namespaces`).
    if m.runtime == ContainerRuntime::Gvisor {
        env.insert("ATEAM_RUNTIME".into(), "gvisor".into());
    }
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
    if let Some(w) = &m.workspace {
        env.insert("ATEAM_WORKSPACE".into(), w.path.display().to_string());
    }
    let network = spec_network(&m.access.network, || {
        team_network_name(&store_id(&host.state_dir), &team.name)
    });
    if network == SpecNetwork::Proxy {
        // The gate starts the bridge when it sees these (see gate/main.rs).
        env.insert("ATEAM_EGRESS_LISTEN".into(), BRIDGE_LISTEN.into());
        env.insert(
            "ATEAM_EGRESS_SOCKET".into(),
            format!("{CTL_TARGET}/{EGRESS_SOCKET_NAME}"),
        );
        let url = format!("http://{BRIDGE_LISTEN}");
        // `host.ateam.internal` is not here: it must reach the proxy, which alone knows it.
        for k in PROXY_VARS {
            let v = if k.eq_ignore_ascii_case("NO_PROXY") {
                "localhost,127.0.0.1,::1"
            } else {
                url.as_str()
            };
            env.insert(k.into(), v.into());
        }
        if !m.access.intercept.is_empty() {
            for (var, file) in CA_VARS {
                env.insert(var.into(), format!("{CTL_TARGET}/{file}"));
            }
        }
    }
    // The board's tools are served beside helper requests, by the same server.
    if team.helper_requests || team.board {
        helpers_env(&mut env);
    }
    let user = m.user.unwrap_or_else(|| host.default_member_user());
    // HOME is the member's own: a tmpfs owned by root (the engines' default) is one an agent
    // cannot write its config into when the image has that folder.
    let tmpfs = BTreeMap::from([
        ("/tmp".to_string(), "rw,nosuid,nodev,size=256m".to_string()),
        (
            MEMBER_HOME.to_string(),
            format!(
                "rw,nosuid,nodev,size=256m,uid={},gid={},mode=0700",
                user.uid, user.gid
            ),
        ),
    ]);
    ContainerSpec {
        name: container_name(&team.name, &m.name),
        image: m.image.clone(),
        command: m.command.clone(),
        cwd: m.cwd.clone(),
        env,
        secret_env: m.secret_env.clone(),
        user: user.to_string(),
        mounts,
        tmpfs,
        memory_bytes: m.memory_bytes,
        pids: m.pids,
        nano_cpus: m.nano_cpus,
        network,
        labels: m.labels.clone(),
        terminal: m.agent.as_ref().is_some_and(|a| a.interactive),
        runtime: m.runtime,
    }
}

/// The planner's view of a validated set of manifests.
pub fn desired_state(desired: &Model, host: &Host) -> DesiredState {
    desired_state_of(desired, host, None)
}

/// `desired_state`, with only the members named `only` when given (one member's look:
/// each member's spec and its hash cost the same whether or not it is looked at).
pub(crate) fn desired_state_of(desired: &Model, host: &Host, only: Option<&str>) -> DesiredState {
    let mut members = Vec::new();
    let mut sessions = Vec::new();
    for team in &desired.teams {
        for s in &team.sessions {
            sessions.push(desired_session(team, s, host));
        }
        for m in team
            .members
            .iter()
            .filter(|m| only.is_none_or(|o| m.name == o))
        {
            members.push(desired_member(team, m, host));
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

/// A main session as the planner sees it: its transcript folder, its socket and the
/// variables ateam sets in it.
fn desired_session(team: &Team, s: &MainSession, host: &Host) -> DesiredSession {
    let transcript_dir = if s.transcript_dir.as_os_str().is_empty() {
        session_transcript_dir(&team.session_dir, &s.name)
    } else {
        s.transcript_dir.clone()
    };
    let mut env = s.env.clone();
    env.insert("ATEAM_ROLE".into(), "main".into());
    env.insert("ATEAM_TEAM".into(), team.name.clone());
    env.insert("ATEAM_NAME".into(), s.name.clone());
    env.insert(
        "ATEAM_SESSION_DIR".into(),
        transcript_dir.display().to_string(),
    );
    DesiredSession {
        team: team.name.clone(),
        name: s.name.clone(),
        socket: session_socket_path(&host.state_dir, &team.name, &s.name),
        cwd: s.cwd.clone(),
        command: s.command.clone(),
        env,
        transcript_dir,
        dir: session_dir(&host.state_dir, &team.name, &s.name),
        promoted_from: s
            .promoted_from
            .as_ref()
            .map(|m| transcript_dir_of(&team.session_dir, m)),
        takes_over: s.takes_over.clone(),
    }
}

/// A member as the planner sees it: its spec and hash, and the folders, sockets and servers
/// ateam keeps beside its container.
fn desired_member(team: &Team, m: &Member, host: &Host) -> DesiredMember {
    let spec = member_spec(team, m, host);
    DesiredMember {
        team: team.name.clone(),
        member: m.name.clone(),
        hash: spec.hash(),
        spec,
        restart: m.restart,
        pull: m.image_pull_policy,
        transcript_dir: m.transcript_dir.clone(),
        ctl_dir: member_ctl_dir(&host.state_dir, &team.name, &m.name),
        record: member_record_path(&team_run_dir(&host.state_dir, &team.name), &m.name),
        allow_unenforced_limits: team.allow_unenforced_limits,
        egress: match &m.access.network {
            Network::Allow(allow) => Some(DesiredEgress {
                socket: egress_socket_path(&host.state_dir, &team.name, &m.name),
                policy: EgressPolicy {
                    allow: allow.clone(),
                    intercept: m.access.intercept.clone(),
                    applied_by: host.appliers(team.folder().as_deref()),
                    host_listeners: m.access.host_listeners.clone(),
                    deny: m.access.deny.clone(),
                },
            }),
            Network::None | Network::Open => None,
        },
        helpers: (team.helper_requests || team.board)
            .then(|| helpers_socket_path(&host.state_dir, &team.name, &m.name)),
        workspace: m.workspace.clone(),
        agent_home: m.agent.as_ref().map(|a| a.home.clone()),
        agent_build: m.agent.as_ref().and_then(crate::model::Agent::cached),
        build: m.image_build.clone(),
        agent_model_host: m.agent.as_ref().and_then(|a| a.model_host.clone()),
        agent_ui: m
            .agent
            .as_ref()
            .filter(|a| a.interactive)
            .map(|a| a.name.clone()),
        wake: m
            .agent
            .as_ref()
            .filter(|a| team.board && !a.interactive)
            .and_then(|a| a.next_task(crate::core::agents::WAKE_TASK, &m.transcript_dir, &m.cwd))
            .map(|x| x.command),
        login_file: m
            .agent
            .as_ref()
            .and_then(|a| a.expand(&m.transcript_dir, &m.cwd))
            .and_then(|x| x.login_file),
        copies: m.snapshot_writes.map(|max_bytes| DesiredCopies {
            folders: m.access.write.clone(),
            store: crate::core::layout::copy_snapshots_dir(&team.session_dir, &m.name),
            max_bytes,
        }),
        suspended: None,
    }
}

/// A member's network, from its grant; `team_net` is its team's network name.
fn spec_network(n: &crate::model::Network, team_net: impl FnOnce() -> String) -> SpecNetwork {
    match n {
        crate::model::Network::None => SpecNetwork::None,
        crate::model::Network::Allow(_) => SpecNetwork::Proxy,
        crate::model::Network::Open => SpecNetwork::Open(team_net()),
    }
}
