//! The trusted model: what validation produced. Every path here is absolute, canonical and
//! checked; every reference resolves. Nothing downstream re-validates.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Everything a set of manifests asks for, grouped by team.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Desired {
    pub teams: Vec<Team>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Team {
    pub name: String,
    /// Its metadata.labels (`delete -l`). Default: records of 0.1.0 have none.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub backend: BackendChoice,
    /// Who its members run as, unless a Member says otherwise.
    #[serde(default)]
    pub user: Option<UserId>,
    /// Members may run as uid or gid 0 (said in so many words in the Team).
    #[serde(default)]
    pub allow_root_user: bool,
    pub image: Option<String>,
    pub max_members: u32,
    pub max_depth: u32,
    pub session_dir: PathBuf,
    pub allow_unenforced_limits: bool,
    /// Members may ask for helpers through `/.ateam/helpers.sock` (`crate::requests`).
    /// Default false, and for records of 0.1.0: a request widens the team at run time, which
    /// a person should opt into.
    #[serde(default)]
    pub helper_requests: bool,
    /// The `-f` paths it was applied from (files and folders, absolute). No later write grant,
    /// of any team or helper, may reach them: what is there is read as the person's intent.
    /// Default: records before 0.4 and teams applied from standard input have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<PathBuf>,
    pub sessions: Vec<MainSession>,
    pub grants: Vec<AccessGrant>,
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MainSession {
    pub name: String,
    pub cwd: PathBuf,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
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
    None,
    Allow(Vec<String>),
    Open,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessGrant {
    pub name: String,
    /// Read-only folders (not repeating those in `write`).
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub network: Network,
    /// The hosts of `network`'s allow list that have rules (each also in the list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intercept: Vec<crate::core::intercept::Intercept>,
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
        }
    }
}

/// Who a member works for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Parent {
    MainSession(String),
    Member(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub parent: Parent,
    /// Who it runs as, from the Member or its Team; `None`: `Host::default_member_user`.
    #[serde(default)]
    pub user: Option<UserId>,
    pub depth: u32,
    pub access: AccessGrant,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub secret_env: Vec<String>,
    pub memory_bytes: u64,
    pub pids: u32,
    /// CPUs in billionths (the engines' NanoCpus).
    pub nano_cpus: Option<u64>,
    pub restart: RestartPolicy,
    /// Default: records of 0.1.0 have none.
    #[serde(default)]
    pub image_pull_policy: PullPolicy,
    pub labels: BTreeMap<String, String>,
    /// `<sessionDir>/members/<name>`.
    pub transcript_dir: PathBuf,
    /// Where it comes from. Default (and for records of 0.1.0): a manifest.
    #[serde(default, skip_serializing_if = "Origin::is_manifest")]
    pub origin: Origin,
}

/// Why a member exists: a manifest names it, or another member asked for it at run time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    #[default]
    Manifest,
    /// Asked for by member `by` of the same team through its helpers socket, at `at` (RFC
    /// 3339). It lives as long as `by` is desired.
    Requested { by: String, at: String },
}

impl Origin {
    pub fn is_manifest(&self) -> bool {
        matches!(self, Origin::Manifest)
    }

    /// `manifest`, or `requested by NAME`: what status shows.
    pub fn describe(&self) -> String {
        match self {
            Origin::Manifest => "manifest".into(),
            Origin::Requested { by, .. } => format!("requested by {by}"),
        }
    }
}

/// A numeric user and group, as members run with it (`uid:gid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UserId {
    pub uid: u32,
    pub gid: u32,
}

impl UserId {
    /// `nobody:nogroup`: who members run as when ateam runs as root and nobody else is known.
    pub const NOBODY: UserId = UserId {
        uid: 65534,
        gid: 65534,
    };

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
    Docker,
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
    Never,
    /// Default: an agent that finished its work (exit 0) stays finished.
    #[default]
    OnFailure,
    Always,
}
