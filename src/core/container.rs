//! The container types every layer shares: what a member's container must be (`ContainerSpec`),
//! how ateam names and labels it, what an engine is asked to create (`CreateRequest`) and what
//! it reports back (`Effective`, `ContainerState`, `PidFiles`). Plain data, no I/O: the backends
//! translate to and from it, the policy and the planner judge it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a member's container has for a network. An allowlist's entries are not part of it:
/// they live in the egress proxy's policy file, so that a new list needs no new container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SpecNetwork {
    /// Loopback only.
    None,
    /// Loopback only, and the egress proxy's socket in the control folder.
    Proxy,
    /// The network of its own team (`team_network_name`), by name.
    Open(String),
}

impl SpecNetwork {
    /// The engine network to attach to, for `Open`.
    pub fn name(&self) -> Option<&str> {
        match self {
            SpecNetwork::Open(n) => Some(n),
            SpecNetwork::None | SpecNetwork::Proxy => None,
        }
    }
}

/// The OCI runtime a member's container runs under: the engine's runc (a hardened container
/// on the host's kernel) or gVisor's runsc (a user-space kernel between the member and the
/// host's).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRuntime {
    /// The engine's own runtime (runc here).
    #[default]
    Runc,
    /// gVisor's `runsc`.
    Gvisor,
}

impl ContainerRuntime {
    /// Left out of a spec's JSON when runc, so that members from before keep their hash.
    pub fn is_runc(&self) -> bool {
        *self == ContainerRuntime::Runc
    }

    /// Whether the runtime an engine reports (`runc`, `runsc`, `/usr/bin/runsc`,
    /// `io.containerd.runc.v2`, `""` for its default) is this one.
    pub fn reported_as(&self, engine_says: &str) -> bool {
        let name = engine_says.rsplit('/').next().unwrap_or(engine_says);
        match self {
            ContainerRuntime::Gvisor => name == GVISOR_RUNTIME,
            ContainerRuntime::Runc => name != GVISOR_RUNTIME,
        }
    }
}

impl std::fmt::Display for ContainerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ContainerRuntime::Runc => "runc",
            ContainerRuntime::Gvisor => "gvisor",
        })
    }
}

/// gVisor's runtime binary, and the name Docker's configuration gives it (`runsc install`).
pub const GVISOR_RUNTIME: &str = "runsc";

/// Under gVisor the host's pids cgroup holds the sandbox's own threads (the Sentry's and the
/// gofer's, about 50 at rest here, more under load), not the member's processes, which the
/// Sentry counts against `RLIMIT_NPROC`; a cgroup the sandbox's threads outgrow kills it. So
/// the cgroup gets this many more than the member's `pids`.
pub const GVISOR_SANDBOX_PIDS: u32 = 512;

/// Under gVisor the host's memory cgroup holds the Sentry and the gofer too (about 25 MiB at
/// rest here, and some per task): a cap of the member's `memory` alone kills the whole sandbox
/// well before the member has used it. So the cgroup gets this much more.
pub const GVISOR_SANDBOX_MEMORY: u64 = 64 << 20;

impl ContainerSpec {
    /// The memory cap the engine's cgroup gets (`GVISOR_SANDBOX_MEMORY`).
    pub fn engine_memory(&self) -> u64 {
        match self.runtime {
            ContainerRuntime::Runc => self.memory_bytes,
            ContainerRuntime::Gvisor => self.memory_bytes.saturating_add(GVISOR_SANDBOX_MEMORY),
        }
    }

    /// The pids cap the engine's cgroup gets (`GVISOR_SANDBOX_PIDS`).
    pub fn engine_pids(&self) -> u32 {
        match self.runtime {
            ContainerRuntime::Runc => self.pids,
            ContainerRuntime::Gvisor => self.pids.saturating_add(GVISOR_SANDBOX_PIDS),
        }
    }
}

