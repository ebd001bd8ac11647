//! A member's egress proxy as an object ateam reconciles, like a container: started detached
//! (it outlives `ateam apply`), seen alive when its socket answers, started again when it does
//! not, given a new allowlist by rewriting its policy file (no new container), and stopped,
//! its socket removed, when its member goes.
//!
//! - `proxy`: the proxy itself (`ateam egress-proxy`, a hidden command), a file per job:
//!   `serve` (accepting, bounding and refusing connections; signals), `connection` (one
//!   connection from its head to its end), `request` (reading the head), `decide` (the
//!   allowlist's verdict), `upstream` (connecting to the judged address), `tunnel` (carrying
//!   what was allowed), `state` and `policy` (what it holds and reads), `dir` (its folder,
//!   held open); `intercept` and `handshakes` (a host with rules, and the bound on its TLS
//!   work) and `relay` (how it moves an allowed connection's bytes: splice(2), or copying);
//! - `log`: its bounded JSON-lines log, what `logs --egress` and `status` read back.
//! - `listeners`: who owns a socket on the host, from the kernel's TCP table;
//!
//! Inside the member, the bridge (`bridge/main.rs`, started by the gate) listens on
//! `plan::spec::BRIDGE_LISTEN` and forwards each connection to the socket, mounted at
//! `/.ateam/egress.sock`.

pub mod listeners;
pub mod log;
pub mod proxy;
pub mod tls;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::intercept::{EgressPolicy, Intercept};
use crate::core::layout;
use crate::detached::{self, Detach, Launch, LaunchError};
use crate::files::{self, Owner};

/// Whether something answers on the socket: the proxy's liveness.
pub use crate::detached::answers;
/// The `ateam` binary that runs proxies (`detached::exe`).
pub use crate::detached::exe;

/// Why a member's egress proxy could not be set up, started or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// A file of the proxy's could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The proxy was started but its socket did not answer.
    #[error("the egress proxy did not answer on {} within {}s{}", .socket.display(), .secs, .why.as_ref().map(|w| format!(": {w}")).unwrap_or_default())]
    NotAnswering {
        /// The proxy's socket.
        socket: PathBuf,
        /// How long ateam waited.
        secs: u64,
        /// What the proxy wrote on standard error, if anything.
        why: Option<String>,
    },
    /// The socket answers but is not the member's: the member could not connect to it.
    #[error("the egress proxy's socket {} belongs to uid {owner}, not to the member's uid {member}", .socket.display())]
    NotTheMembers {
        /// The proxy's socket.
        socket: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The uid the member runs as.
        member: u32,
    },
    /// The proxy's process could not be started.
    #[error("cannot run the egress proxy ({}): {source}", .exe.display())]
    Spawn {
        /// The binary run.
        exe: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The team's CA, or a leaf of it.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A secret the proxy injects is not in ateam's environment.
    #[error("secretEnv `{name}`, which the proxy injects, is not set in the environment of ateam")]
    MissingSecret {
        /// The variable.
        name: String,
    },
    /// A login the proxy injects could not be read or refreshed.
    #[error(transparent)]
    Login(#[from] crate::logins::LoginError),
    /// The proxy, started as root, could not become the member's user.
    #[error("cannot drop the egress proxy's privileges to {user}: {source}")]
    Privileges {
        /// The `uid:gid` it was to run as.
        user: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// The policy file: the member's allowlist as the manifest says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFile {
    /// Team name.
    pub team: String,
    /// Member name.
    pub member: String,
    /// Every destination, as written (`host`, `host:port`, `*.domain`).
    pub allow: Vec<String>,
    /// Absent from the files of ateam before rules existed: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intercept: Vec<Intercept>,
    /// The uids of the person who applied the team (`EgressPolicy::applied_by`). Absent
    /// from the files of ateam before it: the proxy trusts only its own uid's listeners.
    #[serde(default, rename = "appliedBy", skip_serializing_if = "Vec::is_empty")]
    pub applied_by: Vec<u32>,
    /// The uids the grant names (`hostListeners`).
    #[serde(
        default,
        rename = "hostListeners",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub host_listeners: Vec<u32>,
    /// Refused even where `allow` reaches them (the grant's `deny`). Absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl PolicyFile {
    /// The file for a member's policy.
    pub fn new(team: &str, member: &str, policy: &EgressPolicy) -> PolicyFile {
        PolicyFile {
            team: team.to_string(),
            member: member.to_string(),
            allow: policy.allow.clone(),
            intercept: policy.intercept.clone(),
            applied_by: policy.applied_by.clone(),
            host_listeners: policy.host_listeners.clone(),
            deny: policy.deny.clone(),
        }
    }

    /// The policy it holds, as the planner compares it.
    pub fn policy(&self) -> EgressPolicy {
        EgressPolicy {
            allow: self.allow.clone(),
            intercept: self.intercept.clone(),
            applied_by: self.applied_by.clone(),
            host_listeners: self.host_listeners.clone(),
            deny: self.deny.clone(),
        }
    }
}

/// What the person allowed once (`ateam approvals allow ID --once`) for one start of the
/// member (`core::layout::EGRESS_ONCE_NAME`, 0600, the member's uid, beside the policy): the
/// proxy adds it to its policy while the gate's release names that start, and never past the
/// grant's `deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnceFile {
    /// The gate's release text of the start it holds for (`container-id start-token`).
    pub start: String,
    /// Entries added to the allow list.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules added to hosts with rules.
    #[serde(default)]
    pub rules: Vec<OnceRule>,
}

/// A learning run (`ateam apply --learn`; `core::layout::EGRESS_LEARN_NAME`, 0600, the
/// proxy's uid, beside the policy): until `until`, a tunnel the list does not name is let
/// past the list (and still judged by its address) when the person could approve it: never
/// what `status` would not offer (`log::withheld`), never past the parent's list, never what
/// the grant denies. Each is logged `learned`, an ask for the person.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LearnFile {
    /// Seconds since the epoch.
    pub until: f64,
    /// The parent member's allow list; `None`: its parent is a main session (the person).
    pub parent: Option<Vec<String>>,
    /// The parent's hosts with rules: a tunnel to them would skip the rules, never learned.
    #[serde(default)]
    pub parent_ruled: Vec<String>,
}

