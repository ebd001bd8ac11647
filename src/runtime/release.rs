//! A made container's start and release: started with its gate closed, checked from the
//! engine and from the kernel (its first process, its mounts), and only then let run; or
//! stopped early and said why.

use std::path::PathBuf;

use super::pin::{self, PinError, Pinned};
use super::{Looked, RunError, Runtime, cgroup, gate, procfs, sandbox};
use crate::backend::Inspected;
use crate::core::container::{ContainerRuntime, ContainerState, EngineKind, SpecNetwork};
use crate::plan::spec::DesiredMember;
use crate::policy::{self, GATE_ENTRYPOINT, Limits};

/// A refusal of what the start made of the member's processes.
fn process(m: &DesiredMember, id: &str, what: String) -> RunError {
    RunError::Process {
        member: m.member.clone(),
        id: id.to_string(),
        what,
    }
}

fn not_runnable(m: &DesiredMember, id: &str, cmd: &str) -> RunError {
    process(
        m,
        id,
        format!("its command `{cmd}` is not found or not executable in the image"),
    )
}

/// No capabilities, no new privileges, and the manifest's user: of the first process, as
/// the kernel that enforces them has them.
fn judge_credentials(
    m: &DesiredMember,
    id: &str,
    st: &procfs::ProcStatus,
    no_new_privs: bool,
) -> Result<(), RunError> {
    let user = format!("{}:{}", st.uid, st.gid);
    if st.cap_bnd != 0 || st.cap_eff != 0 || !no_new_privs || user != m.spec.user {
        return Err(process(
            m,
            id,
            format!(
                "its process has capabilities {:x}/{:x}, no-new-privileges {no_new_privs}, user {user} (expected none, on, {})",
                st.cap_eff, st.cap_bnd, m.spec.user
            ),
        ));
    }
    Ok(())
}