/// Label keys that ateam puts on every container it makes.
pub mod labels {
    /// Always `ateam`: marks a container, network or helper as ateam's.
    pub(crate) const MANAGED_BY: &str = "ateam.dev/managed-by";
    /// The name of the store that made it, so that two stores on one engine leave each other alone.
    pub const STORE: &str = "ateam.dev/store";
    /// The member's team.
    pub const TEAM: &str = "ateam.dev/team";
    /// The member's name.
    pub const MEMBER: &str = "ateam.dev/member";
    /// `ContainerSpec::hash` of the spec it was made from: drift at a glance.
    pub(crate) const SPEC_HASH: &str = "ateam.dev/spec-hash";
    /// The whole spec as JSON, so that drift can name the field that changed.
    pub const SPEC: &str = "ateam.dev/spec";
    /// On a replacement being brought up: the id of the container it replaces.
    pub(crate) const REPLACES: &str = "ateam.dev/replaces";
}

/// The temporary name of a member's replacement, until the old container is gone. `_` never
/// appears in a team or member name (DNS-1123 labels), so this can equal no member's name.
pub(crate) fn replacement_name(name: &str) -> String {
    format!("{name}_next")
}

/// A replacement still under its temporary name: labelled as one and named as the member's
/// replacement exactly (not by a pattern). Once renamed into place it keeps the `replaces`
/// label, as labels cannot change, but it is then the member's container.
pub fn is_replacement(member_name: &str, c_name: &str, labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(labels::REPLACES) && c_name == replacement_name(member_name)
}

/// The home folder inside a member: a private tmpfs.
pub(crate) const MEMBER_HOME: &str = "/home/agent";

/// Where ateam's control folder (start gate, secrets) appears inside a member.
pub(crate) const CTL_TARGET: &str = "/.ateam";

/// A bind mount. Grants and transcripts sit at the same path inside as outside, so that paths
/// in messages and transcripts mean the same thing on both sides.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mount {
    /// Where it appears inside the container.
    pub target: PathBuf,
    /// The host folder.
    pub source: PathBuf,
    /// Mounted read-only.
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

/// What a member's container should be, from the manifests alone: what drift is measured on
/// (its `hash` is a label of the container).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// The container name (`container_name`).
    pub name: String,
    /// The image reference.
    pub image: String,
    /// Replaces the image's command; none keeps the image's own.
    pub command: Option<Vec<String>>,
    /// The working directory inside.
    pub cwd: PathBuf,
    /// Plain environment (secrets are not here: only their names, in `secret_env`).
    pub env: BTreeMap<String, String>,
    /// Names of variables whose values come from apply's environment, through the secrets file.
    pub secret_env: Vec<String>,
    /// `uid:gid` it runs as: the Member's or Team's `user`, else `Host::default_member_user`.
    pub user: String,
    /// Granted folders, the transcript folder and the control folder, sorted by target so
    /// that parents mount first.
    pub mounts: Vec<Mount>,
    /// Mount point -> options.
    pub tmpfs: BTreeMap<String, String>,
    /// Memory cap in bytes (also the memory+swap cap).
    pub memory_bytes: u64,
    /// Most processes in the container.
    pub pids: u32,
    /// CPUs in billionths (the engines' NanoCpus); none for no cap.
    pub nano_cpus: Option<u64>,
    /// Which network it gets.
    pub network: SpecNetwork,
    /// The user's labels from the manifest.
    pub labels: BTreeMap<String, String>,
    /// A terminal the engine keeps, with stdin open: an interactive agent's UI, which the
    /// person joins with `ateam attach`. Left out of the hash's JSON when false, so that
    /// members without one keep their hash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
    /// The OCI runtime it runs under; left out of the hash's JSON when runc.
    #[serde(default, skip_serializing_if = "ContainerRuntime::is_runc")]
    pub runtime: ContainerRuntime,
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

/// The engine network of a team whose members have `network: open`: one per team (and per
/// store), so that members of other teams, and whatever sits on the engine's shared default
/// bridge, are not reachable from it.
pub(crate) fn team_network_name(store: &str, team: &str) -> String {
    format!("ateam-{store}-{team}")
}

