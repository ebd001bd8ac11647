//! Container engines behind one trait. `docker` talks to dockerd (and anything Docker-API
//! compatible) through bollard; `podman` talks to Podman's own libpod API through podman-api.
//!
//! Backends translate, they do not decide: the create request arrives fully formed from
//! `policy::create_request`, and an inspect result goes back as `policy::Effective` for the
//! policy to judge. The only engine-specific choices here are how to say the same thing in each
//! API (for example `userns=keep-id` on rootless Podman).

pub mod connect;
pub(crate) mod docker;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod podman;

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::core::container::EngineKind;
use crate::core::container::{ContainerState, Effective, LastExit};
pub(crate) use crate::core::container::{CreateRequest, PidFiles};

/// What `ping` learns about an engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    /// Which engine, and how it runs.
    pub kind: EngineKind,
    /// The engine's own version, e.g. `20.10.24+dfsg1` or `4.3.1`.
    pub version: String,
    /// The API version in use.
    pub api_version: String,
    /// 1 or 2.
    pub cgroup_version: u8,
    /// False where the engine accepts memory and pids limits but ignores them (rootless Podman
    /// on cgroup v1).
    pub limits_enforced: bool,
}

impl EngineInfo {
    /// Whether an inspect of a running container stays true until that container starts
    /// again, its limits aside (those are read from the cgroup at every look). Podman before
    /// 5 can change nothing else in place; Docker's `update --restart` can, and only an
    /// inspect shows it, so on Docker a kept inspect also needs its events (`observe::cache`).
    pub fn inspect_holds_while_running(&self) -> bool {
        let major = self
            .version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        matches!(self.kind, EngineKind::Podman { .. }) && major.is_some_and(|m| m < 5)
    }
}

/// An image build (`Backend::build`): a context as a tar, and what to build of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildRequest {
    /// The tag it gets.
    pub tag: String,
    /// The context, a tar.
    pub context: Vec<u8>,
    /// The Dockerfile's path in it.
    pub dockerfile: String,
    /// Build arguments.
    pub args: BTreeMap<String, String>,
    /// The stage; empty: the last.
    pub target: String,
    /// Labels on the image.
    pub labels: BTreeMap<String, String>,
}

/// Appends `s` to a builder's output, keeping its last 64 KiB: what a RUN prints is the
/// repository's, and may be endless.
pub(crate) fn keep_tail(out: &mut String, s: &str) {
    const KEEP: usize = 64 << 10;
    out.push_str(s);
    if out.len() > 2 * KEEP {
        let mut cut = out.len() - KEEP;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out.drain(..cut);
    }
}

/// The last lines of a builder's output, for an error: at most 20 lines, 4 KiB.
pub(crate) fn build_tail(out: &str) -> String {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    let start = tail.len().saturating_sub(4096);
    let start = (start..=tail.len())
        .find(|i| tail.is_char_boundary(*i))
        .unwrap_or(tail.len());
    tail[start..].to_string()
}

/// One container as a list call sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The engine's id.
    pub id: String,
    /// Without a leading `/`.
    pub name: String,
    /// ateam's labels on it: which team, member and spec it was made for.
    pub labels: BTreeMap<String, String>,
    /// Created, running, paused, restarting or exited, as the engine lists it.
    pub state: ContainerState,
    /// Seconds since the epoch.
    pub created: i64,
}

/// One container as inspect sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inspected {
    /// What a list call would say of it.
    pub summary: Summary,
    /// Its configuration, reduced to what the policy checks.
    pub effective: Effective,
    /// The host pid of the container's first process, while it runs.
    pub pid: Option<u32>,
    /// The image as the engine names it.
    pub image: String,
    /// The engine's id of the image it was made from (a digest of its content), when the
    /// engine says it: what is read once from an image is kept under it.
    #[serde(default)]
    pub image_id: String,
    /// How often the engine restarted it (ateam asks it never to).
    pub restart_count: u64,
    /// When it last started (RFC 3339), if ever.
    pub started_at: Option<String>,
    /// How it ended, while it is exited or dead (a running one's engine record of its last
    /// exit is gone or reset by the start).
    pub last_exit: Option<LastExit>,
    /// Where the engine's runtime writes the pid of each start's first process (Podman).
    #[serde(default)]
    pub pid_files: Option<PidFiles>,
}

