//! A team's status as data: its rows (main sessions, members, orphans, strangers, kept
//! transcripts) and what each holds. These are the parts of `StatusDocument`: their doc
//! comments are the schema's words (`manifests/status.schema.json`).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Serialize;

use crate::core::container::LastExit;
use crate::model::{AccessGrant, Network};

/// What a row of `status` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum RowKind {
    /// A main session: a terminal on the host, with your own access.
    MainSession,
    /// A member's container (or a container with a member's labels: an orphan, a stranger).
    Member,
    /// The kept transcript of a member no manifest wants any more.
    Transcript,
}

/// A member's egress: its proxy, and what it refused since the last apply.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressStatus {
    /// `running`, `down` (apply starts it), `stale list` (apply gives it the new list) or
    /// `suspended` (stopped with its member until `ateam resume`).
    pub proxy: String,
    /// The most refused destinations (at most `servers::egress::log::SHOWN`), most frequent first.
    pub refused: Vec<crate::servers::egress::log::Refusal>,
    /// The refused destinations not in `refused`, and how many refusals they had.
    pub refused_left_out: LeftOut,
    /// The AccessGrant that would allow the most refused, ready to paste: never with a
    /// local, metadata or private address or a port that serves more than the web.
    pub suggested_grant: Option<String>,
    /// Entries left out of `suggested_grant` on purpose, each saying what it would open.
    pub not_suggested: Vec<String>,
    /// Entries left out of `suggested_grant` to keep it short.
    pub not_suggested_more: usize,
    /// What its proxy decided in the last minute.
    pub last_minute: EgressCounts,
    /// Refusals the person could answer (`ateam approvals`), collapsed by what they would
    /// grant, oldest first; those that cannot be approved say why.
    pub approvals: Vec<crate::approvals::Pending>,
}

/// How many requests a proxy let through and refused in a span of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressCounts {
    /// Let through.
    pub allowed: u64,
    /// Refused by the list.
    pub refused: u64,
    /// Allowed by the list but not carried (no such name, the upstream failed).
    pub failed: u64,
}

impl EgressCounts {
    /// The decisions among `events` made since `since` (seconds since the epoch).
    pub fn of(events: &[crate::servers::egress::log::Event], since: f64) -> EgressCounts {
        use crate::servers::egress::log::Verdict;
        let mut c = EgressCounts::default();
        for e in events.iter().filter(|e| e.ts >= since) {
            match e.verdict {
                Verdict::Allowed => c.allowed += e.times(),
                Verdict::Refused => c.refused += e.times(),
                Verdict::Failed => c.failed += e.times(),
            }
        }
        c
    }
}

/// What a running member uses now, as its cgroup counts it, and the limits it runs under.
/// Each figure is absent where the kernel's files could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// CPU time since its container started (a counter: its rate is the CPU share).
    pub cpu_seconds: Option<f64>,
    /// Memory in use.
    pub memory_bytes: Option<u64>,
    /// None: no memory limit.
    pub memory_limit_bytes: Option<u64>,
    /// Processes now.
    pub pids: Option<u64>,
    /// None: no pids limit.
    pub pids_limit: Option<u64>,
    /// The container's processes share a cgroup with others (rootless Podman on cgroup v1):
    /// no figure is its own, so none is given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// Refusals beyond those listed: `status` stays short however much a member knocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeftOut {
    /// Refused destinations not listed.
    pub destinations: usize,
    /// Refusals to those, all told.
    pub refusals: u64,
}

impl EgressStatus {
    /// Takes in the refusals since the last apply (`refused`: most frequent first) of a
    /// member of `team` with `grant`: the top ones, a count of the rest, and the grant to paste.
    pub fn add_refusals(
        &mut self,
        team: &str,
        grant: &AccessGrant,
        mut refused: Vec<crate::servers::egress::log::Refusal>,
        source: Option<&str>,
    ) {
        use crate::servers::egress::log::{SHOWN, suggest};
        let s = suggest(team, grant, &refused, source);
        self.suggested_grant = s.grant;
        self.not_suggested = s.withheld;
        self.not_suggested_more = s.more;
        let rest = refused.split_off(refused.len().min(SHOWN));
        self.refused_left_out = LeftOut {
            destinations: rest.len(),
            refusals: rest.iter().map(|r| r.count).sum(),
        };
        self.refused = refused;
    }
}

impl RowKind {
    /// Its name, as the `KIND` column shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::MainSession => "MainSession",
            RowKind::Member => "Member",
            RowKind::Transcript => "Transcript",
        }
    }
}