/// The container name of a member. Team and member names are DNS-1123 labels (no `_`), so
/// `_` separates them without ambiguity: team `t` member `a-b` and team `t-a` member `b` get
/// two names. Containers are still identified by labels and the store's record, never by name.
pub fn container_name(team: &str, member: &str) -> String {
    format!("ateam_{team}_{member}")
}

/// The engine's view of a container's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ContainerState {
    /// Made, never started.
    Created,
    /// Its process runs.
    Running,
    /// Frozen by someone (`docker pause`).
    Paused,
    /// The engine is restarting it.
    Restarting,
    /// Its process ended.
    Exited {
        /// Its exit code.
        code: i64,
    },
    /// The engine is removing it.
    Removing,
    /// Broken beyond starting again.
    Dead,
}

impl ContainerState {
    /// Whether member code may be running now.
    pub fn is_live(self) -> bool {
        match self {
            ContainerState::Running | ContainerState::Paused | ContainerState::Restarting => true,
            ContainerState::Created
            | ContainerState::Exited { .. }
            | ContainerState::Removing
            | ContainerState::Dead => false,
        }
    }
}
/// How a member last ended: its container exited (as the engine reports it), or ateam could
/// not start it. The store keeps the last one ateam saw per member (`store::Record`), so that
/// it outlives a restart; `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LastExit {
    /// When it ended (RFC 3339, UTC); none when the engine did not say.
    pub at: Option<String>,
    /// The exit code of its command; none when a start failed before the command ran.
    pub exit_code: Option<i64>,
    /// How it ended.
    pub reason: ExitReason,
    /// The engine's error or ateam's, in words; none for a plain exit.
    pub message: Option<String>,
}

/// Why a member ended, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ExitReason {
    /// Exit code 0.
    Completed,
    /// Any other exit code.
    Error,
    /// The kernel killed it for going over its memory cap.
    OomKilled,
    /// ateam could not start it (its checks refused the container, or the engine failed).
    StartFailed,
}

impl LastExit {
    /// An exit as an engine reports it.
    pub fn exited(
        code: i64,
        oom_killed: bool,
        at: Option<String>,
        error: Option<String>,
    ) -> LastExit {
        LastExit {
            at,
            exit_code: Some(code),
            reason: match (oom_killed, code) {
                (true, _) => ExitReason::OomKilled,
                (false, 0) => ExitReason::Completed,
                (false, _) => ExitReason::Error,
            },
            message: error.filter(|e| !e.is_empty()),
        }
    }
}

/// The files in which an engine keeps the host pids of a container's processes, rewritten at
/// every start: a start's first process can be found from them and the kernel alone, without
/// asking the engine (on Podman, an inspect right after a start waits on the container's lock
/// while the cleanup process of the exit before holds it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidFiles {
    /// The first process's pid (the OCI runtime's `--pid-file`).
    pub init: std::path::PathBuf,
    /// The pid of the monitor that is that process's parent (Podman's conmon).
    pub monitor: std::path::PathBuf,
}

/// A time as the documents and records of ateam write it: RFC 3339, UTC, whole seconds (so
/// that two of them compare as text). A time before 1970 or after 9999, which a member can
/// give its files (tmpfs and btrfs keep any), is shown as the nearest of those ends: the
/// formatter fails past them, and `to_string` would panic.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    use std::time::{Duration, UNIX_EPOCH};
    // The last second of year 9999.
    let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    humantime::format_rfc3339_seconds(t.clamp(UNIX_EPOCH, last)).to_string()
}

/// `rfc3339` of seconds since the epoch; none for the epoch or before (engines report a
/// time that never was as Go's zero time, year 1).
pub fn rfc3339_epoch(secs: i64) -> Option<String> {
    let secs = u64::try_from(secs).ok().filter(|s| *s > 0)?;
    Some(rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
    ))
}