/// One event an engine still holds: enough of it to find it again in a later replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventMark {
    /// When, in nanoseconds since the epoch.
    pub time_nano: i64,
    /// What it is about: `container`, `network`, `image`...
    pub kind: String,
    /// What happened: `create`, `start`, `update`...
    pub action: String,
    /// The id of what it is about.
    pub id: String,
}

/// Container event actions that only read a container, run a command in it, or restate what
/// the engine knew. They are dropped before anyone is woken: an `exec` or `logs` done in
/// reaction to an event would wake the watcher again, forever; and Podman says `sync` for
/// every container at each `podman rm -f` or `ps --sync` (200 members, 200 looks for
/// nothing). A death behind a `sync` still says `died`, and the pidfd saw it first.
const QUIET_ACTIONS: &[&str] = &[
    // Both engines.
    "attach",
    "export",
    "commit",
    // Docker's: its exec events are `exec_create: <command>`, `exec_start: ...`, `exec_die`.
    "detach",
    "resize",
    "top",
    "copy",
    "archive-path",
    "extract-to-dir",
    // Podman's.
    "exec",
    "exec_died",
    "sync",
];

/// Whether a container event with this action changes nothing a look would see.
pub(crate) fn quiet_event(action: &str) -> bool {
    action.starts_with("exec_") || QUIET_ACTIONS.contains(&action)
}

/// A container that changed, with its team as its labels say (the event carries them, so
/// nobody has to ask the engine again which team to look at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    /// The engine's id.
    pub id: String,
    /// The team label, if it has one.
    pub team: Option<String>,
    /// The member label, if it has one.
    pub member: Option<String>,
}

/// What an image says about how a container of it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// The engine's id of the image (a digest of its content): what a probe's findings are
    /// kept under. Empty when the engine did not say.
    pub id: String,
    /// Its entrypoint followed by its cmd.
    pub command: Vec<String>,
    /// Its environment, `NAME=value` (PATH among it, usually).
    pub env: Vec<String>,
}

/// What is at a path in a container's file system, as the engines' archive API says it
/// (`X-Docker-Container-Path-Stat`, the same on Docker and Podman).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathStat {
    /// Go's `os.FileMode`: permission bits below, the file type in the high bits.
    pub mode: u32,
    /// For a symlink, the path it resolves to in the container (Podman fills it for any
    /// path, with the path itself).
    #[serde(default)]
    pub link_target: String,
}

impl PathStat {
    const MODE_DIR: u32 = 1 << 31;
    const MODE_SYMLINK: u32 = 1 << 27;
    /// Every type bit of Go's `os.ModeType` (dir, symlink, pipe, socket, device, char
    /// device, irregular).
    const MODE_TYPE: u32 =
        Self::MODE_DIR | Self::MODE_SYMLINK | 1 << 25 | 1 << 24 | 1 << 26 | 1 << 21 | 1 << 19;

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & Self::MODE_SYMLINK != 0
    }

    /// A regular file with an execute bit: something `execve` can run.
    pub(crate) fn is_executable_file(&self) -> bool {
        self.mode & Self::MODE_TYPE == 0 && self.mode & 0o111 != 0
    }
}

/// The label of a probe container (`Backend::create_probe`): the store that made it.
pub(crate) const PROBE_LABEL: &str = "ateam.dev/probe";

/// A probe's command: nothing at that path, so that it could not run even if started.
pub(crate) const PROBE_COMMAND: &str = "/.ateam-probe-never-runs";

/// The output of a command run in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// The command's exit code.
    pub code: i64,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