/// What a member may use: its AccessGrant, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grants {
    /// The AccessGrant's name.
    pub name: String,
    /// Folders mounted read-only.
    pub read: Vec<PathBuf>,
    /// Folders mounted read-write.
    pub write: Vec<PathBuf>,
    /// Those of `write` the member's uid cannot write (by owner, group and mode bits): the
    /// table shows them as `rw!:`, never as writable. Empty when all are writable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_writable: Vec<PathBuf>,
    /// The uid the member runs as, when some of `write` is not writable by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_writable_by: Option<u32>,
    /// What it may reach.
    pub network: NetworkGrant,
}

/// The network a member may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkGrant {
    /// Which kind of network.
    pub mode: NetworkMode,
    /// The hosts of an `allow` grant; empty otherwise.
    pub allow: Vec<String>,
    /// Those of `allow` tunnelled as they are (end-to-end TLS).
    pub tunnelled: Vec<String>,
    /// Those of `allow` with rules: the proxy reads and judges each request.
    pub intercepted: Vec<String>,
    /// The credentials the proxy puts on requests, by secret name (never a value).
    pub injected: Vec<Injection>,
}

/// One credential the proxy injects: `ANTHROPIC_API_KEY -> api.anthropic.com (x-api-key)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Injection {
    /// The member's `secretEnv` whose value the proxy holds.
    pub secret: String,
    /// The host it goes to.
    pub host: String,
    /// The header it goes in: a header name, `bearer` or `basic` (both `Authorization`).
    pub how: String,
}

impl std::fmt::Display for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {} ({})", self.secret, self.host, self.how)
    }
}

/// A member's kind of network, as its AccessGrant says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NetworkMode {
    /// No network at all.
    None,
    /// Only the listed hosts (through the egress proxy).
    Allow,
    /// The engine's default network.
    Open,
}

impl Grants {
    /// The AccessGrant `g`, as data; what its uid cannot write is for the caller to fill in.
    pub fn of(g: &AccessGrant) -> Grants {
        let (mode, allow) = match &g.network {
            Network::None => (NetworkMode::None, vec![]),
            Network::Allow(hosts) => (NetworkMode::Allow, hosts.clone()),
            Network::Open => (NetworkMode::Open, vec![]),
        };
        use crate::core::intercept::Credential;
        let ruled = |h: &String| g.intercept.iter().any(|i| i.host == *h);
        let (intercepted, tunnelled) = allow.iter().cloned().partition(ruled);
        let injected = g
            .intercept
            .iter()
            .filter_map(|i| {
                let c = i.credentials.as_ref()?;
                let how = match c {
                    Credential::Header { header, .. } => header.clone(),
                    Credential::Bearer { .. } => "bearer".into(),
                    Credential::Basic { .. } => "basic".into(),
                    Credential::Login { .. } => "bearer".into(),
                };
                Some(Injection {
                    secret: match c.login() {
                        Some(l) => format!("the {} login", l.name()),
                        None => c.secret().to_string(),
                    },
                    host: i.host.clone(),
                    how,
                })
            })
            .collect();
        Grants {
            name: g.name.clone(),
            read: g.read.clone(),
            write: g.write.clone(),
            not_writable: vec![],
            not_writable_by: None,
            network: NetworkGrant {
                mode,
                allow,
                tunnelled,
                intercepted,
                injected,
            },
        }
    }
}

/// One row of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberStatus {
    /// The member's, main session's or transcript's name.
    pub name: String,
    /// What the row is.
    pub kind: RowKind,
    /// The main session or member it works for; none for a main session, an orphan, a
    /// stranger, a kept transcript.
    pub parent: Option<String>,
    /// `running`, `exited N`, `missing`, `drifted`, `policy violation`, `held at gate`,
    /// `orphan`, `stranger`, `conflict`, `retained`, `suspended`, ... (for people; `drifted` is the
    /// verdict).
    pub state: String,
    /// Why, when the state is not plain (the drifted field, the violations, what apply does).
    pub detail: Option<String>,
    /// This row differs from the manifests (`Plan::drifted`, the definition diff shares).
    pub drifted: bool,
    /// The container's name.
    pub container: Option<String>,
    /// The engine's id of that container, for `docker`/`podman` commands.
    pub container_id: Option<String>,
    /// When the container was created (RFC 3339).
    pub created_at: Option<String>,
    /// Seconds since `createdAt`.
    pub age_secs: Option<u64>,
    /// How often ateam restarted it by its restart policy.
    pub restarts: u64,
    /// When a running controller restarts this crash-looping member next (RFC 3339).
    pub next_restart: Option<String>,
    /// How it last ended: the engine's record while its container is exited, else the last
    /// exit or failed start ateam saw (kept across restarts).
    pub last_exit: Option<LastExit>,
    /// Its transcript folder.
    pub transcript: Option<PathBuf>,
    /// Bytes in its transcript folder (`execute::transcript_usage`).
    pub transcript_bytes: u64,
    /// When its transcript last changed (RFC 3339).
    pub last_activity_at: Option<String>,
    /// Seconds since `lastActivityAt`.
    pub last_activity_secs: Option<u64>,
    /// Its AccessGrant; none for a main session (your own access) and for rows no manifest
    /// describes.
    pub grants: Option<Grants>,
    /// Memory and pids limits are not enforced by this engine (allowed by the team).
    pub limits_unenforced: bool,
    /// Its egress proxy, for a member whose network is an allow list.
    pub egress: Option<EgressStatus>,
    /// A main session's terminal: the tmux socket (`tmux -S <it> attach`, or `ateam attach`).
    pub terminal: Option<PathBuf>,
    /// Why a member exists: a manifest, or another member's request. None for other rows.
    pub origin: Option<OriginStatus>,
    /// What it uses now, while its container runs.
    pub usage: Option<Usage>,
    /// A writer's workspace: its branch and how far its work is from the base and from you.
    #[serde(default)]
    pub workspace: Option<WorkspaceStatus>,
    /// An agent member's outcome, from the agent's own transcript beside its exit code.
    #[serde(default)]
    pub agent: Option<AgentStatus>,
}