/// Which engine: the one name for it, from where `connect` looks to the record of where a
/// team was applied (`store::EngineRecord`, written as `"docker"` or `"podman"`). What the
/// user may choose, `Auto` included, is `model::BackendChoice`; how a connected engine runs
/// is `EngineKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Docker, or an engine that speaks its API.
    Docker,
    /// Podman, through its libpod API.
    Podman,
}

impl Engine {
    /// Its name, as records and messages write it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which engine answers, and how it runs: the detail (rootless) that decides user
/// namespaces, tmpfs options and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EngineKind {
    /// Docker, or an engine that speaks its API.
    Docker,
    /// Podman, through its libpod API.
    Podman {
        /// Runs as an ordinary user, in a user namespace.
        rootless: bool,
    },
}

impl EngineKind {
    /// The engine, without how it runs.
    pub fn engine(self) -> Engine {
        match self {
            EngineKind::Docker => Engine::Docker,
            EngineKind::Podman { .. } => Engine::Podman,
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineKind::Docker => f.write_str("docker"),
            EngineKind::Podman { rootless: false } => f.write_str("podman"),
            EngineKind::Podman { rootless: true } => f.write_str("podman (rootless)"),
        }
    }
}

/// A container to create, fully decided by the policy. Backends map each field to their API
/// and add nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    /// The container name.
    pub name: String,
    /// The image reference.
    pub image: String,
    /// Replaces the image's entrypoint (the start gate).
    pub entrypoint: Vec<String>,
    /// The command (the manifest's, or the image's own), run by the gate.
    pub cmd: Vec<String>,
    /// Plain environment.
    pub env: BTreeMap<String, String>,
    /// `uid:gid`.
    pub user: String,
    /// Working directory inside.
    pub workdir: PathBuf,
    /// Bind mounts (`rbind`, private propagation).
    pub mounts: Vec<Mount>,
    /// Mount point -> options (`rw,nosuid,nodev,size=256m`).
    pub tmpfs: BTreeMap<String, String>,
    /// Memory cap in bytes.
    pub memory_bytes: u64,
    /// Always equal to `memory_bytes`: no swap beyond the cap.
    pub memory_swap_bytes: u64,
    /// Most processes.
    pub pids: u32,
    /// CPUs in billionths; none for no cap.
    pub nano_cpus: Option<u64>,
    /// No network at all (`none`), or the network `network_name` (the team's own).
    pub network_none: bool,
    /// The network to attach to, unless `network_none`.
    pub network_name: Option<String>,
    /// Labels: ateam's and the user's.
    pub labels: BTreeMap<String, String>,
    /// Drop every capability.
    pub cap_drop_all: bool,
    /// Whether setuid binaries may gain privileges: never, for a member.
    pub no_new_privileges: bool,
    /// Read-only root filesystem.
    pub read_only_rootfs: bool,
    /// Run an init as PID 1 (reaps zombies, forwards signals).
    pub init: bool,
    /// Rootless Podman: map the user's uid to itself inside, so written files are the user's.
    pub userns_keep_id: bool,
    /// A private cgroup namespace. Engines on cgroup v1 default to the host's.
    pub cgroupns_private: bool,
    /// A terminal and an open stdin (`ContainerSpec::terminal`).
    #[serde(default)]
    pub terminal: bool,
    /// Run it under gVisor (Docker: its runtime named `runsc`; Podman 4 runs what its service
    /// runs, whatever a create says).
    #[serde(default)]
    pub gvisor: bool,
    /// The most processes the member's uid may have (`RLIMIT_NPROC`): under gVisor, where the
    /// host's pids cgroup counts the sandbox's threads and the Sentry enforces this limit.
    #[serde(default)]
    pub nproc: Option<u32>,
}

