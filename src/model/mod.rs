//! The trusted model: what validation produced. Every path here is absolute, canonical and
//! checked; every reference resolves. Nothing downstream re-validates.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::container::ContainerRuntime;

mod agents;

/// Everything a set of manifests asks for, validated and grouped by team: the trusted model.
/// (The planner's view of it, members and sessions flattened with their specs, is
/// `plan::DesiredState`.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// The teams, each with everything that belongs to it.
    pub teams: Vec<Team>,
}

/// A Team with its sessions, grants and members: the unit apply, status and delete work on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Team {
    /// Its name, unique on the host: every container and state path is named after it.
    pub name: String,
    /// Its metadata.labels (`delete -l`). Default: records of 0.1.0 have none.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The engine it asked for (`auto` is resolved when applied, not here).
    pub backend: BackendChoice,
    /// Who its members run as, unless a Member says otherwise.
    #[serde(default)]
    pub user: Option<UserId>,
    /// Members may run as uid or gid 0 (said in so many words in the Team).
    #[serde(default)]
    pub allow_root_user: bool,
    /// The image of members that name none; `None`: each member must name its own.
    pub image: Option<String>,
    /// Most members the team may have, manifest and requested ones together.
    pub max_members: u32,
    /// Deepest nesting of members (a main session is depth 0, its members 1).
    pub max_depth: u32,
    /// Where transcripts live (absolute): `<sessionDir>/<session>` and `<sessionDir>/members/`.
    pub session_dir: PathBuf,
    /// Members may start where the engine cannot enforce their memory and pids limits.
    pub allow_unenforced_limits: bool,
    /// Members may ask for helpers through `/.ateam/helpers.sock` (`crate::requests`).
    /// Default false, and for records of 0.1.0: a request widens the team at run time, which
    /// a person should opt into.
    #[serde(default)]
    pub helper_requests: bool,
    /// The team's sessions have its board's tools (`crate::board`, `app::team_tools`).
    /// Default false, and for records before 0.6.
    #[serde(default)]
    pub board: bool,
    /// The `-f` paths it was applied from (files and folders, absolute). No later write grant,
    /// of any team or helper, may reach them: what is there is read as the person's intent.
    /// Default: records before 0.4 and teams applied from standard input have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<PathBuf>,
    /// Its main sessions, which run on the host.
    pub sessions: Vec<MainSession>,
    /// Its AccessGrants, by name; each member carries a copy of its own in `Member::access`.
    pub grants: Vec<AccessGrant>,
    /// Its members: those its manifests name and those members asked for.
    pub members: Vec<Member>,
}

impl Team {
    /// The folder the team was applied from (its first `-f` path, or that file's folder):
    /// whose owner a root apply is for when no sudo user says (`Host::appliers`).
    pub fn folder(&self) -> Option<PathBuf> {
        let first = self.manifests.first()?;
        if first.is_dir() {
            Some(first.clone())
        } else {
            first.parent().map(std::path::Path::to_path_buf)
        }
    }

    /// A team named `name` whose transcripts live in `session_dir`, with what a manifest that
    /// says nothing more gives (the limits `manifest::validate` defaults to: 10 members, 3
    /// deep) and nothing else: no labels, the default engine, no user, root and unenforced
    /// limits not allowed, no image, no helper requests, no board, and no manifests,
    /// sessions, grants or members. For tests and programs that build a team in code; the
    /// `with_*` setters change one field each.
    pub fn named(name: impl Into<String>, session_dir: impl Into<PathBuf>) -> Team {
        Team {
            name: name.into(),
            labels: BTreeMap::new(),
            backend: BackendChoice::default(),
            user: None,
            allow_root_user: false,
            image: None,
            max_members: 10,
            max_depth: 3,
            session_dir: session_dir.into(),
            allow_unenforced_limits: false,
            helper_requests: false,
            board: false,
            manifests: vec![],
            sessions: vec![],
            grants: vec![],
            members: vec![],
        }
    }

    /// The team with these members.
    #[cfg(test)]
    pub(crate) fn with_members(mut self, members: Vec<Member>) -> Team {
        self.members = members;
        self
    }

    /// The team, its members allowed to run as uid or gid 0 or not.
    #[cfg(test)]
    pub(crate) fn with_allow_root_user(mut self, allow: bool) -> Team {
        self.allow_root_user = allow;
        self
    }