impl LearnFile {
    /// Whether a learning run lets `host:port` past the list at `now`.
    pub fn learns(&self, host: &str, port: u16, now: f64) -> bool {
        use crate::core::egress::{Allowlist, Entry, Host};
        let Some(h) = Host::parse(host) else {
            return false;
        };
        let r = log::Refusal {
            host: host.to_string(),
            port,
            count: 1,
            reason: String::new(),
        };
        let within_parent = match &self.parent {
            None => true,
            Some(list) => Allowlist::parse(list).is_ok_and(|l| l.allows(&h, port)),
        };
        now < self.until
            && log::withheld(&r).is_none()
            && Entry::parse(&log::entry_for(&r)).is_ok()
            && within_parent
            && !self
                .parent_ruled
                .iter()
                .any(|p| Entry::parse(p).is_ok_and(|e| e.matches(&h, port)))
    }
}

/// One http rule added to a host with rules, for one start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnceRule {
    /// The host with rules (`Intercept::host`).
    pub host: String,
    pub rule: crate::core::intercept::HttpRule,
}

/// What an intercepting proxy holds besides its policy, in a file of its own (0600, the
/// member's uid, in the egress folder no member mounts): a certificate and key per
/// intercepted host, from the team's CA, and the values of the secrets it injects. Never
/// read by `observe`, `status` or `export`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InterceptFile {
    /// By `Intercept::host`.
    pub leaves: std::collections::BTreeMap<String, Leaf>,
    /// By secret name.
    pub secrets: std::collections::BTreeMap<String, String>,
}

/// A certificate the proxy presents for one host: its chain (leaf, then the team's CA) and
/// its key, both PEM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaf {
    /// The leaf certificate then the team's CA.
    pub chain_pem: String,
    /// The leaf's private key.
    pub key_pem: String,
}

/// Every file of one member's proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Where the proxy listens: in the member's control folder (`/.ateam` inside).
    pub socket: PathBuf,
    /// The proxy's own folder (never mounted).
    pub dir: PathBuf,
    /// The allowlist it reads (`PolicyFile`).
    pub policy: PathBuf,
    /// Its pid file.
    pub pid: PathBuf,
    /// Allowed and refused connections, JSON lines.
    pub log: PathBuf,
    /// What the proxy said on standard error when it last started.
    pub err: PathBuf,
    /// Its certificates and injected secrets (`InterceptFile`).
    pub intercept: PathBuf,
}