impl Runtime {
    /// Starts the container and finds the host pid of the start's first process, its
    /// configuration judged (`started_init`, or an inspect).
    ///
    /// `fresh`: `before` is the inspect ateam made of the container it just created, before
    /// this first start: nothing but the engine's own start came between (a look's kept
    /// inspect, for a restart, is trusted only where it holds while running).
    pub(super) async fn start_found(
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
    /// then releases its gate for that start. Under gVisor `pid` is the sandbox's, and the
    /// same checks take the sandbox's three views (`sandbox`).
    pub(super) async fn release_checked(
        &self,
        m: &DesiredMember,
        id: &str,
        pid: u32,
        pins: &[(PathBuf, Pinned)],
        command: Option<&str>,
    ) -> Result<(), RunError> {
        // Taken before any check: the checks below are of this start, and the release will be
        // good for this start only. A restart in between makes a new init the token misses.
        // `files`: the process whose root is the member's file tree.
        let (start, host, files) = match m.spec.runtime {
            ContainerRuntime::Runc => (self.runc_checked(m, id, pid).await?, None, pid),
            ContainerRuntime::Gvisor => {
                let host = match procfs::start_token(pid) {
                    Ok(t) => t,
                    Err(e) => {
                        let err = process(m, id, format!("cannot read /proc/{pid}/stat: {e}"));
                        return Err(self.unless_stopped(m, id, err).await);
                    }
                };
                let (start, gofer) = self.gvisor_checked(m, id, pid, command).await?;
                (start, Some(host), gofer)
            }
        };
        let alone = match &m.spec.network {
            SpecNetwork::None | SpecNetwork::Proxy => true,
            SpecNetwork::Open(_) => false,
        };
        if alone && let Some(why) = procfs::loopback_only(pid) {
            let err = process(m, id, format!("its network is not loopback alone: {why}"));
            return Err(self.unless_stopped(m, id, err).await);
        }
        for (target, pinned) in pins {
            match pin::check(files, target, pinned) {
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
        // has said all is well: look for it from outside first (under gVisor the probe did).
        if m.spec.runtime == ContainerRuntime::Runc
            && let Some(cmd) = command
            && !procfs::runnable_in(pid, cmd, &m.spec.cwd)
        {
            let err = not_runnable(m, id, cmd);
            return Err(self.unless_stopped(m, id, err).await);
        }
        self.restore_home(m, id).await;
        let owner = self.member_owner(m)?;
        gate::release(&m.ctl_dir, id, &start, host.as_deref(), owner).map_err(|source| {
            RunError::Io {
                member: m.member.clone(),
                path: m.ctl_dir.clone(),
                source,
            }
        })
    }

    /// This start's token, and the first process's credentials judged, from the host's
    /// `/proc/<pid>`.
    async fn runc_checked(
        &self,
        m: &DesiredMember,
        id: &str,
        pid: u32,
    ) -> Result<String, RunError> {
        let start = match procfs::start_token(pid) {
            Ok(s) => s,
            Err(e) => {
                let err = process(m, id, format!("cannot read /proc/{pid}/stat: {e}"));
                return Err(self.unless_stopped(m, id, err).await);
            }
        };
        // The process can end while it is being looked at (a command that cannot run ends at
        // once); then that, not the failed look, is the reason to report.
        let st = match procfs::status(pid) {
            Ok(st) => st,
            Err(e) => {
                let err = process(m, id, format!("cannot read /proc/{pid}/status: {e}"));
                return Err(self.unless_stopped(m, id, err).await);
            }
        };
        judge_credentials(m, id, &st, st.no_new_privs)?;
        Ok(start)
    }

    /// Under gVisor: this start's token and the first process's credentials as the Sentry has
    /// them (`gate --probe`, run while the gate holds), and the gofer whose root is the
    /// member's file tree (`sandbox`).
    async fn gvisor_checked(
        &self,
        m: &DesiredMember,
        id: &str,
        pid: u32,
        command: Option<&str>,
    ) -> Result<(String, u32), RunError> {
        let mut probe_cmd = vec![GATE_ENTRYPOINT[0].to_string(), "--probe".into()];
        probe_cmd.extend(command.map(str::to_string));
        let out = match self.backend.exec(id, &probe_cmd).await {
            Ok(out) => out,
            Err(e) => {
                let err = process(m, id, format!("its sandbox could not be probed: {e}"));
                return Err(self.unless_stopped(m, id, err).await);
            }
        };
        let Some(probe) = sandbox::parse_probe(&out.stdout) else {
            let err = process(
                m,
                id,
                format!(
                    "its sandbox's probe said nothing ateam reads (exit {}: {})",
                    out.code,
                    out.stderr.trim()
                ),
            );
            return Err(self.unless_stopped(m, id, err).await);
        };
        judge_credentials(m, id, &probe.status, probe.nnp)?;
        // The member's processes are the Sentry's tasks, which the host's pids cgroup does not
        // count: the Sentry's RLIMIT_NPROC bounds them (`GVISOR_SANDBOX_PIDS`).
        let pids = Some(u64::from(m.spec.pids));
        if probe.nproc != (pids, pids) {
            let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |n| n.to_string());
            return Err(process(
                m,
                id,
                format!(
                    "its processes are bounded at {}/{} (RLIMIT_NPROC as its sandbox has it), not at its pids {}",
                    show(probe.nproc.0),
                    show(probe.nproc.1),
                    m.spec.pids
                ),
            ));
        }
        if let Some(cmd) = command
            && !probe.runnable
        {
            return Err(not_runnable(m, id, cmd));
        }
        let Some(gofer) = sandbox::gofer_of(pid, id) else {
            let err = process(
                m,
                id,
                format!("the gofer of its sandbox (pid {pid}) is not found beside it"),
            );
            return Err(self.unless_stopped(m, id, err).await);
        };
        Ok((probe.token, gofer))
    }

    /// A resumed member's HOME put back before its command runs (`ateam resume` left the
    /// note): by the member's own `tar`, as the member, inside its container, from the archive
    /// its `tar` wrote at `suspend`; ateam never reads the archive on the host. A HOME that
    /// cannot be put back is said, and its archive left where it is: nothing is lost, and the
    /// member starts (its grants, workspace and transcript are its state; HOME is a cache).
    async fn restore_home(&self, m: &DesiredMember, id: &str) {
        let (state_dir, team, member) = (&self.state_dir, &m.team, &m.member);
        let note = match crate::store::suspended::resume_note(state_dir, team, member) {
            Ok(Some(note)) => note,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(member = %member, error = %e, "HOME not put back");
                return;
            }
        };
        let archive = note.home.display().to_string();
        let home = crate::core::container::MEMBER_HOME;
        let put_back = ["tar", "-x", "-f", &archive, "-C", home].map(String::from);
        match self.backend.exec(id, &put_back).await {
            Ok(out) if out.code == 0 => {
                let rm = ["rm", "-f", &archive].map(String::from);
                if let Err(e) = self.backend.exec(id, &rm).await {
                    tracing::warn!(member = %member, error = %e, "{archive} not removed");
                }
                tracing::info!(member = %member, "HOME put back as it was at suspend");
            }
            Ok(out) => tracing::warn!(
                member = %member,
                "HOME not put back (`tar` exited {}: {}); its archive stays at {archive}",
                out.code,
                out.stderr.trim()
            ),
            Err(e) => tracing::warn!(
                member = %member, error = %e,
                "HOME not put back; its archive stays at {archive}"
            ),
        }
        if let Err(e) = crate::store::suspended::forget_resume_note(state_dir, team, member) {
            tracing::warn!(member = %member, error = %e, "the resume note stays");
        }
    }

    /// The container stopped before its gate was released: say so, with its exit code and its
    /// last output (which an engine may write out a moment after the exit).
    pub(super) async fn stopped_early(&self, m: &DesiredMember, id: &str) -> RunError {
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
    pub(super) async fn unless_stopped(
        &self,
        m: &DesiredMember,
        id: &str,
        err: RunError,
    ) -> RunError {
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
    pub(super) fn started_init(
        &self,
        m: &DesiredMember,
        id: &str,
        before: Option<&Looked>,
        limits: Limits,
        fresh: bool,
    ) -> Result<Option<u32>, RunError> {
        // Under gVisor the engine's pid files and cgroup name the sandbox: an inspect does.
        if m.spec.runtime == ContainerRuntime::Gvisor
            || (!fresh && !self.info.inspect_holds_while_running())
        {
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

    pub(super) async fn check_policy(
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