/// Why an engine call failed, in terms a user can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum BackendError {
    /// Nothing answers on the socket.
    #[error("{engine} is not running: nothing answers on {socket}{hint}")]
    Unavailable {
        /// The engine, by name.
        engine: String,
        /// The socket tried.
        socket: String,
        /// The error seen, in parentheses, or nothing.
        hint: String,
    },
    /// The socket exists but this user may not use it.
    #[error("permission denied on {socket}: {hint}")]
    PermissionDenied {
        socket: String,
        /// How to get access.
        hint: String,
    },
    /// No engine found at all.
    #[error("no container engine found; tried:\n{tried}\n{hint}")]
    NoEngine {
        /// Each engine tried, where, and what it said, one a line.
        tried: String,
        /// The first permission error, else how to start an engine.
        hint: String,
    },
    /// ateam never pulls: the image must be built or loaded locally.
    #[error(
        "image `{image}` is not on {engine} and its imagePullPolicy is Never. Build or load it first (for the demo image: scripts/engines.sh, or `{engine} import`), or let ateam pull it (IfNotPresent, the default)"
    )]
    ImageMissing {
        /// The engine, by name.
        engine: String,
        image: String,
    },
    /// Pulling an image (by its imagePullPolicy) failed.
    #[error("image `{image}`: {engine} could not pull it: {message}")]
    PullFailed {
        /// The engine, by name.
        engine: String,
        image: String,
        /// The engine's answer.
        message: String,
    },
    /// A container of that name exists and ateam did not make it.
    #[error(
        "a container named `{name}` already exists and ateam did not make it; rename or remove it yourself (ateam never touches it)"
    )]
    NameConflict { name: String },
    #[error("container {id} not found")]
    /// No container has that id (any more).
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// Any other answer from the engine.
    #[error("{engine}: {op}: {message}")]
    Engine {
        /// The engine, by name.
        engine: String,
        /// What ateam asked for (`create container`...).
        op: String,
        /// The engine's answer.
        message: String,
    },
}

/// An engine call's result.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// Where `logs` writes output as it arrives. (Spelled out with `for<'b>`: async-trait would
/// otherwise tie the chunk's lifetime to the call.)
pub(crate) type LogSink<'a> = dyn for<'b> FnMut(&'b [u8]) + Send + 'a;

/// Which output `logs` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Lines from the end.
    pub tail: usize,
    /// Then everything new, until the container stops.
    pub follow: bool,
    /// Only output since this time (seconds since the epoch).
    pub since: Option<i64>,
    /// Each line prefixed with the engine's RFC 3339 time.
    pub timestamps: bool,
}

impl LogOptions {
    /// The last `tail` lines, without following.
    pub fn tail(tail: usize) -> LogOptions {
        LogOptions {
            tail,
            follow: false,
            since: None,
            timestamps: false,
        }
    }
}

/// Whether, and how, an engine runs members under gVisor (`runtime: gvisor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GvisorSupport {
    /// Each container that asks: Docker's runtime named `runsc`, configured as members need.
    PerContainer,
    /// Every container it makes: a Podman service started with `--runtime runsc` (Podman 4
    /// ignores the runtime a create names).
    Everything,
    /// Not here; why, and what to do.
    Absent(String),
}

/// runsc's flags a member under gVisor needs: no network of the sandbox's own (Docker's and
/// Podman's `none` namespace is not one runsc can start in) and the host's Unix sockets
/// mounted in (its egress and helper sockets) open to connect to.
pub const GVISOR_FLAGS: [&str; 2] = ["--network=none", "--host-uds=open"];