impl Paths {
    /// The paths of a member's proxy under ateam's state folder.
    pub fn new(state_dir: &Path, team: &str, member: &str) -> Paths {
        let dir = layout::egress_dir(state_dir, team, member);
        Paths {
            socket: layout::egress_socket_path(state_dir, team, member),
            policy: layout::egress_policy_path(&dir),
            pid: layout::egress_pid_path(&dir),
            log: layout::egress_log_path(&dir),
            err: layout::egress_err_path(&dir),
            intercept: layout::egress_intercept_path(&dir),
            dir,
        }
    }
}

/// The allowlist a proxy reads now (its `policy.json`), if the file is there and readable.
pub(crate) fn read_policy(path: &Path) -> Option<PolicyFile> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes what is allowed once, atomically, with the policy file's owner (the proxy's uid);
/// the proxy sees it at its next connection.
pub(crate) fn write_once(paths: &Paths, once: &OnceFile) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(&paths.policy)?;
    let owner = Owner {
        uid: meta.uid(),
        gid: meta.gid(),
    };
    let json = serde_json::to_vec_pretty(once).map_err(std::io::Error::other)?;
    files::write_atomic(
        &layout::egress_dir_once_path(&paths.dir),
        &json,
        0o600,
        owner,
    )
}

/// Writes a learning run's bounds, atomically, with the policy file's owner.
pub(crate) fn write_learn(paths: &Paths, learn: &LearnFile) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(&paths.policy)?;
    let owner = Owner {
        uid: meta.uid(),
        gid: meta.gid(),
    };
    let json = serde_json::to_vec_pretty(learn).map_err(std::io::Error::other)?;
    files::write_atomic(
        &paths.dir.join(layout::EGRESS_LEARN_NAME),
        &json,
        0o600,
        owner,
    )
}

/// Writes the allowlist atomically; the proxy sees the new file at its next connection.
pub(crate) fn write_policy(
    paths: &Paths,
    policy: &PolicyFile,
    owner: Owner,
) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(policy).expect("a policy always serializes");
    files::write_atomic(&paths.policy, &json, 0o600, owner)
}

/// What `write_intercepts` needs besides the policy.
pub(crate) struct InterceptContext<'a> {
    /// ateam's state folder (the team's CA lives under it).
    pub state_dir: &'a Path,
    /// Team name.
    pub team: &'a str,
    /// The member's control folder (inside: `/.ateam`), where its CA files go.
    pub ctl_dir: &'a Path,
    /// Who ateam's own files belong to.
    pub store_owner: Owner,
    /// The user the member (and its proxy) runs as.
    pub member: Owner,
    /// Looks up a secret's value in ateam's environment.
    pub secret: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

/// Gives a member's proxy what its intercepted hosts need, before it reads the policy that
/// names them: a leaf per host from the team's CA and the values of the secrets it injects
/// (`intercept.json`), and gives the member the CA to trust (`ca.pem`, and `ca-bundle.pem`
/// with the image's roots, in its control folder). A policy without intercepts removes the
/// file: no certificate or secret outlives the rule that needed it.
pub(crate) fn write_intercepts(
    paths: &Paths,
    policy: &EgressPolicy,
    cx: &InterceptContext<'_>,
) -> Result<(), ProxyError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProxyError::Io { path, source }
    };
    if policy.intercept.is_empty() {
        return files::remove_if_present(&paths.intercept).map_err(io(&paths.intercept));
    }
    let ca = tls::TeamCa::load_or_create(cx.state_dir, cx.team, cx.store_owner)?;
    let mut file = InterceptFile::default();
    for i in &policy.intercept {
        file.leaves.insert(i.host.clone(), ca.issue(&i.host)?);
    }
    files::member_dir(&paths.dir, cx.store_owner, cx.member).map_err(io(&paths.dir))?;
    // A login's values are read, and the file written, under the logins' lock: a keeper
    // that refreshes meanwhile writes after this, never before it.
    with_logins(cx.state_dir, cx.store_owner, policy, |logins| {
        file.secrets = injected_values(policy, cx.secret, logins)?;
        let json = serde_json::to_vec(&file).expect("an intercept file always serializes");
        files::write_atomic(&paths.intercept, &json, 0o600, cx.member).map_err(io(&paths.intercept))
    })?;
    // Made as `Runtime::prepare` makes it: the proxy may start before the container.
    files::member_dir(cx.ctl_dir, cx.store_owner, cx.member).map_err(io(cx.ctl_dir))?;
    write_member_ca(paths, cx.ctl_dir, &ca.cert_pem, cx.store_owner)
}

