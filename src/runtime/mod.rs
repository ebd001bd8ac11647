//! Bringing one member's container up safely: the side effects that `plan` only names.
//!
//! The order is the point: pin every folder to mount (open, no symlinks), write the control
//! folder (gate closed), create, check the created container against the policy, start it (the
//! gate holds the member's command), check it again from the engine and from the kernel, check
//! each mounted folder is the pinned one, and only then release the gate. A failure at any
//! step after create removes the container, so nothing that was not checked ever runs.

pub mod agents;
pub(crate) mod build;
pub(crate) mod cgroup;
mod checks;
mod errors;
pub mod gate;
pub(crate) mod image;
pub mod pin;
pub mod procfs;
mod release;
#[cfg(test)]
pub(crate) mod rig;
mod roots;
mod sandbox;
/// The member's secrets file: `NAME=value\0` for each secret it names; a secret its proxy
/// injects reaches the member as its placeholder only. `secret` looks up a value.
fn secrets_of(
    m: &DesiredMember,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Vec<u8>, RunError> {
    let mut secrets = Vec::new();
    let injected = m
        .egress
        .as_ref()
        .map(|e| crate::core::intercept::injected_secrets(&e.policy.intercept))
        .unwrap_or_default();
    for name in &m.spec.secret_env {
        let value = if injected.contains(&name.as_str()) {
            crate::core::intercept::placeholder(name)
        } else {
            secret(name).ok_or_else(|| RunError::MissingSecret {
                member: m.member.clone(),
                name: name.clone(),
            })?
        };
        secrets.extend_from_slice(format!("{name}={value}\0").as_bytes());
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::{Backend, BackendError, EngineInfo, Inspected, PidFiles};
use crate::core::container::{CreateRequest, LastExit, labels};
use crate::core::layout::{gate_dir, member_record_path, secrets_path, team_run_dir};
use crate::files::{self, Owner};
use crate::plan::spec::DesiredMember;
use crate::policy;
use crate::store::Record;
pub use errors::RunError;
use pin::Pinned;

/// A member's egress proxy being started (on the blocking pool) while its container is made:
/// `Ok` once it answers on the member's socket with the member's policy.
pub(crate) type ProxyStarting = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), crate::servers::egress::ProxyError>> + Send>,
>;

/// A member ready to be created: folders pinned, control folder written, request built.
#[derive(Debug)]
pub struct Prepared {
    /// The member as desired: what the create request was built from.
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
                bound: "snapshotWrites",
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
        let secrets = secrets_of(m, secret)?;
        let secrets_path = secrets_path(&m.ctl_dir);
        files::write_atomic_in_member_dir(&secrets_path, &secrets, 0o600, member_owner)
            .map_err(io(&secrets_path))?;
        self.seed_agent_ui(m, &secrets, member_owner)?;

        self.ensure_beside(m).await?;
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

    /// What the member's container needs the engine and the host to have first: its team's
    /// network, its image when a repository defines it, its agent's build.
    async fn ensure_beside(&self, m: &DesiredMember) -> Result<(), RunError> {
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
        Ok(())
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
    pub(crate) async fn launch_with(
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
    pub(crate) async fn before_restart(
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
    pub(crate) async fn restart_pinned(
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
}