    /// The team, its members allowed to start where their limits are not enforced or not.
    #[cfg(test)]
    pub(crate) fn with_allow_unenforced_limits(mut self, allow: bool) -> Team {
        self.allow_unenforced_limits = allow;
        self
    }
}

/// A session a person drives on the host, with the person's own access; members report to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MainSession {
    /// Its name, unique among the team's sessions.
    pub name: String,
    /// Its working directory (absolute).
    pub cwd: PathBuf,
    /// The command and its arguments, for example `[claude]`.
    pub command: Vec<String>,
    /// Extra environment; the session otherwise starts with a clean one.
    pub env: BTreeMap<String, String>,
    /// Its metadata.labels.
    pub labels: BTreeMap<String, String>,
    /// `<sessionDir>/<name>`. Default: records of 0.2 and before have none (`transcript`).
    #[serde(default)]
    pub transcript_dir: PathBuf,
    /// The Member this session was before (same name): its transcript moves here.
    #[serde(default)]
    pub promoted_from: Option<String>,
    /// The MainSession, gone from the manifests, whose members now report to this one.
    #[serde(default)]
    pub takes_over: Option<String>,
}

/// Network access, ordered from narrowest to widest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Network {
    /// No network at all (only loopback).
    None,
    /// Only these hosts (`host`, `host:port`, `*.domain`), through the member's egress proxy.
    Allow(Vec<String>),
    /// Unrestricted network.
    Open,
}

/// The folders and network a member may use, with every path canonical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessGrant {
    /// Its name, unique in its team; empty for `AccessGrant::empty`.
    pub name: String,
    /// Read-only folders (not repeating those in `write`).
    pub read: Vec<PathBuf>,
    /// Folders mounted read-write (write implies read).
    pub write: Vec<PathBuf>,
    /// Which network it may reach.
    pub network: Network,
    /// The hosts of `network`'s allow list that have rules (each also in the list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intercept: Vec<crate::core::intercept::Intercept>,
    /// Uids whose listeners on the host its members may reach besides the person's
    /// (`hostListeners`). Default: records before it have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_listeners: Vec<u32>,
    /// Destinations refused even where `network`'s list reaches them (`spec.deny`).
    /// Default: records before it have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl AccessGrant {
    /// A member without `access` gets this: nothing.
    pub fn empty() -> Self {
        AccessGrant {
            name: String::new(),
            read: vec![],
            write: vec![],
            network: Network::None,
            intercept: vec![],
            host_listeners: vec![],
            deny: vec![],
        }
    }
}

/// An image a repository defines, as ateam builds it: from local images only, with no
/// network, tagged by the hash of what it reads (`build_context`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageBuild {
    /// The `devcontainer.json` it is defined in; `None` for a manifest's `build:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<PathBuf>,
    /// The context folder (absolute, no symlink on its path).
    pub context: PathBuf,
    /// The Dockerfile, relative to the context and inside it.
    pub dockerfile: String,
    /// Build arguments.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// The stage built; `None`: the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The SHA-256 of the context, Dockerfile path, arguments and target, as validation
    /// read them; the build refuses a context that no longer hashes so.
    pub hash: String,
    /// The images its Dockerfile builds from: the engine must have each (no registry).
    pub bases: Vec<String>,
}

/// Who a member works for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Parent {
    /// A main session of the same team, by name.
    MainSession(String),
    /// Another member of the same team, by name.
    Member(String),
}