/// After a CA rotation: new leaves from `ca` for every intercepted host of the proxy's
/// policy, its injected secrets kept, and the member's CA files rewritten. The proxy sees the
/// new file at its next connection and clients that read their bundle per process (curl,
/// git, Python, a new Node) trust the new CA at once: no new container. False when the
/// member intercepts nothing.
pub fn reissue(
    paths: &Paths,
    ctl_dir: &Path,
    ca: &tls::TeamCa,
    store_owner: Owner,
) -> Result<bool, ProxyError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProxyError::Io { path, source }
    };
    let Some(policy) = read_policy(&paths.policy).filter(|p| !p.intercept.is_empty()) else {
        return Ok(false);
    };
    let (mut held, member) = read_intercepts(paths).map_err(io(&paths.intercept))?;
    held.leaves.clear();
    for i in &policy.intercept {
        held.leaves.insert(i.host.clone(), ca.issue(&i.host)?);
    }
    let json = serde_json::to_vec(&held).expect("an intercept file always serializes");
    files::write_atomic_in_member_dir(&paths.intercept, &json, 0o600, member)
        .map_err(io(&paths.intercept))?;
    write_member_ca(paths, ctl_dir, &ca.cert_pem, store_owner)?;
    Ok(true)
}

/// What a proxy holds now, and whose its file is (the member's uid when it was written).
fn read_intercepts(paths: &Paths) -> std::io::Result<(InterceptFile, Owner)> {
    let dir = files::Dir::open(&paths.dir)?;
    let file = dir.open_regular(Path::new(layout::EGRESS_INTERCEPT_NAME))?;
    let st = rustix::fs::fstat(&file)?;
    let owner = Owner {
        uid: st.st_uid,
        gid: st.st_gid,
    };
    let mut bytes = Vec::new();
    file.take(IMAGE_ROOTS_MAX).read_to_end(&mut bytes)?;
    let held = serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok((held, owner))
}

/// The values of the secrets a member's proxy injects now: what a helper it asks for gets
/// for the same credentials (a helper's rules are within its requester's, so it injects
/// nothing its requester does not). Empty when there are none or the file is unreadable.
pub(crate) fn held_secrets(paths: &Paths) -> std::collections::BTreeMap<String, String> {
    read_intercepts(paths)
        .map(|(held, _)| held.secrets)
        .unwrap_or_default()
}

/// Gives a running proxy the values its secrets have in this apply's environment, when they
/// changed (a rotated API key), and its logins' current access tokens: no new container, no
/// new proxy. True when it wrote.
pub(crate) fn refresh_secrets(
    paths: &Paths,
    policy: &EgressPolicy,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    logins: (&Path, Owner),
) -> Result<bool, ProxyError> {
    let io = |source| ProxyError::Io {
        path: paths.intercept.clone(),
        source,
    };
    let names = crate::core::intercept::injected_secrets(&policy.intercept);
    if names.is_empty() || !paths.intercept.exists() {
        return Ok(false);
    }
    with_logins(logins.0, logins.1, policy, |values| {
        let (mut held, member) = read_intercepts(paths).map_err(io)?;
        let now = injected_values(policy, secret, values)?;
        if held.secrets == now {
            return Ok(false);
        }
        held.secrets = now;
        let json = serde_json::to_vec(&held).expect("an intercept file always serializes");
        files::write_atomic_in_member_dir(&paths.intercept, &json, 0o600, member).map_err(io)?;
        Ok(true)
    })
}