/// A container's configuration as the engine reports it, reduced to what the policy covers.
/// Backends fill it from `inspect`; it is plain data so that the check is a pure function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Effective {
    /// The image as the engine names it (Podman adds `localhost/`).
    pub image: String,
    /// The entrypoint in force.
    pub entrypoint: Vec<String>,
    /// The command in force.
    pub cmd: Vec<String>,
    /// The user it runs as.
    pub user: String,
    /// Privileged mode.
    pub privileged: bool,
    /// Capabilities added.
    pub cap_add: Vec<String>,
    /// Capabilities the process keeps (after drops); "ALL" dropped means empty here.
    pub cap_drop_all: bool,
    /// Whether the engine set `no-new-privileges`, which the policy requires.
    pub no_new_privileges: bool,
    /// Every `--security-opt`: seccomp, AppArmor and SELinux settings, `systempaths`.
    pub security_opt: Vec<String>,
    /// The AppArmor profile in force, where the engine says (`""` without AppArmor).
    pub apparmor_profile: String,
    /// `None` where the engine does not report them (Podman's libpod inspect).
    pub masked_paths: Option<Vec<String>>,
    /// Paths mounted read-only (`None` where the engine does not report them).
    pub readonly_paths: Option<Vec<String>>,
    /// Kernel parameters set for it.
    pub sysctls: Vec<String>,
    /// Its cgroup parent (`""`: the engine's default).
    pub cgroup_parent: String,
    /// The OOM killer is off for it.
    pub oom_kill_disable: bool,
    /// Device cgroup rules added.
    pub device_cgroup_rules: Vec<String>,
    /// Read-only root filesystem.
    pub read_only_rootfs: bool,
    /// Runs with an init as PID 1.
    pub init: bool,
    /// `none` for no network; anything else is a network the member can use.
    pub network_mode: String,
    /// The networks it is attached to, by name (Podman says `bridge` as its mode for any).
    #[serde(default)]
    pub networks: Vec<String>,
    /// Host folders mounted in it: the policy checks them against the grant.
    pub bind_mounts: Vec<Mount>,
    /// Mount point -> options of tmpfs mounts.
    pub tmpfs: std::collections::BTreeMap<String, String>,
    /// Mounts of any other kind (volumes, the engine socket...): never allowed.
    pub other_mounts: Vec<String>,
    /// Memory cap in bytes.
    pub memory_bytes: u64,
    /// Memory+swap cap in bytes: the policy wants it equal to the memory cap.
    pub memory_swap_bytes: i64,
    /// Most processes.
    pub pids_limit: i64,
    /// CPUs in billionths.
    pub nano_cpus: u64,
    /// The engine's restart policy: must be none (`""` or `no`), as ateam restarts members itself.
    pub restart_policy: String,
    /// Host devices passed in.
    pub devices: Vec<String>,
    /// Extra groups.
    pub group_add: Vec<String>,
    /// pid, ipc, uts, userns and cgroupns modes as the engine reports them (`""`: its
    /// default, private). The policy allows private modes only: never `host`, never another
    /// container's (`container:<id>`), never a path.
    pub namespaces: std::collections::BTreeMap<String, String>,
    /// Ports published on the host: a member publishes none.
    pub published_ports: Vec<String>,
    /// The OCI runtime as the engine names it (`runc`, `runsc`, `/usr/bin/runsc`; `""`: the
    /// engine's default).
    #[serde(default)]
    pub runtime: String,
}

/// What a container's processes use now, as its cgroup counts it. `None`: not readable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time used since the container started, in nanoseconds (a counter: the rate
    /// between two reads is the CPU share).
    pub cpu_ns: Option<u64>,
    /// Memory charged to it, in bytes.
    pub memory: Option<u64>,
    /// Processes and threads in it.
    pub pids: Option<u64>,
    /// Its processes are in a cgroup that is not its own (rootless Podman on cgroup v1 leaves
    /// them in the user's): what that cgroup counts is not the container's, so nothing is.
    pub shared: bool,
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_a_member_can_give_its_files_are_shown_without_a_panic() {
        let far = UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(super::rfc3339(far), "9999-12-31T23:59:59Z");
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(super::rfc3339(before), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(super::rfc3339(t), "2023-11-14T22:13:20Z");
    }
}