/// What an agent member came to: its latest task's outcome, from the agent's own transcript
/// (`ateam transcript` shows it) beside its container's state and exit code. Every text in
/// it that the member wrote is escaped.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentStatus {
    /// `claude` or `codex`.
    pub name: String,
    /// `running`; `done` (its latest task ended, no error of its own, no refused tool call);
    /// `failed` (it said an error, a tool call was refused, e.g. EACCES on a write, or it
    /// exited nonzero); `unknown` (no task ended in its transcript, and it exited 0 or never
    /// ran).
    pub outcome: crate::core::transcript::Verdict,
    /// Why, in one line: the task, the agent's error, the tools that failed, the exit.
    pub reason: String,
    /// The tool calls of its latest task that failed (refused ones say why it failed; others
    /// are the agent's work, such as a test that failed before it fixed it).
    pub failed_tools: Vec<crate::core::transcript::FailedTool>,
    /// Tasks read in its newest session (each `claude -p --continue`, `codex exec resume`
    /// adds one).
    pub tasks: u64,
    /// Its latest task's prompt (at most 200 characters).
    pub task: Option<String>,
    /// Its newest session's file (escaped: the agent named it).
    pub session: Option<String>,
}

/// A writer's workspace as status shows it (`crate::workspace::changes`, at most a few
/// seconds old).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceStatus {
    /// Its folder.
    pub path: PathBuf,
    /// The branch the member works on in it.
    pub branch: String,
    /// Commits on the branch that the base has not.
    pub ahead: u64,
    /// Commits of the base the branch has not.
    pub behind: u64,
    /// Files that differ from the branch's commit (not committed).
    pub uncommitted: u64,
    /// Commits not yet brought into your repository (`ateam collect`).
    pub uncollected: u64,
    /// Why the figures could not be read (made at the first start; tampered with).
    pub error: Option<String>,
}

/// Where a member comes from.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OriginStatus {
    /// `manifest`, `requested` or `forked`.
    pub kind: String,
    /// The member that asked for it (`requested`).
    pub requested_by: Option<String>,
    /// When it asked (RFC 3339).
    pub requested_at: Option<String>,
    /// The member it was forked from (`forked`, `ateam fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// When it was forked (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_at: Option<String>,
}

impl OriginStatus {
    pub(super) fn of(o: &crate::model::Origin) -> OriginStatus {
        match o {
            crate::model::Origin::Manifest => OriginStatus {
                kind: "manifest".into(),
                requested_by: None,
                requested_at: None,
                forked_from: None,
                forked_at: None,
            },
            crate::model::Origin::Requested { by, at } => OriginStatus {
                kind: "requested".into(),
                requested_by: Some(by.clone()),
                requested_at: Some(at.clone()),
                forked_from: None,
                forked_at: None,
            },
            crate::model::Origin::Forked { from, at } => OriginStatus {
                kind: "forked".into(),
                requested_by: None,
                requested_at: None,
                forked_from: Some(from.clone()),
                forked_at: Some(at.clone()),
            },
        }
    }
}

/// One team of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeamStatus {
    /// Team name.
    pub team: String,
    /// `docker`, `podman` or `podman (rootless)`.
    pub engine: String,
    /// Its rows: main sessions, members, kept transcripts.
    pub members: Vec<MemberStatus>,
    /// Anything of this team differs from the manifests.
    pub drifted: bool,
    /// Its board's tasks and messages, when it has one (`board: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board: Option<crate::board::store::Summary>,
}