/// Calls `f` with the values of the logins `policy` injects (none: an empty map), under the
/// logins' lock when there are any, each refreshed first if due.
fn with_logins<T>(
    state_dir: &Path,
    owner: Owner,
    policy: &EgressPolicy,
    f: impl FnOnce(&std::collections::BTreeMap<String, String>) -> Result<T, ProxyError>,
) -> Result<T, ProxyError> {
    let kinds = crate::core::intercept::injected_logins(&policy.intercept);
    if kinds.is_empty() {
        return f(&std::collections::BTreeMap::new());
    }
    let held = crate::logins::lock(state_dir, owner)?;
    let values = held.values(&kinds, crate::logins::now_ms())?;
    let out = f(&values);
    drop(held);
    out
}

/// The values `policy` injects, by name: each secret's from `secret` (apply's environment),
/// each login's from `logins` (`crate::logins::values_of`).
fn injected_values(
    policy: &EgressPolicy,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    logins: &std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, ProxyError> {
    let mut out = std::collections::BTreeMap::new();
    for i in &policy.intercept {
        let Some(c) = &i.credentials else { continue };
        match c.login() {
            Some(login) => {
                let names = std::iter::once(login.secret_name()).chain(login.account_secret_name());
                for name in names {
                    if let Some(v) = logins.get(name) {
                        out.insert(name.to_string(), v.clone());
                    }
                }
            }
            None => {
                let name = c.secret();
                let value = secret(name).ok_or_else(|| ProxyError::MissingSecret {
                    name: name.to_string(),
                })?;
                out.insert(name.to_string(), value);
            }
        }
    }
    Ok(out)
}

/// Gives a running proxy its logins' current values (`values`, by name) where it holds
/// others: the keeper's, after a refresh. The caller holds the logins' lock. True when it
/// wrote; the proxy uses them from its next request.
pub(crate) fn put_login_values(
    paths: &Paths,
    values: &std::collections::BTreeMap<String, String>,
) -> Result<bool, ProxyError> {
    let io = |source| ProxyError::Io {
        path: paths.intercept.clone(),
        source,
    };
    let Some(policy) = read_policy(&paths.policy) else {
        return Ok(false);
    };
    let kinds = crate::core::intercept::injected_logins(&policy.intercept);
    let (mut held, member) = read_intercepts(paths).map_err(io)?;
    let mut changed = false;
    for login in kinds {
        for name in std::iter::once(login.secret_name()).chain(login.account_secret_name()) {
            if let Some(v) = values.get(name)
                && held.secrets.get(name) != Some(v)
            {
                held.secrets.insert(name.to_string(), v.clone());
                changed = true;
            }
        }
    }
    if changed {
        let json = serde_json::to_vec(&held).expect("an intercept file always serializes");
        files::write_atomic_in_member_dir(&paths.intercept, &json, 0o600, member).map_err(io)?;
    }
    Ok(changed)
}

/// The member's CA files, from its team's CA and the image's roots (`image_roots`, kept
/// beside the proxy's files when the member's container was made).
pub(crate) fn write_member_ca(
    paths: &Paths,
    ctl_dir: &Path,
    ca_pem: &str,
    owner: Owner,
) -> Result<(), ProxyError> {
    let io = |path: PathBuf| move |source| ProxyError::Io { path, source };
    let ca_path = ctl_dir.join(layout::CA_CERT_NAME);
    files::write_atomic_in_member_dir(&ca_path, ca_pem.as_bytes(), 0o644, owner)
        .map_err(io(ca_path))?;
    let roots = files::read_small(&image_roots_path(paths), IMAGE_ROOTS_MAX).unwrap_or_default();
    let bundle = format!("{roots}{ca_pem}");
    let bundle_path = ctl_dir.join(layout::CA_BUNDLE_NAME);
    files::write_atomic_in_member_dir(&bundle_path, bundle.as_bytes(), 0o644, owner)
        .map_err(io(bundle_path))
}

/// Largest set of image roots kept (Debian's bundle is about 220 KiB).
pub(crate) const IMAGE_ROOTS_MAX: u64 = 4 << 20;

/// The image's own roots, as found in the member's container when it was made.
pub(crate) fn image_roots_path(paths: &Paths) -> PathBuf {
    layout::egress_image_roots_path(&paths.dir)
}

/// Starts the member's proxy, detached, and waits until it answers. `store_owner` owns
/// ateam's folders; `member` is the user the member runs as: the proxy runs as that user,
/// and its socket belongs to it (0600), so that the member, and only it, can connect.
pub fn start(
    paths: &Paths,
    policy: &PolicyFile,
    store_owner: Owner,
    member: Owner,
) -> Result<(), ProxyError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProxyError::Io { path, source }
    };
    files::member_dir(&paths.dir, store_owner, member).map_err(io(&paths.dir))?;
    // The socket's folder is the member's control folder (as `Runtime::prepare` makes it).
    if let Some(ctl) = paths.socket.parent() {
        files::member_dir(ctl, store_owner, member).map_err(io(ctl))?;
    }
    write_policy(paths, policy, member).map_err(io(&paths.policy))?;
    stop(paths).map_err(io(&paths.pid))?;
    // The log outlives its proxies: one that ran as the member's old uid left it owned by
    // that uid (0600), and this one, as the new uid, could not append to it.
    let refused = log::refused(&paths.log);
    let (rotated, refused_rotated) = (log::rotated(&paths.log), log::rotated(&refused));
    for log in [&paths.log, &rotated, &refused, &refused_rotated] {
        files::give_file(log, member).map_err(io(log))?;
    }
    // Nothing of apply's environment (its `secretEnv` values) reaches the proxy.
    let mut args = proxy_args(paths, Some(member));
    args.push("--detach".into());
    let launch = Launch {
        program: exe,
        args,
        keep: detached::PROXY_ENV,
        stderr: None,
    };
    launch
        .start(Detach::Launcher, &paths.socket, &paths.err)
        .map_err(|e| launch_error(e, &paths.socket))?;
    members_socket(&paths.socket, member)
}

