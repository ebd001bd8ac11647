//! Bringing one member's container up safely: the side effects that `plan` only names.
//!
//! The order is the point: pin every folder to mount (open, no symlinks), write the control
//! folder (gate closed), create, check the created container against the policy, start it (the
//! gate holds the member's command), check it again from the engine and from the kernel, check
//! each mounted folder is the pinned one, and only then release the gate. A failure at any
//! step after create removes the container, so nothing that was not checked ever runs.

pub mod agents;
pub mod build;
pub mod cgroup;
pub mod gate;
pub mod image;
pub mod pin;
pub mod procfs;
#[cfg(test)]
pub(crate) mod rig;
mod roots;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::{Backend, BackendError, EngineInfo, Inspected, PidFiles};
use crate::core::container::{
    ContainerState, CreateRequest, EngineKind, LastExit, SpecNetwork, labels,
};
use crate::core::layout::{gate_dir, member_record_path, secrets_path, team_run_dir};
use crate::files::{self, Owner};
use crate::host::mounts::Mounts;
use crate::plan::spec::DesiredMember;
use crate::policy::{self, Limits, Violation};
use crate::store::Record;
use pin::{PinError, Pinned};

/// Why a member could not be brought up. The container, if one was made, is gone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Its agent's native build could not be fetched, or is not safe to mount.
    #[error("member `{member}`: its agent: {source}")]
    Agent {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: Arc<agents::AgentError>,
    },
    /// A writer's workspace could not be made or snapshotted: the start is held.
    #[error("member `{member}`: its workspace: {source}; the start is held")]
    Workspace {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: crate::workspace::WorkspaceError,
    },
    /// The CA files of a member with intercepted hosts.
    #[error("member `{member}`: its CA for intercepted hosts: {source}")]
    Ca {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: crate::servers::egress::ProxyError,
    },
    /// Its egress proxy, started while its container was made, did not come up.
    #[error("member `{member}`: {source}")]
    Egress {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: crate::servers::egress::ProxyError,
    },
    /// The engine refused or failed a call.
    #[error("member `{member}`: {source}")]
    Backend {
        /// The member.
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
        /// The member.
        member: String,
        /// The engine, in words.
        engine: String,
    },
    #[error("member `{member}`: secretEnv `{name}` is not set in the environment of ateam")]
    /// A `secretEnv` variable is not set where ateam runs.
    MissingSecret {
        /// The member.
        member: String,
        /// The variable.
        name: String,
    },
    #[error("member `{member}`: image `{image}` has no command; set spec.command")]
    /// Neither the manifest nor the image gives a command.
    NoCommand {
        /// The member.
        member: String,
        /// The image.
        image: String,
    },
    /// Its image could not be looked at (it is not on the engine, most often): the
    /// engine's answer, shared by every member of that image.
    #[error("member `{member}`: {reason}")]
    Image {
        /// The member.
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
        /// The member.
        member: String,
        /// The program looked for.
        command: String,
        /// The whole command, when the program missing is one a wrapper runs (`env`, `sh -c`).
        run_by: Option<String>,
        /// The image.
        image: String,
        /// The paths it was looked for at.
        looked: Vec<PathBuf>,
    },
    /// Rootless Podman maps only the caller's own uid into a member.
    #[error(
        "member `{member}`: rootless Podman runs members as you ({caller}), not as `{user}`; remove `user` from the Member and Team, or use rootful Podman or Docker"
    )]
    RootlessUser {
        /// The member.
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
        /// The member.
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
        /// The member.
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
        /// The member.
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
        /// The member.
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
        /// The member.
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
        /// The member.
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
        /// The member.
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

/// A member's egress proxy being started (on the blocking pool) while its container is made:
/// `Ok` once it answers on the member's socket with the member's policy.
pub type ProxyStarting = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), crate::servers::egress::ProxyError>> + Send>,
>;

/// A member ready to be created: folders pinned, control folder written, request built.
#[derive(Debug)]
pub struct Prepared {
    /// The member.
    pub member: DesiredMember,
    /// The container to create.
    pub request: CreateRequest,
    pins: Vec<(PathBuf, Pinned)>,
}

/// One engine, one store, one user.
pub struct Runtime {
    /// The engine.
    pub backend: Arc<dyn Backend>,
    /// What the engine said about itself when ateam connected.
    pub info: EngineInfo,
    /// The store id that labels every container this runtime makes.
    pub store: String,
    /// Who ateam's own files belong to (the store's owner). Each member's private files belong
    /// to the user it runs as (`member_owner`).
    pub owner: Owner,
    /// ateam's state folder (for files shared by members, such as the gate).
    pub state_dir: PathBuf,
    /// What the look that planned this run read of each container, by id: a restart takes
    /// it from here rather than ask the engine again (on Podman, an inspect right after a
    /// death waits on the container's lock while the exit's cleanup process holds it).
    pub looked: std::collections::BTreeMap<String, Looked>,
}

