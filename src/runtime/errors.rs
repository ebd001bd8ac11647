//! Why a member could not be brought up.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::BackendError;
use crate::policy::Violation;

use super::agents;
use super::pin::PinError;

/// Why a member could not be brought up. The container, if one was made, is gone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum RunError {
    /// Its agent's native build could not be fetched, or is not safe to mount.
    #[error("member `{member}`: its agent: {source}")]
    Agent {
        member: String,
        /// What failed.
        #[source]
        source: Arc<agents::AgentError>,
    },
    /// A writer's workspace could not be made or snapshotted: the start is held.
    #[error("member `{member}`: its workspace: {source}; the start is held")]
    Workspace {
        member: String,
        /// What failed.
        #[source]
        source: crate::workspace::WorkspaceError,
    },
    /// The CA files of a member with intercepted hosts.
    #[error("member `{member}`: its CA for intercepted hosts: {source}")]
    Ca {
        member: String,
        /// What failed.
        #[source]
        source: crate::servers::egress::ProxyError,
    },
    /// Its egress proxy, started while its container was made, did not come up.
    #[error("member `{member}`: {source}")]
    Egress {
        member: String,
        /// What failed.
        #[source]
        source: crate::servers::egress::ProxyError,
    },
    /// The engine refused or failed a call.
    #[error("member `{member}`: {source}")]
    Backend {
        member: String,
        /// The engine's error.
        #[source]
        source: BackendError,
    },
    /// The engine would accept memory and pids limits and ignore them.
    #[error(
        "member `{member}`: {engine} does not enforce memory and pids limits here (rootless Podman on cgroup v1), so it was not started; set `allowUnenforcedLimits: true` in the Team spec to run it anyway, or use rootful Podman, Docker or cgroup v2"
    )]
    LimitsNotEnforced {
        member: String,
        /// The engine, in words.
        engine: String,
    },
    #[error("member `{member}`: runtime `{runtime}` cannot run on {engine}: {why}")]
    /// The engine cannot run the member's runtime (`runtime: gvisor`).
    RuntimeUnavailable {
        member: String,
        /// The runtime the manifest names.
        runtime: String,
        /// The engine, in words.
        engine: String,
        /// Why not, and what to do.
        why: String,
    },
    #[error("member `{member}`: secretEnv `{name}` is not set in the environment of ateam")]
    /// A `secretEnv` variable is not set where ateam runs.
    MissingSecret {
        member: String,
        /// The variable.
        name: String,
    },
    #[error("member `{member}`: image `{image}` has no command; set spec.command")]
    /// Neither the manifest nor the image gives a command.
    NoCommand { member: String, image: String },
    /// Its image could not be looked at (it is not on the engine, most often): the
    /// engine's answer, shared by every member of that image.
    #[error("member `{member}`: {reason}")]
    Image {
        member: String,
        /// The engine's answer.
        reason: String,
    },
    /// Its command is not an executable file where the container would look for it.
    #[error(
        "member `{member}`: its command `{command}`{} is not an executable file in image `{image}` (looked for {}); fix spec.command or the image",
        .run_by.as_ref().map(|c| format!(" (which `{c}` runs)")).unwrap_or_default(),
        .looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    CommandNotFound {
        member: String,
        /// The program looked for.
        command: String,
        /// The whole command, when the program missing is one a wrapper runs (`env`, `sh -c`).
        run_by: Option<String>,
        image: String,
        /// The paths it was looked for at.
        looked: Vec<PathBuf>,
    },
    /// Rootless Podman maps only the caller's own uid into a member.
    #[error(
        "member `{member}`: rootless Podman runs members as you ({caller}), not as `{user}`; remove `user` from the Member and Team, or use rootful Podman or Docker"
    )]
    RootlessUser {
        member: String,
        /// The `user` the manifests ask for.
        user: String,
        /// The uid:gid of the user running ateam.
        caller: String,
    },
    /// A file could not be read or written: the member's control folder or record, the host's
    /// mount table.
    #[error("member `{member}`: {}: {source}", .path.display())]
    Io {
        member: String,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A folder could not be pinned, or the container got another folder than the pinned one.
    #[error(
        "member `{member}`: {source}; the container was removed before the member's command ran"
    )]
    Pin {
        member: String,
        /// What failed.
        #[source]
        source: PinError,
    },
    /// The engine's report of the container breaks the policy: someone or something changed it.
    #[error(
        "member `{member}`: container {id} differs from the policy ({stage}), so it was removed:\n{}",
        .violations.iter().map(|v| format!("  - {v}")).collect::<Vec<_>>().join("\n")
    )]
    PolicyViolation {
        member: String,
        /// The container's id.
        id: String,
        /// When it was checked: `after create` or `after start`.
        stage: &'static str,
        /// What breaks the policy.
        violations: Vec<Violation>,
    },
    /// What the kernel says about the container's process is not what the policy asked for.
    #[error("member `{member}`: container {} was removed: {what}", &.id[..12.min(.id.len())])]
    Process {
        member: String,
        /// The container's id.
        id: String,
        /// What differs, in words.
        what: String,
    },
    /// A file system is mounted below a read-only folder of the member, and the engine would
    /// leave it writable inside.
    #[error(
        "member `{member}`: {} is a file system mounted below the read-only folder {}, and {engine} does not make read-only mounts recursive, so the member could write in it; it was not created. Unmount it, or grant the folders beside it instead",
        .mount.display(), .folder.display()
    )]
    WritableBelowReadOnly {
        member: String,
        /// The read-only folder.
        folder: PathBuf,
        /// The file system mounted below it.
        mount: PathBuf,
        /// The engine, by name.
        engine: String,
    },
    /// Its transcript folder cannot be made or given to it by the person running ateam: found
    /// before any change, not half way through an apply.
    #[error("member `{member}`: its transcript folder {}: {why}; fix: {fix}", .path.display())]
    TranscriptFolder {
        member: String,
        /// The folder.
        path: PathBuf,
        /// What stands in the way.
        why: String,
        /// What the person can do.
        fix: String,
    },
    /// A folder it would get read-write that its uid cannot write: the agent would fail on
    /// its first write while status said all is well.
    #[error("member `{member}`: its write grant {source}")]
    NotWritable {
        member: String,
        /// The folder and why.
        #[source]
        source: crate::host::access::NotWritable,
    },
    /// Bringing a member up failed, and removing its container after failed too.
    #[error("{cause}\n(removing the failed container {id} then failed too: {rollback})")]
    Rollback {
        /// Why the member could not be brought up.
        cause: Box<RunError>,
        /// The container left behind.
        id: String,
        /// Why it could not be removed.
        rollback: BackendError,
    },
}