/// A failed launch in the proxy's words.
fn launch_error(e: LaunchError, socket: &Path) -> ProxyError {
    match e {
        LaunchError::Stderr { path, source } => ProxyError::Io { path, source },
        LaunchError::Program(source) => ProxyError::Spawn {
            exe: "ateam".into(),
            source,
        },
        LaunchError::Spawn { exe, source } => ProxyError::Spawn { exe, source },
        LaunchError::Launcher(status) => ProxyError::NotAnswering {
            socket: socket.to_path_buf(),
            secs: 0,
            why: Some(format!("its launcher exited with {status}")),
        },
        LaunchError::NotAnswering { why } => ProxyError::NotAnswering {
            socket: socket.to_path_buf(),
            secs: detached::START_TIMEOUT.as_secs(),
            why,
        },
    }
}

/// Whether the socket that answers is the member's (ateam as root connects to any socket;
/// the member only to its own uid's).
fn members_socket(socket: &Path, member: Owner) -> Result<(), ProxyError> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::symlink_metadata(socket)
        .map_err(|source| ProxyError::Io {
            path: socket.to_path_buf(),
            source,
        })?
        .uid();
    if owner != member.uid {
        return Err(ProxyError::NotTheMembers {
            socket: socket.to_path_buf(),
            owner,
            member: member.uid,
        });
    }
    Ok(())
}

fn proxy_args(paths: &Paths, user: Option<Owner>) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec![
        "egress-proxy".into(),
        "--socket".into(),
        paths.socket.clone().into(),
        "--policy".into(),
        paths.policy.clone().into(),
        "--log".into(),
        paths.log.clone().into(),
        "--pid-file".into(),
        paths.pid.clone().into(),
    ];
    if let Some(u) = user {
        v.push("--user".into());
        v.push(format!("{}:{}", u.uid, u.gid).into());
    }
    v
}

/// The launcher's half of `--detach`: starts the proxy as a grandchild of ateam (so nobody
/// has to wait for it), its standard error in `proxy.err`, and returns at once.
pub fn launch_detached(cfg: &proxy::Config, user: Option<&str>) -> Result<(), ProxyError> {
    let dir = cfg.pid_file.parent().unwrap_or(Path::new("/"));
    let paths = Paths {
        socket: cfg.socket.clone(),
        dir: dir.to_path_buf(),
        policy: cfg.policy.clone(),
        pid: cfg.pid_file.clone(),
        log: cfg.log.clone(),
        err: layout::egress_err_path(dir),
        intercept: layout::egress_intercept_path(dir),
    };
    let mut args = proxy_args(&paths, None);
    if let Some(u) = user {
        args.extend(["--user".into(), u.into()]);
    }
    let launch = Launch {
        program: std::env::current_exe,
        args,
        keep: detached::PROXY_ENV,
        stderr: Some(&paths.err),
    };
    launch.spawn().map_err(|e| launch_error(e, &paths.socket))?;
    Ok(())
}

