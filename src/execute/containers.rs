//! A member's containers: made, replaced without a gap in safety, started through the gate,
//! removed, renamed, let go on; how each ended kept for `status`.

use std::time::SystemTime;

use tracing::{debug, info, warn};

use super::{ActionError, Carried, Executor, Step, backend_error};
use crate::backend::BackendError;
use crate::core::container::{ExitReason, LastExit, labels, replacement_name, rfc3339};
use crate::files;
use crate::observe::restarts;
use crate::plan::spec::DesiredMember;
use crate::plan::{Action, ContainerOp, ContainerRef, Removal, StartReason};
use crate::runtime::{ProxyStarting, RunError};
use crate::store::Record;

impl Executor<'_> {
    /// Carries out a `ContainerOp`; with the container whose command it let run.
    pub(super) async fn container(
        &self,
        a: &Action,
        op: &ContainerOp,
        wanted: Option<&DesiredMember>,
        proxy: &mut Option<ProxyStarting>,
    ) -> Carried {
        let (team, member) = a.subject();
        match op {
            ContainerOp::Create { member } => Carried::launched(self.create(member, proxy).await),
            // A replacement without a gap in safety: the new container is created under a
            // temporary name, labelled with the id it replaces, verified and released; only
            // then is the old one removed and the new one renamed. A crash anywhere leaves a
            // state the planner finishes or undoes (see `plan`).
            ContainerOp::Recreate { member, old, .. } => {
                match self.launch_replacement(member, old, proxy).await {
                    Ok(id) => Carried {
                        done: self.finish_replacement(member, old, &id).await,
                        released: Some(id),
                    },
                    Err(e) => Carried::launched(Err(e)),
                }
            }
            ContainerOp::Start { container, reason } => {
                self.start(team, member, container, reason, wanted).await
            }
            ContainerOp::Remove { container, removal } => Carried::done(match removal {
                Removal::Orphan { .. } | Removal::Duplicate | Removal::Suspended => {
                    self.remove_recorded(team, member, container).await
                }
                Removal::Stranger => self.remove_stranger(team, member, container).await,
            }),
            ContainerOp::FinishReplacement { container, name }
            | ContainerOp::RestoreName { container, name } => {
                Carried::done(self.rename(team, member, container, name).await)
            }
            ContainerOp::Unpause { container } => {
                Carried::done(self.unpause(team, member, container).await)
            }
            ContainerOp::Stop { container } => {
                Carried::done(self.stop(team, member, container).await)
            }
        }
    }

    /// Starts a wanted member's existing container through the gate, and counts a restart.
    async fn start(
        &self,
        team: &str,
        member: &str,
        container: &ContainerRef,
        reason: &StartReason,
        wanted: Option<&DesiredMember>,
    ) -> Carried {
        // The planner starts only members the manifests want.
        let Some(m) = wanted else {
            return Carried::launched(Err(ActionError::Session {
                session: member.to_string(),
                message: "a start was planned for a member no manifest wants".into(),
            }));
        };
        self.progress.step(team, member, Step::Starting);
        if let Err(e) = self.start_again(m, &container.id, reason).await {
            return Carried::launched(Err(e));
        }
        let done = self.count_restart(m, reason);
        if done.is_ok() {
            self.progress.step(team, member, Step::Ready);
        }
        Carried {
            done,
            released: Some(container.id.clone()),
        }
    }

    /// Makes, verifies and releases a member's container; its id.
    async fn create(
        &self,
        member: &DesiredMember,
        proxy: &mut Option<ProxyStarting>,
    ) -> Result<String, ActionError> {
        self.progress
            .step(&member.team, &member.member, Step::Creating);
        let p = self.rt.prepare(member, self.secret).await?;
        self.progress
            .step(&member.team, &member.member, Step::Verifying);
        let id = match self.rt.launch_with(p, None, proxy).await {
            Err(RunError::Backend {
                source: BackendError::NameConflict { .. },
                ..
            }) if self.remove_unfinished(&member.spec.name).await? => {
                let p = self.rt.prepare(member, self.secret).await?;
                self.rt.launch_with(p, None, proxy).await?
            }
            other => other?,
        };
        debug!(container = %id, name = %member.spec.name, "created, verified and released");
        self.progress
            .step(&member.team, &member.member, Step::Ready);
        Ok(id)
    }

    /// A create that an interrupted apply sent can still be in the engine's hands when the
    /// next apply lists containers, and then appear: the name is taken by a container of
    /// ours that was never verified nor released. Such a container is removed (true); a
    /// container of anyone else is left alone (false).
    async fn remove_unfinished(&self, name: &str) -> Result<bool, ActionError> {
        let backend = |source| ActionError::Backend {
            member: name.to_string(),
            source,
        };
        match self.rt.backend.find_by_name(name).await.map_err(backend)? {
            Some(c) if c.labels.get(labels::STORE) == Some(&self.rt.store) => {
                info!(
                    container = %c.id,
                    name,
                    reason = "unfinished",
                    "removing a container an interrupted apply left holding the name"
                );
                let (team, member) = (
                    c.labels.get(labels::TEAM).cloned().unwrap_or_default(),
                    c.labels.get(labels::MEMBER).cloned().unwrap_or_default(),
                );
                self.rt.remove(&team, &member, &c.id).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Brings up a member's new container beside the old one, under a temporary name; the new
    /// one's id (created, verified and released: its command runs from here on).
    async fn launch_replacement(
        &self,
        m: &DesiredMember,
        old: &ContainerRef,
        proxy: &mut Option<ProxyStarting>,
    ) -> Result<String, ActionError> {
        self.progress.step(&m.team, &m.member, Step::Creating);
        let mut p = self.rt.prepare(m, self.secret).await?;
        p.request
            .labels
            .insert(labels::REPLACES.into(), old.id.clone());
        // A leftover replacement of an earlier attempt holds the temporary name.
        let temp = replacement_name(&m.spec.name);
        let found = self.rt.backend.find_by_name(&temp).await;
        if let Some(stale) = found.map_err(|source| ActionError::Backend {
            member: m.member.clone(),
            source,
        })? && stale.labels.get(labels::STORE) == Some(&self.rt.store)
        {
            info!(
                container = %stale.id,
                name = %temp,
                reason = "staleReplacement",
                "removing the replacement an earlier attempt left"
            );
            self.rt.remove(&m.team, &m.member, &stale.id).await?;
        }
        self.progress.step(&m.team, &m.member, Step::Verifying);
        let new_id = self.rt.launch_with(p, Some(&temp), proxy).await?;
        debug!(container = %new_id, name = %temp, "replacement created, verified and released");
        Ok(new_id)
    }

    /// Removes the old container a replacement stands beside and gives the new one its name.
    async fn finish_replacement(
        &self,
        m: &DesiredMember,
        old: &ContainerRef,
        new_id: &str,
    ) -> Result<(), ActionError> {
        self.progress.step(&m.team, &m.member, Step::Replacing);
        self.rt.remove(&m.team, &m.member, &old.id).await?;
        self.rt
            .backend
            .rename(new_id, &m.spec.name)
            .await
            .map_err(|source| ActionError::Backend {
                member: m.member.clone(),
                source,
            })?;
        self.progress.step(&m.team, &m.member, Step::Ready);
        Ok(())
    }

    /// Starts a member's existing container again, through the gate; its last exit is kept
    /// first (the engine forgets it once it starts again).
    async fn start_again(
        &self,
        m: &DesiredMember,
        id: &str,
        reason: &StartReason,
    ) -> Result<(), ActionError> {
        // Keeping the last exit (a write; an inspect only for a plan made without a look)
        // runs beside the checks before the start: on Podman the start should reach the
        // engine before its cleanup process (started by conmon at the death) takes the
        // container's lock.
        let keep = async {
            if let StartReason::Restart { code, .. } = reason {
                self.record_exit(m, id, *code).await;
            }
        };
        if let StartReason::Board { mark, .. } = reason {
            self.wake_task(m, id, *mark)?;
        }
        let ((), pins) = tokio::join!(keep, self.rt.before_restart(m, id));
        Ok(self.rt.restart_pinned(m, id, &pins?).await?)
    }

    /// Keeps how a member's container ended before ateam restarts it (for `status`), as the
    /// engine said it to the look (or says it now, for a plan made without a look); from the
    /// plan's exit code alone when the engine cannot say.
    async fn record_exit(&self, m: &DesiredMember, id: &str, code: i64) {
        let last = match self.rt.looked.get(id).and_then(|l| l.last_exit.as_ref()) {
            Some(l) => Some(l.clone()),
            None => match self.rt.backend.inspect(id).await {
                Ok(i) => i.last_exit,
                Err(_) => None,
            },
        }
        .unwrap_or_else(|| LastExit::exited(code, false, Some(rfc3339(SystemTime::now())), None));
        if let Err(e) = Record::set_last_exit(&m.record, last, self.rt.owner) {
            warn!(member = %m.member, error = %e, "cannot record how the member ended");
        }
    }

    /// Keeps why a member could not be brought up (for `status`), when the action was one
    /// that starts it.
    pub(super) fn record_failed_start(&self, a: &Action, m: &DesiredMember, error: &ActionError) {
        if !a.brings_up_member() {
            return;
        }
        let last = LastExit {
            at: Some(rfc3339(SystemTime::now())),
            exit_code: None,
            reason: ExitReason::StartFailed,
            message: Some(error.to_string()),
        };
        if let Err(e) = Record::set_last_exit(&m.record, last, self.rt.owner) {
            warn!(member = %m.member, error = %e, "cannot record the failed start");
        }
    }

    /// The next task of an agent the board wakes, for this container, read by its gate as
    /// any `ateam task`; the news noted as told first, so that an agent that does not read
    /// it is not woken again for it.
    fn wake_task(&self, m: &DesiredMember, id: &str, mark: (u64, u64)) -> Result<(), ActionError> {
        let Some(command) = &m.wake else {
            return Ok(());
        };
        let board = crate::board::store::Board::new(&self.rt.state_dir, &m.team, self.rt.owner);
        let who = crate::board::Actor::Member(m.member.clone());
        let io = |path: std::path::PathBuf| {
            move |source: std::io::Error| ActionError::Io {
                member: m.member.clone(),
                path,
                source,
            }
        };
        board
            .mark_woken(&who, mark)
            .map_err(|e| io(self.rt.state_dir.clone())(std::io::Error::other(e.to_string())))?;
        let owner = self.rt.member_owner(m)?;
        crate::runtime::gate::set_task(&m.ctl_dir, id, command, owner)
            .map_err(io(m.ctl_dir.clone()))
    }

    /// Counts a restart by the member's restart policy, in its control folder.
    fn count_restart(&self, m: &DesiredMember, reason: &StartReason) -> Result<(), ActionError> {
        let StartReason::Restart { .. } = reason else {
            return Ok(());
        };
        let count = restarts(&m.ctl_dir) + 1;
        let path = crate::core::layout::restarts_path(&m.ctl_dir);
        files::write_atomic_in_member_dir(&path, count.to_string().as_bytes(), 0o600, self.rt.owner)
            .map_err(|source| ActionError::Io {
                member: m.member.clone(),
                path,
                source,
            })
    }

    /// Removes a container ateam made (an orphan, a duplicate), and forgets it.
    async fn remove_recorded(
        &self,
        team: &str,
        member: &str,
        container: &ContainerRef,
    ) -> Result<(), ActionError> {
        self.progress.step(team, member, Step::Removing);
        self.rt
            .remove(team, member, &container.id)
            .await
            .map_err(ActionError::from)
    }

    /// Removes a container with ateam's labels that ateam did not make: never recorded, so
    /// nothing to forget.
    async fn remove_stranger(
        &self,
        team: &str,
        member: &str,
        container: &ContainerRef,
    ) -> Result<(), ActionError> {
        self.progress.step(team, member, Step::Removing);
        self.rt
            .backend
            .remove(&container.id)
            .await
            .map_err(backend_error(member))
    }

    /// Stops a member's container (its restart policy is the next plan's to apply).
    async fn stop(
        &self,
        team: &str,
        member: &str,
        container: &ContainerRef,
    ) -> Result<(), ActionError> {
        self.progress.step(team, member, Step::Removing);
        self.rt
            .backend
            .stop(&container.id, 10)
            .await
            .map_err(backend_error(member))
    }

    /// Lets a member go on that someone paused.
    async fn unpause(
        &self,
        team: &str,
        member: &str,
        container: &ContainerRef,
    ) -> Result<(), ActionError> {
        self.progress.step(team, member, Step::Starting);
        self.rt
            .backend
            .unpause(&container.id)
            .await
            .map_err(backend_error(member))?;
        self.progress.step(team, member, Step::Ready);
        Ok(())
    }

    /// Gives a member's container its name: a verified replacement whose predecessor is
    /// gone, or one someone renamed.
    async fn rename(
        &self,
        team: &str,
        member: &str,
        container: &ContainerRef,
        name: &str,
    ) -> Result<(), ActionError> {
        self.progress.step(team, member, Step::Replacing);
        self.rt
            .backend
            .rename(&container.id, name)
            .await
            .map_err(backend_error(member))?;
        self.progress.step(team, member, Step::Ready);
        Ok(())
    }
}