/// A helper agent in a locked-down container, with everything resolved: its image, grant,
/// limits and user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Its name, unique in its team; its container is named after both (`container_name`).
    pub name: String,
    /// Who it works for.
    pub parent: Parent,
    /// Who it runs as, from the Member or its Team; `None`: `Host::default_member_user`.
    #[serde(default)]
    pub user: Option<UserId>,
    /// How far below its main session it is: 1 for a session's own member.
    pub depth: u32,
    /// Its grant, copied in (`AccessGrant::empty` when it names none).
    pub access: AccessGrant,
    /// Its image, its own or the Team's; for one its repository defines, the tag ateam
    /// builds it as (`core::image_build::tag`).
    pub image: String,
    /// The build of `image`, when its repository defines it (`image: {devcontainer|build}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_build: Option<ImageBuild>,
    /// Command and arguments; `None`: the image's own.
    pub command: Option<Vec<String>>,
    /// Its working directory, inside its grants or its transcript folder.
    pub cwd: PathBuf,
    /// Plain environment variables, visible in the engine's configuration.
    pub env: BTreeMap<String, String>,
    /// Names of variables whose values come from apply's environment, handed over in a
    /// private file and never in the container's configuration.
    pub secret_env: Vec<String>,
    /// Memory cap in bytes (also the memory+swap cap).
    pub memory_bytes: u64,
    /// Most processes in its container.
    pub pids: u32,
    /// CPUs in billionths (the engines' NanoCpus).
    pub nano_cpus: Option<u64>,
    /// What happens when its process ends; ateam restarts, not the engine.
    pub restart: RestartPolicy,
    /// Default: records of 0.1.0 have none.
    #[serde(default)]
    pub image_pull_policy: PullPolicy,
    /// Its metadata.labels, copied onto its container.
    pub labels: BTreeMap<String, String>,
    /// `<sessionDir>/members/<name>`.
    pub transcript_dir: PathBuf,
    /// Its own repository beside the person's, when it is a writer with a workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    /// Its coding agent, when the manifest names one (`agent:`); `command` and `env` hold
    /// what it expands to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Agent>,
    /// Copy its write grants before every start, up to this many bytes (`snapshotWrites`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_writes: Option<u64>,
    /// Where it comes from. Default (and for records of 0.1.0): a manifest.
    #[serde(default, skip_serializing_if = "Origin::is_manifest")]
    pub origin: Origin,
    /// It lets other members write where it writes (`shareWrites`): one writer per folder
    /// holds unless both of two overlapping members say so. Default: records before it have
    /// none, and did not share.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share_writes: bool,
    /// The OCI runtime it runs under (`runtime:`); records before it ran under runc.
    #[serde(default, skip_serializing_if = "ContainerRuntime::is_runc")]
    pub runtime: ContainerRuntime,
}

/// A member's coding agent, as the manifest names it (`core::agents`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    /// `claude` or `codex`.
    pub name: String,
    /// Its first task.
    pub task: String,
    /// The model, if not the agent's default.
    pub model: Option<String>,
    /// The model's base URL, if not the vendor's.
    pub model_url: Option<String>,
    /// Flags of the person's.
    pub args: Vec<String>,
    /// Runs its terminal UI in a terminal ateam keeps (`ateam attach`).
    #[serde(default)]
    pub interactive: bool,
    /// Its state folder in the transcript folder, made before it starts.
    pub home: PathBuf,
    /// The version of its native build (the manifest's, else the one ateam pins). `None` in
    /// records before ateam brought the agent (their command ran the image's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The SHA-256 of that build's npm tarball (the manifest's, else the one ateam pins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The build's folder in the host's agent cache, mounted read-only at
    /// `core::agents::AGENT_DIR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// An API key, or the person's subscription login. Absent from records before it: a key.
    #[serde(
        default,
        skip_serializing_if = "crate::core::agents::AgentLogin::is_api_key"
    )]
    pub login: crate::core::agents::AgentLogin,
    /// Its team gives its sessions the board's tools: the agent is configured to start them
    /// (`core::agents::team_tools_args`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub team_tools: bool,
    /// PEM certificates its model host is trusted by besides the machine's roots
    /// (`modelCA`: a local server's or a gateway's own CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ca: Option<String>,
    /// The allow entry `agent:` added to the member's grant for its model host
    /// (`AccessGrant::add_model_host`); `None` when the grant named it already, or is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_host: Option<String>,
}

impl Agent {
    /// The build it runs and where the host keeps it; `None` for an old record.
    pub(crate) fn cached(&self) -> Option<crate::core::agents::Cached> {
        Some(crate::core::agents::Cached {
            build: crate::core::agents::Build {
                kind: crate::core::agents::AgentKind::parse(&self.name)?,
                version: self.version.clone()?,
                sha256: self.sha256.clone()?,
            },
            dir: self.dir.clone()?,
        })
    }
}