/// The engine operations ateam needs. Every method is one engine call (or a few for `exec`).
#[async_trait]
pub trait Backend: Send + Sync {
    /// Which engine this is, and how it runs.
    fn kind(&self) -> EngineKind;
    /// Where it is connected, for messages.
    fn endpoint(&self) -> &str;
    /// Checks the engine answers and learns what it can enforce.
    async fn ping(&self) -> Result<EngineInfo>;
    /// Whether it runs members under gVisor (asked only where one wants it: on Podman it
    /// costs an `info`).
    async fn gvisor(&self) -> Result<GvisorSupport> {
        Ok(GvisorSupport::Absent(
            "this engine cannot run containers under gVisor".into(),
        ))
    }
    /// Who answered when this connected (the engine's name for itself and its API version),
    /// where the engine says so cheaply; None where it does not. Two connects with the same
    /// identity on the same socket and boot find the same `ping` (see `connect::Memo`).
    fn identity(&self) -> Option<&str> {
        None
    }
    /// All containers (running or not) carrying every one of `labels`.
    async fn list(&self, labels: &BTreeMap<String, String>) -> Result<Vec<Summary>>;
    /// The container with exactly this name, whoever made it.
    async fn find_by_name(&self, name: &str) -> Result<Option<Summary>>;
    /// The container's summary, configuration and state.
    async fn inspect(&self, id: &str) -> Result<Inspected>;
    /// Fetches `image` from its registry (the engine's own registry settings apply).
    async fn pull(&self, image: &str) -> Result<()>;
    /// Builds `req.tag` from a context tar, with no network and no pull (every base image
    /// must be on the engine), the engine's own builder. Errs with the builder's words.
    async fn build(&self, req: &BuildRequest) -> Result<()>;
    /// The image's command and environment; `ImageMissing` if the image is not local.
    async fn image_config(&self, image: &str) -> Result<ImageConfig>;
    /// The image's entrypoint followed by its cmd; `ImageMissing` if the image is not local.
    async fn image_command(&self, image: &str) -> Result<Vec<String>> {
        Ok(self.image_config(image).await?.command)
    }
    /// Creates a container of `image` that is never started, only looked at (`stat`): no
    /// network, a command that does not exist, `labels` (`PROBE_LABEL`). The caller removes
    /// it. `ImageMissing` if the image is not local.
    async fn create_probe(&self, image: &str, labels: &BTreeMap<String, String>) -> Result<String>;
    /// What is at `path` in the file system of container `id` (created is enough), through
    /// the engine's archive API, without reading the file; None when nothing is there.
    async fn stat(&self, id: &str, path: &str) -> Result<Option<PathStat>>;
    /// The bytes of the regular file at `path` in container `id` (created is enough), through
    /// the archive API, at most `max` of them; None when nothing is there, or it is not a
    /// regular file (a link is not followed: the caller resolves it with `stat`).
    async fn read_file(&self, id: &str, path: &str, max: u64) -> Result<Option<Vec<u8>>>;
    /// Creates (never pulls, never starts); returns the id.
    async fn create(&self, req: &CreateRequest) -> Result<String>;
    /// Starts a created or stopped container.
    async fn start(&self, id: &str) -> Result<()>;
    /// Stops, killing it after `timeout_secs` of grace.
    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<()>;
    /// Removes, stopping first if needed. Removing what is already gone is not an error.
    async fn remove(&self, id: &str) -> Result<()>;
    /// Gives the container another name.
    async fn rename(&self, id: &str, name: &str) -> Result<()>;
    /// Lets a paused container go on.
    async fn unpause(&self, id: &str) -> Result<()>;
    /// Sets the size of the terminal of a container made with one (`CreateRequest::terminal`).
    async fn resize_terminal(&self, id: &str, rows: u16, cols: u16) -> Result<()>;
    /// Creates the bridge network `name` with `labels`, unless it exists.
    async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<()>;
    /// Removes the network `name`; one that is gone already is not an error.
    async fn remove_network(&self, name: &str) -> Result<()>;
    /// Runs `cmd` in the running container and waits for it.
    async fn exec(&self, id: &str, cmd: &[String]) -> Result<ExecOutput>;
    /// Output (stdout and stderr) as `opts` says, chunk by chunk into `sink`.
    async fn logs(&self, id: &str, opts: LogOptions, sink: &mut LogSink<'_>) -> Result<()>;
    /// Every event the engine still holds from `since_nano` (nanoseconds since the epoch) to
    /// now, oldest first, where it keeps a bounded record that can be replayed (Docker: its
    /// last 256, lost when it restarts); None where it cannot say so cheaply. What
    /// `observe::cache` checks its kept inspects against.
    async fn recent_events(&self, since_nano: i64) -> Result<Option<Vec<EventMark>>> {
        let _ = since_nano;
        Ok(None)
    }
    /// Containers with these labels that changed (start, die, destroy, ...), as they happen;
    /// the stream ends when the engine connection does.
    async fn events(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<futures_util::stream::BoxStream<'static, Result<ContainerEvent>>>;
}

/// The last `tail` lines of a container's output, as text.
pub async fn logs_text(backend: &dyn Backend, id: &str, tail: usize) -> Result<String> {
    let mut out = Vec::new();
    backend
        .logs(id, LogOptions::tail(tail), &mut |chunk| {
            out.extend_from_slice(chunk)
        })
        .await?;
    // Bytes first: a frame boundary can split a UTF-8 character.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The cgroup version of this host: 2 when /sys/fs/cgroup is a cgroup2 mount.
pub(crate) fn host_cgroup_version() -> u8 {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    // f_type's integer type differs between platforms.
    #[allow(clippy::unnecessary_cast)]
    match rustix::fs::statfs("/sys/fs/cgroup") {
        Ok(st) if st.f_type as i64 == CGROUP2_SUPER_MAGIC => 2,
        _ => 1,
    }
}

/// Maps an engine's status word to the state model.
pub(crate) fn state_from(status: &str, exit_code: i64) -> ContainerState {
    match status {
        // Podman's word while a stop waits for the process (up to the stop timeout): it still
        // runs. Read as "never started", a look during a `podman restart` planned a start of
        // its own, named for the wrong reason.
        "running" | "stopping" => ContainerState::Running,
        "paused" => ContainerState::Paused,
        "restarting" => ContainerState::Restarting,
        "removing" => ContainerState::Removing,
        "dead" => ContainerState::Dead,
        "exited" | "stopped" => ContainerState::Exited { code: exit_code },
        // "created", "configured", "initialized" and anything new: never started.
        _ => ContainerState::Created,
    }
}

/// `image` with `:latest` when it names no tag and no digest: an engine asked for a bare name
/// would fetch every tag.
pub(crate) fn with_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') || last.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// The first entry of an archive the engine sent for one path: its bytes if it is a regular
/// file of at most `max` bytes.
pub(crate) fn file_in_archive(tar_bytes: &[u8], max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut archive = tar::Archive::new(tar_bytes);
    let mut entry = archive.entries().ok()?.next()?.ok()?;
    if !entry.header().entry_type().is_file() || entry.size() > max {
        return None;
    }
    let mut out = Vec::with_capacity(entry.size() as usize);
    entry.read_to_end(&mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_that_change_nothing_are_quiet() {
        for quiet in [
            "exec_create: sh -c id",
            "exec_start: sh -c id",
            "exec_die",
            "exec",
            "exec_died",
            "sync",
            "attach",
            "top",
        ] {
            assert!(quiet_event(quiet), "{quiet}");
        }
        for loud in [
            "create",
            "start",
            "init",
            "die",
            "died",
            "kill",
            "stop",
            "restart",
            "oom",
            "pause",
            "unpause",
            "rename",
            "update",
            "destroy",
            "remove",
            "cleanup",
            "checkpoint",
            "restore",
            "",
        ] {
            assert!(!quiet_event(loud), "{loud}");
        }
    }

    #[test]
    fn each_engines_status_word_maps_to_its_state() {
        for (word, state) in [
            ("running", ContainerState::Running),
            ("stopping", ContainerState::Running),
            ("paused", ContainerState::Paused),
            ("exited", ContainerState::Exited { code: 3 }),
            ("stopped", ContainerState::Exited { code: 3 }),
            ("created", ContainerState::Created),
            ("configured", ContainerState::Created),
            ("initialized", ContainerState::Created),
            ("restarting", ContainerState::Restarting),
            ("removing", ContainerState::Removing),
            ("dead", ContainerState::Dead),
        ] {
            assert_eq!(state_from(word, 3), state, "{word}");
        }
    }
}
