//! Allow entries with rules: a host whose TLS the member's proxy terminates (with a
//! certificate from its team's CA) so that it can judge each request by method and path,
//! tell git's fetch from its push, and put a credential on the way out that the member never
//! holds. Pure data, shared by the manifest, the planner and the proxy.
//!
//! - `judge`: what the proxy does with one request to such a host;
//! - `covers`: whether a child's rules stay within its parent's.

pub mod covers;
pub mod judge;

use serde::{Deserialize, Serialize};

/// One host with rules, as the planner and the proxy see it (the manifest's spelling is
/// `manifest::raw`'s). Its `host` is also an entry of the member's allow list, so everything
/// that judges destinations by name (the planner, status, a child's grant) keeps working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Intercept {
    /// The entry as written: a name or an address, with an optional port; never a wildcard
    /// (that would mint certificates for names nobody wrote).
    pub host: String,
    /// What the proxy puts on every request to this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Credential>,
    /// Requests allowed by method and path; with `git`, either may allow a request; with
    /// neither, every request is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpRule>,
    /// git's smart HTTP: which repositories, and whether push is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitRule>,
    /// PEM certificates trusted for this upstream besides the host's roots (a private
    /// endpoint, or a test's own CA), read from the file the manifest names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<String>,
}

/// A credential the proxy injects. `secret` names a `secretEnv` of the member: the member's
/// variable holds `placeholder(secret)`, the proxy holds the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Credential {
    /// `<header>: <value>` (`x-api-key` for Anthropic's API).
    Header {
        /// The header's name.
        header: String,
        /// The `secretEnv` whose value it carries.
        secret: String,
    },
    /// `Authorization: Bearer <value>` (OpenAI's API, most others).
    Bearer {
        /// The `secretEnv` whose value is the token.
        secret: String,
    },
    /// `Authorization: Basic base64(<username>:<value>)` (git hosts).
    Basic {
        /// The username, as written in the manifest.
        username: String,
        /// The `secretEnv` whose value is the password.
        secret: String,
    },
    /// The person's subscription login of an agent (`ateam login import`): `Authorization:
    /// Bearer <access token>`, and for Codex `chatgpt-account-id`. Its value comes from
    /// ateam's login store, which alone refreshes it, never from apply's environment.
    Login {
        /// Whose login.
        login: crate::core::logins::LoginKind,
    },
}

impl Credential {
    /// The `secretEnv` whose value is injected (for a login, the name its access token has
    /// among the proxy's values: `login:claude`, never a variable).
    pub fn secret(&self) -> &str {
        match self {
            Credential::Header { secret, .. }
            | Credential::Bearer { secret }
            | Credential::Basic { secret, .. } => secret,
            Credential::Login { login } => login.secret_name(),
        }
    }

    /// The login it injects, if it is one.
    pub fn login(&self) -> Option<crate::core::logins::LoginKind> {
        match self {
            Credential::Login { login } => Some(*login),
            Credential::Header { .. } | Credential::Bearer { .. } | Credential::Basic { .. } => {
                None
            }
        }
    }

    /// What the member's request carries in its place: `ateam-placeholder-<SECRET>`, or the
    /// login's placeholder token, shaped as its agent expects.
    pub fn placeholder(&self) -> String {
        match self {
            Credential::Login { login } => login.placeholder_bearer(),
            Credential::Header { .. } | Credential::Bearer { .. } | Credential::Basic { .. } => {
                placeholder(self.secret())
            }
        }
    }
}

/// Requests allowed by method and path. An empty list allows every method (or path). A
/// path pattern is matched against the request's path without its query: `*` stands for
/// any characters but `/`, `**` for any characters, `/` included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRule {
    /// Methods as sent (`GET`, case-sensitive); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Path patterns, each starting with `/`; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// git over smart HTTP. `repositories` are paths on the host (`acme/shop`, matched with or
/// without `.git`); empty: any. Fetch and clone (`git-upload-pack`) are allowed; push
/// (`git-receive-pack`) only with `push`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitRule {
    /// `owner/name` paths on the host; empty: any repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// Push (`git-receive-pack`) is allowed too.
    #[serde(default)]
    pub push: bool,
}

/// What a member's variable holds for a secret the proxy injects: recognisable in a
/// request (and in a person's eyes), worth nothing anywhere else.
pub fn placeholder(secret: &str) -> String {
    format!("ateam-placeholder-{secret}")
}

/// The secrets a list of intercepts injects, each once.
pub(crate) fn injected_secrets(intercepts: &[Intercept]) -> Vec<&str> {
    let mut out: Vec<&str> = intercepts
        .iter()
        .filter_map(|i| i.credentials.as_ref().map(Credential::secret))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The logins a list of intercepts injects, each once.
pub(crate) fn injected_logins(intercepts: &[Intercept]) -> Vec<crate::core::logins::LoginKind> {
    let mut out: Vec<_> = intercepts
        .iter()
        .filter_map(|i| i.credentials.as_ref().and_then(Credential::login))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A member's whole egress policy: the destinations (tunnelled, or intercepted when an
/// intercept names them) and the rules of the intercepted ones. What the planner wants, what
/// the proxy's policy file says, and what `status` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressPolicy {
    /// Every destination, as written (`host`, `host:port`, `*.domain`), intercepted ones too.
    pub allow: Vec<String>,
    /// Absent from the files of ateam before rules existed: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intercept: Vec<Intercept>,
    /// Whose listeners on the host the member may reach (`host.ateam.internal:PORT`, a
    /// loopback or own address named exactly): the person who applied the team.
    /// Absent from the files of ateam before it: the proxy then trusts only its own uid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_by: Vec<u32>,
    /// And the uids the grant names (`hostListeners`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_listeners: Vec<u32>,
    /// Destinations refused even where `allow` reaches them (the grant's `deny`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}