/// A writer's workspace, validated: a repository of the member's own at `path`, made from
/// the person's repository at `repo` (`crate::workspace`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    /// The person's repository: its top folder.
    pub repo: PathBuf,
    /// Its git folder (`<repo>/.git`).
    pub git_dir: PathBuf,
    /// `<git_dir>/objects`: the member reads it (read-only) through its alternates.
    pub objects: PathBuf,
    /// The commit the branch starts at, as the manifest names it (resolved when the
    /// workspace is made).
    pub base: String,
    /// The member's branch.
    pub branch: String,
    /// `<sessionDir>/workspaces/<member>`: mounted read-write, the member's working folder.
    pub path: PathBuf,
}

/// Why a member exists: a manifest names it, or another member asked for it at run time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// Named in a manifest.
    #[default]
    Manifest,
    /// Asked for by member `by` of the same team through its helpers socket, at `at` (RFC
    /// 3339). It lives as long as `by` is desired.
    Requested {
        /// The member that asked, by name.
        by: String,
        /// When, as RFC 3339.
        at: String,
    },
    /// Made by the person from a running member (`ateam fork`), with copies of its write
    /// grants, transcript and HOME. It lives as long as `from` is desired.
    Forked {
        /// The member it was made from, by name.
        from: String,
        /// When, as RFC 3339.
        at: String,
    },
}

impl Origin {
    /// Whether a manifest names it (also what records leave out when serialized).
    pub(crate) fn is_manifest(&self) -> bool {
        matches!(self, Origin::Manifest)
    }

    /// `manifest`, `requested by NAME` or `forked from NAME`: what status shows.
    pub fn describe(&self) -> String {
        match self {
            Origin::Manifest => "manifest".into(),
            Origin::Requested { by, .. } => format!("requested by {by}"),
            Origin::Forked { from, .. } => format!("forked from {from}"),
        }
    }
}

/// A numeric user and group, as members run with it (`uid:gid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UserId {
    /// The numeric user.
    pub uid: u32,
    /// The numeric group.
    pub gid: u32,
}

impl UserId {
    /// `nobody:nogroup`: who members run as when ateam runs as root and nobody else is known.
    pub(crate) const NOBODY: UserId = UserId {
        uid: 65534,
        gid: 65534,
    };

    /// Root by user or by group: either owns every root-owned file in a member's grants.
    pub fn is_root(self) -> bool {
        self.uid == 0 || self.gid == 0
    }
}

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

impl std::str::FromStr for UserId {
    type Err = String;

    /// Numbers only: a name would mean one thing on the host and another in the image.
    fn from_str(s: &str) -> Result<UserId, String> {
        let bad = || format!("`{s}` is not UID:GID (two numbers, for example 1000:1000)");
        let (u, g) = s.split_once(':').ok_or_else(bad)?;
        let num = |x: &str| {
            (!x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()))
                .then(|| x.parse::<u32>().ok())
                .flatten()
                .ok_or_else(bad)
        };
        Ok(UserId {
            uid: num(u)?,
            gid: num(g)?,
        })
    }
}

/// Which container engine a team runs on.
// Flat rather than `Auto | Engine(Engine)`: these are the manifest's words and its schema's
// (`manifests/ateam.schema.json`); `engine()` names the engine a choice fixes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// The first engine that answers: Podman (rootless, then rootful), then Docker.
    #[default]
    Auto,
    /// Docker only: `DOCKER_HOST`, else its default socket.
    Docker,
    /// Podman only: `CONTAINER_HOST`, else the rootless socket, else the rootful one.
    Podman,
}

impl BackendChoice {
    /// The engine this choice fixes; none for `Auto`.
    pub fn engine(self) -> Option<crate::core::container::Engine> {
        use crate::core::container::Engine;
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Docker => Some(Engine::Docker),
            BackendChoice::Podman => Some(Engine::Podman),
        }
    }
}

/// When the engine fetches a member's image from its registry, as Kubernetes' `imagePullPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum PullPolicy {
    /// Default: pulled when the engine does not have it.
    #[default]
    IfNotPresent,
    /// Never pulled: a missing image refuses the apply before any change.
    Never,
    /// Pulled before every container of it is made (a new tag's content is picked up when the
    /// member is next created or replaced; a running member is not replaced for it).
    Always,
}

/// What the engine does when a member's process ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RestartPolicy {
    /// Never restarted: it stays exited.
    Never,
    /// Default: an agent that finished its work (exit 0) stays finished.
    #[default]
    OnFailure,
    /// Restarted whenever it ends, exit 0 too.
    Always,
}