/// `UID:GID` as given to `--user`.
fn parse_user(user: &str) -> Result<crate::model::UserId, ProxyError> {
    user.parse().map_err(|e: String| ProxyError::Privileges {
        user: user.into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })
}

/// Becomes `id` for good, when running as root: supplementary groups, then gid, then uid.
/// Only while the process has one thread (the ids are set per thread).
fn drop_privileges(id: crate::model::UserId) -> Result<(), ProxyError> {
    if !rustix::process::geteuid().is_root() || id.uid == 0 {
        return Ok(());
    }
    let fail = |source: rustix::io::Errno| ProxyError::Privileges {
        user: id.to_string(),
        source: source.into(),
    };
    use rustix::process::{Gid, Uid};
    rustix::thread::set_thread_groups(&[]).map_err(fail)?;
    let gid = Gid::from_raw(id.gid);
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(fail)?;
    let uid = Uid::from_raw(id.uid);
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(fail)?;
    Ok(())
}

/// Stops the member's proxy, if one runs (its pid file names a live `ateam egress-proxy` for
/// this very socket: a pid reused by another program is never signalled), and removes its
/// socket and pid file. Its log and allowlist stay.
pub fn stop(paths: &Paths) -> std::io::Result<()> {
    detached::stop(|| running_pid(paths), &paths.socket, &paths.pid)
}

/// The pid of this member's proxy, when it runs.
pub(crate) fn running_pid(paths: &Paths) -> Option<u32> {
    detached::running_pid(&paths.pid, |args| {
        args.iter().any(|a| *a == b"egress-proxy")
            && args
                .iter()
                .any(|a| *a == paths.socket.as_os_str().as_encoded_bytes())
    })
}

/// When the refusals `status` shows begin: the last apply (which touches the policy file;
/// the proxy's start or a new list rewrites it).
pub(crate) fn since_last_apply(paths: &Paths) -> f64 {
    std::fs::metadata(&paths.policy)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Marks the start of a new period of refusals for `status` at `at` (when the apply began, so
/// that what members were refused while coming up counts): what was refused before is
/// history (`logs --egress` still has it). Also makes the proxy read its list again.
pub(crate) fn mark_applied(paths: &Paths, at: std::time::SystemTime) -> std::io::Result<()> {
    match std::fs::File::options().write(true).open(&paths.policy) {
        Ok(f) => f.set_modified(at),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod learn_tests {
    use super::LearnFile;

    #[test]
    fn a_learning_run_passes_only_what_the_person_could_approve_until_its_end() {
        let l = LearnFile {
            until: 100.0,
            parent: None,
            parent_ruled: vec![],
        };
        assert!(l.learns("pypi.org", 443, 50.0));
        assert!(l.learns("files.example", 8080, 50.0));
        assert!(!l.learns("pypi.org", 443, 100.0), "over");
        for (host, port) in [
            ("127.0.0.1", 8080),
            ("169.254.169.254", 80),
            ("10.1.2.3", 443),
            ("host.ateam.internal", 11434),
            ("git.example", 22),
            ("db.example", 5432),
            ("*", 0),
            ("not a host", 443),
        ] {
            assert!(!l.learns(host, port, 50.0), "{host}:{port}");
        }
        // Never past the parent's list, nor through a tunnel to a host it has rules on.
        let under = LearnFile {
            parent: Some(vec!["*.example.com".into(), "api.example.com".into()]),
            parent_ruled: vec!["api.example.com".into()],
            ..l.clone()
        };
        assert!(under.learns("docs.example.com", 443, 50.0));
        assert!(!under.learns("pypi.org", 443, 50.0));
        assert!(!under.learns("api.example.com", 443, 50.0));
        let closed = LearnFile {
            parent: Some(vec![]),
            ..l
        };
        assert!(!closed.learns("pypi.org", 443, 50.0));
    }
}