/// What a look's inspect said of one container, kept for what its plan does next.
#[derive(Debug, Clone, Default)]
pub struct Looked {
    /// How it last ended, while it was stopped.
    pub last_exit: Option<LastExit>,
    /// Its configuration, as inspected (the plan replaces one the policy refuses).
    pub effective: Option<policy::Effective>,
    /// `Inspected::pid_files`.
    pub pid_files: Option<PidFiles>,
}

impl From<&Inspected> for Looked {
    fn from(i: &Inspected) -> Self {
        Looked {
            last_exit: i.last_exit.clone(),
            effective: Some(i.effective.clone()),
            pid_files: i.pid_files.clone(),
        }
    }
}

impl Runtime {
    /// Refuses a member whose memory and pids limits this engine would ignore, unless its
    /// team allows it.
    pub fn check_limits(&self, m: &DesiredMember) -> Result<(), RunError> {
        self.limits(m).map(|_| ())
    }

    fn limits(&self, m: &DesiredMember) -> Result<Limits, RunError> {
        match (self.info.limits_enforced, m.allow_unenforced_limits) {
            (true, _) => Ok(Limits::Enforced),
            (false, true) => Ok(Limits::Unenforced),
            (false, false) => Err(RunError::LimitsNotEnforced {
                member: m.member.clone(),
                engine: self.info.kind.to_string(),
            }),
        }
    }

    /// The user a member runs as, who owns its transcript and control folders, so that it can
    /// read its gate, secrets and release file and write its transcript, and nothing else of
    /// ateam's.
    pub fn member_owner(&self, m: &DesiredMember) -> Result<Owner, RunError> {
        let user: crate::model::UserId =
            m.spec
                .user
                .parse()
                .map_err(|what: String| RunError::Process {
                    member: m.member.clone(),
                    id: String::new(),
                    what,
                })?;
        let owner = Owner {
            uid: user.uid,
            gid: user.gid,
        };
        if self.info.kind == (EngineKind::Podman { rootless: true }) && owner != self.owner {
            return Err(RunError::RootlessUser {
                member: m.member.clone(),
                user: m.spec.user.clone(),
                caller: format!("{}:{}", self.owner.uid, self.owner.gid),
            });
        }
        Ok(owner)
    }

    /// A writer's workspace before a start: made when it is not there yet (`make`: a first
    /// start or a replacement), then snapshotted. Any failure holds the start.
    async fn snapshot_workspace(
        &self,
        m: &DesiredMember,
        member_owner: Owner,
        make: bool,
    ) -> Result<(), RunError> {
        let fail = |source| RunError::Workspace {
            member: m.member.clone(),
            source,
        };
        if let Some(c) = &m.copies {
            let place = crate::workspace::copy::CopyPlace {
                member: m.member.clone(),
                folders: c.folders.clone(),
                store: c.store.clone(),
                max_bytes: c.max_bytes,
                member_owner,
                ateam_owner: self.owner,
            };
            tokio::task::spawn_blocking(move || {
                crate::workspace::copy::take(&place, "before start")
            })
            .await
            .map_err(|e| fail(crate::workspace::WorkspaceError::Refused(e.to_string())))?
            .map_err(fail)?;
        }
        let Some(ws) = &m.workspace else {
            return Ok(());
        };
        let place = crate::workspace::Place::new(&m.team, &m.member, ws, member_owner, self.owner);
        if make || !place.exists() {
            crate::workspace::ensure(&place).await.map_err(fail)?;
        }
        crate::workspace::snapshot(&place, "before start")
            .await
            .map_err(fail)?;
        Ok(())
    }

    /// Refuses a member that would get a writable file system below one of its read-only
    /// folders: the engines bind folders recursively, but make only the top read-only.
    pub fn check_read_only(&self, m: &DesiredMember) -> Result<(), RunError> {
        if pin::read_only_is_recursive(self.info.kind) {
            return Ok(());
        }
        let table = Mounts::read().map_err(|source| RunError::Io {
            member: m.member.clone(),
            path: "/proc/self/mountinfo".into(),
            source,
        })?;
        match pin::mount_below_read_only(&m.spec.mounts, &table) {
            None => Ok(()),
            Some((folder, mount)) => Err(RunError::WritableBelowReadOnly {
                member: m.member.clone(),
                folder: folder.source.clone(),
                mount,
                engine: self.info.kind.to_string(),
            }),
        }
    }

    /// Refuses a member whose uid could not write one of its write grants, or a folder in
    /// one (by owner, group and mode bits; `check_writable_tree`). Its transcript folder ateam makes the member's, and HOME is a tmpfs of
    /// its own (`plan::spec`): only the grants can be wrong.
    pub fn check_writable(&self, m: &DesiredMember) -> Result<(), RunError> {
        let owner = self.member_owner(m)?;
        let user = crate::model::UserId {
            uid: owner.uid,
            gid: owner.gid,
        };
        for mount in m
            .spec
            .mounts
            .iter()
            .filter(|x| !x.read_only && x.source != m.transcript_dir && x.source != m.ctl_dir)
        {
            let bounds = crate::host::access::TREE_BOUNDS;
            let judged = crate::host::access::check_writable_tree(&mount.source, user, bounds)
                .map_err(|source| RunError::NotWritable {
                    member: m.member.clone(),
                    source,
                })?;
            if !judged.complete {
                tracing::warn!(
                    member = %m.member,
                    grant = %mount.source.display(),
                    folders = judged.folders,
                    "only part of the write grant's tree was judged writable (it is larger than {} entries or {} levels); the rest was not looked at",
                    bounds.entries,
                    bounds.depth
                );
            }
        }
        Ok(())
    }

    /// Refuses a member whose transcript folder the person running ateam could not make (the
    /// nearest folder that exists is not theirs to write) or give to the member's uid (it
    /// exists with another owner, and only root may change that).
    pub fn check_transcript_dir(&self, m: &DesiredMember) -> Result<(), RunError> {
        use std::os::unix::fs::MetadataExt;
        // A user this engine refuses is said by `member_owner`'s own check.
        let Ok(owner) = self.member_owner(m) else {
            return Ok(());
        };
        let path = &m.transcript_dir;
        let refuse = |why: String, fix: String| RunError::TranscriptFolder {
            member: m.member.clone(),
            path: path.clone(),
            why,
            fix,
        };
        let me = format!("{}:{}", self.owner.uid, self.owner.gid);
        match std::fs::symlink_metadata(path) {
            Ok(md) if !md.is_dir() => Err(refuse(
                "it exists and is not a folder (a link is never followed)".into(),
                "move it away, or set the Team's sessionDir to another folder".into(),
            )),
            Ok(md) if (md.uid(), md.gid()) != (owner.uid, owner.gid) && self.owner.uid != 0 => {
                Err(refuse(
                    format!(
                        "it is owned by {}:{}, and ateam (running as {me}) may not give it to the member's {}:{}",
                        md.uid(),
                        md.gid(),
                        owner.uid,
                        owner.gid
                    ),
                    format!(
                        "remove it (its transcripts go with it) or move it away, or `sudo chown -R {}:{} {}`",
                        owner.uid,
                        owner.gid,
                        path.display()
                    ),
                ))
            }
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(up) = path
                    .ancestors()
                    .skip(1)
                    .find(|p| p.symlink_metadata().is_ok())
                else {
                    return Ok(());
                };
                let access = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
                match rustix::fs::access(up, access) {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let owned = std::fs::metadata(up)
                            .map(|md| {
                                format!(
                                    ", owned by {}:{} with mode {:04o}",
                                    md.uid(),
                                    md.gid(),
                                    md.mode() & 0o7777
                                )
                            })
                            .unwrap_or_default();
                        Err(refuse(
                            format!(
                                "ateam (running as {me}) cannot make it in {}{owned} ({e})",
                                up.display()
                            ),
                            format!(
                                "set the Team's sessionDir to a folder you own, or give {} to {me} (`sudo chown {me} {}`)",
                                up.display(),
                                up.display()
                            ),
                        ))
                    }
                }
            }
            Err(e) => Err(refuse(
                e.to_string(),
                "check the folder and its parents".into(),
            )),
        }
    }

    /// `check_writable` again, on the folders as pinned: the very ones the engine mounts.
    fn check_pinned_writable(
        &self,
        m: &DesiredMember,
        pins: &[(PathBuf, Pinned)],
    ) -> Result<(), RunError> {
        let owner = self.member_owner(m)?;
        let user = crate::model::UserId {
            uid: owner.uid,
            gid: owner.gid,
        };
        for mount in m
            .spec
            .mounts
            .iter()
            .filter(|x| !x.read_only && x.source != m.transcript_dir && x.source != m.ctl_dir)
        {
            if let Some((_, pinned)) = pins.iter().find(|(t, _)| *t == mount.target)
                && !pinned.owned.writable_by(user)
            {
                return Err(RunError::NotWritable {
                    member: m.member.clone(),
                    source: crate::host::access::NotWritable::top(
                        &mount.source,
                        pinned.owned,
                        user,
                    ),
                });
            }
        }
        Ok(())
    }

    /// Codex's `auth.json` of placeholder tokens, in its state folder (which the member
    /// owns: written without following a link), `last_refresh` now so that Codex does not
    /// refresh; the person's plan type, which Codex shows, from ateam's login when there is
    /// one.
    fn write_login_file(&self, path: &std::path::Path, owner: files::Owner) -> std::io::Result<()> {
        use crate::core::logins::{LoginKind, codex_placeholder_auth, codex_plan};
        let plan = crate::logins::peek(&self.state_dir, LoginKind::Codex)
            .ok()
            .flatten()
            .and_then(|l| codex_plan(&l));
        let now = crate::core::container::rfc3339(std::time::SystemTime::now());
        let auth = codex_placeholder_auth(&now, plan.as_deref());
        files::write_atomic_in_member_dir(path, auth.as_bytes(), 0o600, owner)
    }

    /// Everything before the engine creates anything. `secret` looks up a secret's value.
    pub async fn prepare(
        &self,
        m: &DesiredMember,
        secret: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Prepared, RunError> {
        self.limits(m)?;
        let member_owner = self.member_owner(m)?;
        self.check_read_only(m)?;
        let io = |path: &std::path::Path| {
            let (member, path) = (m.member.clone(), path.to_path_buf());
            move |source| RunError::Io {
                member,
                path,
                source,
            }
        };
        for dir in [&m.transcript_dir, &m.ctl_dir]
            .into_iter()
            .chain(m.agent_home.as_ref())
        {
            files::member_dir(dir, self.owner, member_owner).map_err(io(dir))?;
        }
        if let Some(path) = &m.login_file {
            self.write_login_file(path, member_owner)
                .map_err(io(path))?;
        }
        gate::install(&m.ctl_dir, &gate_dir(&self.state_dir), self.owner)
            .map_err(io(&m.ctl_dir))?;
        // The bridge also carries a helper request to the member's helper server.
        if m.egress.is_some() || m.spec.env.contains_key("ATEAM_HELPERS_SOCKET") {
            gate::install_bridge(&m.ctl_dir, &gate_dir(&self.state_dir), self.owner)
                .map_err(io(&m.ctl_dir))?;
        }
        gate::close(&m.ctl_dir).map_err(io(&m.ctl_dir))?;
        self.snapshot_workspace(m, member_owner, true).await?;
        let mut secrets = Vec::new();
        // A secret the proxy injects reaches the member as its placeholder only.
        let injected = m
            .egress
            .as_ref()
            .map(|e| crate::core::intercept::injected_secrets(&e.policy.intercept))
            .unwrap_or_default();
        for name in &m.spec.secret_env {
            if injected.contains(&name.as_str()) {
                let value = crate::core::intercept::placeholder(name);
                secrets.extend_from_slice(format!("{name}={value}\0").as_bytes());
                continue;
            }
            let value = secret(name).ok_or_else(|| RunError::MissingSecret {
                member: m.member.clone(),
                name: name.clone(),
            })?;
            secrets.extend_from_slice(format!("{name}={value}\0").as_bytes());
        }
        let secrets_path = secrets_path(&m.ctl_dir);
        files::write_atomic_in_member_dir(&secrets_path, &secrets, 0o600, member_owner)
            .map_err(io(&secrets_path))?;
        self.seed_agent_ui(m, &secrets, member_owner)?;

        if let Some(net) = m.spec.network.name() {
            let labels = std::collections::BTreeMap::from([
                (labels::MANAGED_BY.to_string(), "ateam".to_string()),
                (labels::STORE.to_string(), self.store.clone()),
                (labels::TEAM.to_string(), m.team.clone()),
            ]);
            self.backend
                .ensure_network(net, &labels)
                .await
                .map_err(|e| self.backend_err(m, e))?;
        }
        if let Some(b) = &m.build {
            let engine = self.info.kind.to_string();
            build::ensure(self.backend.as_ref(), &engine, &m.spec.image, b)
                .await
                .map_err(|e| RunError::Image {
                    member: m.member.clone(),
                    reason: e.to_string(),
                })?;
        }
        if let Some(c) = &m.agent_build {
            agents::ensure(c).await.map_err(|e| RunError::Agent {
                member: m.member.clone(),
                source: Arc::new(e),
            })?;
        }
        let pins = self.pin_all(m)?;
        self.check_pinned_writable(m, &pins)?;
        let cmd = match &m.spec.command {
            Some(c) => c.clone(),
            None => self
                .backend
                .image_command(&m.spec.image)
                .await
                .map_err(|e| self.backend_err(m, e))?,
        };
        if cmd.is_empty() {
            return Err(RunError::NoCommand {
                member: m.member.clone(),
                image: m.spec.image.clone(),
            });
        }
        let request = policy::create_request(
            &m.spec,
            m.container_labels(&self.store),
            cmd,
            self.info.kind,
        );
        Ok(Prepared {
            member: m.clone(),
            request,
            pins,
        })
    }

    fn pin_all(&self, m: &DesiredMember) -> Result<Vec<(PathBuf, Pinned)>, RunError> {
        m.spec
            .mounts
            .iter()
            .map(|mount| {
                pin::pin(&mount.source)
                    .map(|p| (mount.target.clone(), p))
                    .map_err(|source| RunError::Pin {
                        member: m.member.clone(),
                        source,
                    })
            })
            .collect()
    }

    /// An interactive Claude Code is told, in its own state file, what its UI would ask a
    /// person before it starts (`core::agents::claude_ui_state`), the key it holds included.
    /// The folder is the member's: opened without following a link, the file read only if it
    /// is a regular one, and replaced whole.
    fn seed_agent_ui(
        &self,
        m: &DesiredMember,
        secrets: &[u8],
        owner: Owner,
    ) -> Result<(), RunError> {
        let (Some(ui), Some(home)) = (&m.agent_ui, &m.agent_home) else {
            return Ok(());
        };
        let Some(crate::core::agents::AgentKind::Claude) =
            crate::core::agents::AgentKind::parse(ui)
        else {
            // Codex is told on its command line (`core::agents`).
            return Ok(());
        };
        let var = crate::core::agents::AgentKind::Claude.key_var();
        let key = secrets
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix(var).and_then(|v| v.strip_prefix('=')));
        let name = std::ffi::OsStr::new(".claude.json");
        let path = home.join(name);
        let fail = |source| RunError::Io {
            member: m.member.clone(),
            path: path.clone(),
            source,
        };
        let dir = files::Dir::open(home).map_err(fail)?;
        // A link, a FIFO or garbage there is the member's own doing: replaced, never followed.
        let existing = dir
            .read_regular(std::path::Path::new(name), 4 << 20)
            .unwrap_or_default();
        let state = crate::core::agents::claude_ui_state(&existing, &m.spec.cwd, key);
        dir.write_atomic(name, &state, 0o600, owner).map_err(fail)
    }

    fn backend_err(&self, m: &DesiredMember, source: BackendError) -> RunError {
        RunError::Backend {
            member: m.member.clone(),
            source,
        }
    }

    /// Creates the container (under `name` when given: a replacement's temporary name),
    /// verifies it, starts it, verifies it again and releases the gate. Returns the id.
    pub async fn launch(&self, p: Prepared, name: Option<&str>) -> Result<String, RunError> {
        self.launch_with(p, name, &mut None).await
    }

    /// `launch`, while the member's egress proxy is being started (`proxy`, taken once the
    /// container is made): the gate is released only once the proxy answers. Left in place
    /// when the create fails, for the next attempt.
    pub async fn launch_with(
        &self,
        p: Prepared,
        name: Option<&str>,
        proxy: &mut Option<ProxyStarting>,
    ) -> Result<String, RunError> {
        let mut req = p.request;
        if let Some(n) = name {
            req.name = n.to_string();
        }
        let m = &p.member;
        let began = std::time::Instant::now();
        let ms = move || began.elapsed().as_secs_f64() * 1000.0;
        let id = self
            .backend
            .create(&req)
            .await
            .map_err(|e| self.backend_err(m, e))?;
        tracing::debug!(at_ms = ms(), "created");
        // Recorded before it ever starts: only what is in the record is ever adopted.
        if let Err(source) = Record::update(&m.record, &id, true, self.owner) {
            let cause = RunError::Io {
                member: m.member.clone(),
                path: m.record.clone(),
                source,
            };
            return Err(self.rollback(m, cause, &id).await);
        }
        let command = req.cmd.first().map(String::as_str);
        let proxy = proxy.take();
        // The CA files are written, and the proxy comes up, while the engine starts the
        // container: the gate holds its command until the release, which waits for all three.
        let checked = async {
            let limits = self.limits(m)?;
            // First (an inspect, a few ms): its image's id says where the roots are kept.
            let created = self.check_policy(m, &id, limits, "after create").await?;
            tracing::debug!(at_ms = ms(), "inspected after create");
            let looked = Looked::from(&created);
            let (ca, pid, up) = tokio::join!(
                self.give_ca(m, &id, &created.image_id),
                self.start_found(m, &id, Some(&looked), true),
                async {
                    match proxy {
                        Some(starting) => starting.await,
                        None => Ok(()),
                    }
                }
            );
            tracing::debug!(at_ms = ms(), "started, CA files written, proxy up");
            let pid = pid?;
            ca?;
            up.map_err(|source| RunError::Egress {
                member: m.member.clone(),
                source,
            })?;
            self.release_checked(m, &id, pid, &p.pins, command).await
        };
        match checked.await {
            Ok(()) => {
                tracing::debug!(at_ms = ms(), "released");
                Ok(id)
            }
            Err(cause) => Err(self.rollback(m, cause, &id).await),
        }
    }

    /// For a member with intercepted hosts: its image's roots (`image_id`'s, kept since an
    /// earlier start, else read from the container just made), kept beside its proxy's
    /// files, and its CA files (`ca.pem`, `ca-bundle.pem`) written anew from them and the
    /// team's CA.
    async fn give_ca(&self, m: &DesiredMember, id: &str, image_id: &str) -> Result<(), RunError> {
        if m.egress
            .as_ref()
            .is_none_or(|e| e.policy.intercept.is_empty())
        {
            return Ok(());
        }
        let kept = roots::Kept::new(&self.state_dir, image_id, self.owner);
        let roots = match kept.get() {
            Some(roots) => roots,
            None => {
                let read = roots::image_roots(self.backend.as_ref(), id)
                    .await
                    .map_err(|e| self.backend_err(m, e))?;
                if roots::from_image_alone(&m.spec.mounts, &m.spec.tmpfs, &read.paths) {
                    kept.put(&read.pem);
                }
                read.pem
            }
        };
        let paths = crate::servers::egress::Paths::new(&self.state_dir, &m.team, &m.member);
        let member_owner = self.member_owner(m)?;
        let fail = |source| RunError::Ca {
            member: m.member.clone(),
            source,
        };
        let path = crate::servers::egress::image_roots_path(&paths);
        files::member_dir(&paths.dir, self.owner, member_owner)
            .and_then(|()| {
                files::write_atomic_in_member_dir(&path, roots.as_bytes(), 0o644, self.owner)
            })
            .map_err(|source| RunError::Io {
                member: m.member.clone(),
                path: path.clone(),
                source,
            })?;
        let ca = crate::servers::egress::tls::TeamCa::load_or_create(
            &self.state_dir,
            &m.team,
            self.owner,
        )
        .map_err(|e| fail(e.into()))?;
        crate::servers::egress::write_member_ca(&paths, &m.ctl_dir, &ca.cert_pem, self.owner)
            .map_err(fail)
    }

    /// Starts an existing container of `m` again (restart policy), with the same checks after
    /// the start as a new one: the engine mounts folders anew at every start. Not checked
    /// again before the start: the look that planned it judged that container's inspect
    /// against the policy milliseconds ago (a violation is planned as a replacement, not a
    /// start), and what the start makes is judged before its gate opens. Every millisecond
    /// here is one in which Podman's cleanup process may take the container's lock first.
    pub async fn restart(&self, m: &DesiredMember, id: &str) -> Result<(), RunError> {
        let pins = self.before_restart(m, id).await?;
        self.restart_pinned(m, id, &pins).await
    }

    /// What `restart` does before the engine's start, none of it asking the engine (unless
    /// a folder cannot be pinned: then the container is removed): the member's folders pinned.
    pub async fn before_restart(
        &self,
        m: &DesiredMember,
        id: &str,
    ) -> Result<Vec<(PathBuf, Pinned)>, RunError> {
        self.limits(m)?;
        gate::close(&m.ctl_dir).map_err(|source| RunError::Io {
            member: m.member.clone(),
            path: m.ctl_dir.clone(),
            source,
        })?;
        let member_owner = self.member_owner(m)?;
        self.snapshot_workspace(m, member_owner, false).await?;
        // A folder that cannot be pinned now (swapped for a symlink, say) was mounted as
        // whatever it is now: that start must never be released.
        match self.pin_all(m) {
            Ok(p) => Ok(p),
            Err(cause) => Err(self.rollback(m, cause, id).await),
        }
    }

    /// `restart`'s start and checks, with the folders `before_restart` pinned.
    pub async fn restart_pinned(
        &self,
        m: &DesiredMember,
        id: &str,
        pins: &[(PathBuf, Pinned)],
    ) -> Result<(), RunError> {
        // The read-only check reads the host's whole mount table (130 KB with 200 containers):
        // it runs while the engine starts, and the gate opens only once it has passed. The
        // command was found when the container was created; the image cannot change.
        let checked = async {
            let (pid, read_only) =
                tokio::join!(self.start_found(m, id, self.looked.get(id), false), async {
                    self.check_read_only(m)
                });
            read_only?;
            self.release_checked(m, id, pid?, pins, None).await
        };
        match checked.await {
            Ok(()) => Ok(()),
            Err(cause) => Err(self.rollback(m, cause, id).await),
        }
    }

    async fn rollback(&self, m: &DesiredMember, cause: RunError, id: &str) -> RunError {
        match self.backend.remove(id).await {
            Ok(()) => {
                // Gone: an id left in the record would only ever name nothing.
                let _ = Record::update(&m.record, id, false, self.owner);
                cause
            }
            Err(rollback) => RunError::Rollback {
                cause: Box::new(cause),
                id: id.to_string(),
                rollback,
            },
        }
    }

    fn record_path(&self, team: &str, member: &str) -> PathBuf {
        member_record_path(&team_run_dir(&self.state_dir, team), member)
    }

    /// Removes a container ateam made for `team`/`member`, then forgets its id.
    pub async fn remove(&self, team: &str, member: &str, id: &str) -> Result<(), RunError> {
        self.backend
            .remove(id)
            .await
            .map_err(|source| RunError::Backend {
                member: member.to_string(),
                source,
            })?;
        let path = self.record_path(team, member);
        Record::update(&path, id, false, self.owner).map_err(|source| RunError::Io {
            member: member.to_string(),
            path,
            source,
        })
    }

    /// Starts the container and finds the host pid of the start's first process, its
    /// configuration judged (`started_init`, or an inspect).
    ///
    /// `fresh`: `before` is the inspect ateam made of the container it just created, before
    /// this first start: nothing but the engine's own start came between (a look's kept
    /// inspect, for a restart, is trusted only where it holds while running).
    async fn start_found(
        &self,
        m: &DesiredMember,
        id: &str,
        before: Option<&Looked>,
        fresh: bool,
    ) -> Result<u32, RunError> {
        let limits = self.limits(m)?;
        let began = std::time::Instant::now();
        self.backend
            .start(id)
            .await
            .map_err(|e| self.backend_err(m, e))?;
        tracing::debug!(
            elapsed_ms = began.elapsed().as_secs_f64() * 1000.0,
            "the engine's start"
        );
        let pid = match self.started_init(m, id, before, limits, fresh)? {
            Some(pid) => {
                tracing::debug!(pid, "its first process found from the kernel");
                Some(pid)
            }
            None => self.check_policy(m, id, limits, "after start").await?.pid,
        };
        match pid {
            Some(pid) => Ok(pid),
            None => Err(self.stopped_early(m, id).await),
        }
    }

    /// Checks from the kernel what the start made of the container's first process `pid`,
    /// then releases its gate for that start.
    async fn release_checked(
        &self,
        m: &DesiredMember,
        id: &str,
        pid: u32,
        pins: &[(PathBuf, Pinned)],
        command: Option<&str>,
    ) -> Result<(), RunError> {
        let process = |what: String| RunError::Process {
            member: m.member.clone(),
            id: id.to_string(),
            what,
        };
        // Taken before any check: the checks below are of this start, and the release will be
        // good for this start only. A restart in between makes a new init the token misses.
        let start = match procfs::start_token(pid) {
            Ok(s) => s,
            Err(e) => {
                let err = process(format!("cannot read /proc/{pid}/stat: {e}"));
                return Err(self.unless_stopped(m, id, err).await);
            }
        };
        // The process can end while it is being looked at (a command that cannot run ends at
        // once); then that, not the failed look, is the reason to report.
        let st = match procfs::status(pid) {
            Ok(st) => st,
            Err(e) => {
                return Err(self
                    .unless_stopped(
                        m,
                        id,
                        process(format!("cannot read /proc/{pid}/status: {e}")),
                    )
                    .await);
            }
        };
        let user = format!("{}:{}", st.uid, st.gid);
        if st.cap_bnd != 0 || st.cap_eff != 0 || !st.no_new_privs || user != m.spec.user {
            return Err(process(format!(
                "its process has capabilities {:x}/{:x}, no-new-privileges {}, user {user} (expected none, on, {})",
                st.cap_eff, st.cap_bnd, st.no_new_privs, m.spec.user
            )));
        }
        let alone = match &m.spec.network {
            SpecNetwork::None | SpecNetwork::Proxy => true,
            SpecNetwork::Open(_) => false,
        };
        if alone && let Some(why) = procfs::loopback_only(pid) {
            let err = process(format!("its network is not loopback alone: {why}"));
            return Err(self.unless_stopped(m, id, err).await);
        }
        for (target, pinned) in pins {
            match pin::check(pid, target, pinned) {
                Ok(()) => {}
                Err(source @ PinError::Inspect { .. }) => {
                    let err = RunError::Pin {
                        member: m.member.clone(),
                        source,
                    };
                    return Err(self.unless_stopped(m, id, err).await);
                }
                Err(source) => {
                    return Err(RunError::Pin {
                        member: m.member.clone(),
                        source,
                    });
                }
            }
        }
        // A command that cannot run would end the member the moment the gate opens, after apply
        // has said all is well: look for it from outside first.
        if let Some(cmd) = command
            && !procfs::runnable_in(pid, cmd, &m.spec.cwd)
        {
            let err = process(format!(
                "its command `{cmd}` is not found or not executable in the image"
            ));
            return Err(self.unless_stopped(m, id, err).await);
        }
        let owner = self.member_owner(m)?;
        gate::release(&m.ctl_dir, id, &start, owner).map_err(|source| RunError::Io {
            member: m.member.clone(),
            path: m.ctl_dir.clone(),
            source,
        })
    }

    /// The container stopped before its gate was released: say so, with its exit code and its
    /// last output (which an engine may write out a moment after the exit).
    async fn stopped_early(&self, m: &DesiredMember, id: &str) -> RunError {
        let code = match self.backend.inspect(id).await.map(|i| i.summary.state) {
            Ok(ContainerState::Exited { code }) => format!(
                " with exit code {code}{}",
                if code == 127 {
                    " (command not found)"
                } else {
                    ""
                }
            ),
            _ => String::new(),
        };
        let mut logs = String::new();
        for _ in 0..5 {
            logs = crate::backend::logs_text(self.backend.as_ref(), id, 20)
                .await
                .unwrap_or_default();
            if !logs.trim().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let what = format!(
            "it stopped{code} before it was released; last output:\n{}",
            logs.lines()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        RunError::Process {
            member: m.member.clone(),
            id: id.to_string(),
            what,
        }
    }

    /// `err`, unless the container has stopped meanwhile, which is then the better reason.
    /// The engine may still say "running" a moment after the process is gone: while its
    /// `/proc` entry is missing, ask again for up to a second.
    async fn unless_stopped(&self, m: &DesiredMember, id: &str, err: RunError) -> RunError {
        for _ in 0..20 {
            match self.backend.inspect(id).await {
                Ok(i) => match i.pid {
                    None => return self.stopped_early(m, id).await,
                    Some(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                        return err;
                    }
                    Some(_) => {}
                },
                Err(_) => return err,
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        err
    }

    /// The first process of the start just made, found without asking the engine where its
    /// pid files allow (`procfs::init_from_files`) or, on Docker, its cgroup
    /// (`procfs::docker_init`), with the configuration inspected just before the start
    /// (`before`) judged again beside the limits the kernel now enforces on that process.
    /// That judgment is of this start where `before` is the inspect of the container just
    /// created (`fresh`: only the engine's start came between), or where the engine can
    /// change nothing but the limits in place (`EngineInfo::inspect_holds_while_running`,
    /// Podman before 5); what the start made is checked from the kernel next, as after an
    /// inspect. None where it cannot be found that way: the caller inspects.
    fn started_init(
        &self,
        m: &DesiredMember,
        id: &str,
        before: Option<&Looked>,
        limits: Limits,
        fresh: bool,
    ) -> Result<Option<u32>, RunError> {
        if !fresh && !self.info.inspect_holds_while_running() {
            return Ok(None);
        }
        let Some(before) = before else {
            return Ok(None);
        };
        let Some(effective) = &before.effective else {
            return Ok(None);
        };
        let pid = match (&before.pid_files, &self.info.kind) {
            (Some(files), _) => procfs::init_from_files(files, id),
            (None, EngineKind::Docker) => procfs::docker_init(id),
            (None, EngineKind::Podman { .. }) => None,
        };
        let Some(pid) = pid else {
            return Ok(None);
        };
        let mut effective = effective.clone();
        cgroup::overlay(&mut effective, Some(pid));
        let violations = policy::verify(&m.spec, &effective, limits);
        if violations.is_empty() {
            Ok(Some(pid))
        } else {
            Err(RunError::PolicyViolation {
                member: m.member.clone(),
                id: id.to_string(),
                stage: "after start",
                violations,
            })
        }
    }

    async fn check_policy(
        &self,
        m: &DesiredMember,
        id: &str,
        limits: Limits,
        stage: &'static str,
    ) -> Result<Inspected, RunError> {
        let mut inspected = self
            .backend
            .inspect(id)
            .await
            .map_err(|e| self.backend_err(m, e))?;
        cgroup::overlay(&mut inspected.effective, inspected.pid);
        let violations = policy::verify(&m.spec, &inspected.effective, limits);
        if violations.is_empty() {
            Ok(inspected)
        } else {
            Err(RunError::PolicyViolation {
                member: m.member.clone(),
                id: id.to_string(),
                stage,
                violations,
            })
        }
    }
}
