//! Carrying out a plan: actions of one member run in order, members run side by side with
//! bounded concurrency. All engine writes of an apply happen here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use futures_util::{StreamExt, stream};

use crate::backend::BackendError;
use crate::core::container::{labels, replacement_name};
use crate::files;
use crate::plan::spec::{DesiredMember, DesiredSession};
use crate::plan::{Action, ContainerRef, Plan, StartReason};
use crate::runtime::{RunError, Runtime};

/// The default bound on members brought up at once: min(8, 2 x CPUs).
pub fn default_concurrency() -> usize {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (2 * cpus).min(8)
}

/// Where an apply reports progress (a terminal display, or plain lines).
pub trait Progress: Send + Sync {
    /// `step` is one of: creating, verifying, starting, ready, replacing, removing, failed.
    fn step(&self, team: &str, member: &str, step: &str);
}

/// What went wrong for one member; the others went on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("member `{member}`: {source}")]
    Backend {
        member: String,
        #[source]
        source: BackendError,
    },
    #[error("member `{member}`: {}: {source}", .path.display())]
    Io {
        member: String,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("main session `{session}`: {message}")]
    Session { session: String, message: String },
}

/// One failure, by member.
#[derive(Debug)]
pub struct Failure {
    pub team: String,
    pub member: String,
    pub error: ActionError,
}

pub struct Executor<'a> {
    pub rt: &'a Runtime,
    pub concurrency: usize,
    pub secret: &'a (dyn Fn(&str) -> Option<String> + Sync),
    pub progress: &'a dyn Progress,
}

fn key(a: &Action) -> (String, String) {
    match a {
        Action::MakeTranscriptDir { team, member, .. }
        | Action::StartEgressProxy { team, member, .. }
        | Action::Start { team, member, .. }
        | Action::RemoveOrphan { team, member, .. }
        | Action::RemoveDuplicate { team, member, .. }
        | Action::RemoveStranger { team, member, .. }
        | Action::FinishReplacement { team, member, .. }
        | Action::RestoreName { team, member, .. }
        | Action::Unpause { team, member, .. } => (team.clone(), member.clone()),
        Action::Create { member } | Action::Recreate { member, .. } => {
            (member.team.clone(), member.member.clone())
        }
        Action::StartSession { session } => {
            (session.team.clone(), format!("session/{}", session.name))
        }
    }
}

impl Executor<'_> {
    /// Checks what can be known before anything changes, for every member the plan creates,
    /// recreates or starts: a refusal here leaves the machine and the store as they were.
    /// (`Runtime` checks the same again before each container is made.)
    pub fn preflight(&self, plan: &Plan, desired: &[DesiredMember]) -> Vec<Failure> {
        let mut failures = Vec::new();
        for a in &plan.actions {
            let m = match a {
                Action::Create { member } | Action::Recreate { member, .. } => Some(&**member),
                Action::Start { team, member, .. } => desired
                    .iter()
                    .find(|m| m.team == *team && m.member == *member),
                Action::MakeTranscriptDir { .. }
                | Action::StartEgressProxy { .. }
                | Action::StartSession { .. }
                | Action::RemoveOrphan { .. }
                | Action::RemoveDuplicate { .. }
                | Action::RemoveStranger { .. }
                | Action::FinishReplacement { .. }
                | Action::RestoreName { .. }
                | Action::Unpause { .. } => None,
            };
            if let Some(m) = m
                && let Err(e) = self
                    .rt
                    .check_read_only(m)
                    .and_then(|()| self.rt.member_owner(m).map(|_| ()))
            {
                failures.push(Failure {
                    team: m.team.clone(),
                    member: m.member.clone(),
                    error: e.into(),
                });
            }
        }
        failures
    }

    /// Runs every action; returns the failures (empty when all went well).
    pub async fn run(&self, plan: &Plan, desired: &[DesiredMember]) -> Vec<Failure> {
        let mut groups: BTreeMap<(String, String), Vec<&Action>> = BTreeMap::new();
        for a in &plan.actions {
            groups.entry(key(a)).or_default().push(a);
        }
        let by_name: BTreeMap<(&str, &str), &DesiredMember> = desired
            .iter()
            .map(|m| ((m.team.as_str(), m.member.as_str()), m))
            .collect();
        let by_name = Arc::new(by_name);
        stream::iter(groups)
            .map(|((team, member), actions)| {
                let by_name = by_name.clone();
                async move {
                    for a in actions {
                        if let Err(error) = self
                            .one(a, by_name.get(&(team.as_str(), member.as_str())).copied())
                            .await
                        {
                            self.progress.step(&team, &member, "failed");
                            return Some(Failure {
                                team,
                                member,
                                error,
                            });
                        }
                    }
                    None
                }
            })
            .buffer_unordered(self.concurrency.max(1))
            .filter_map(|f| async move { f })
            .collect()
            .await
    }

    async fn one(&self, a: &Action, wanted: Option<&DesiredMember>) -> Result<(), ActionError> {
        let backend = |member: &str| {
            let member = member.to_string();
            move |source| ActionError::Backend { member, source }
        };
        match a {
            Action::MakeTranscriptDir { member, path, .. } => {
                // The member's own: it writes its transcript there as the user it runs as.
                let owner = match wanted {
                    Some(m) => self.rt.member_owner(m)?,
                    None => self.rt.owner,
                };
                files::member_dir(path, self.rt.owner, owner).map_err(|source| ActionError::Io {
                    member: member.clone(),
                    path: path.clone(),
                    source,
                })
            }
            Action::Create { member } => {
                self.progress.step(&member.team, &member.member, "creating");
                let p = self.rt.prepare(member, self.secret).await?;
                self.progress
                    .step(&member.team, &member.member, "verifying");
                match self.rt.launch(p, None).await {
                    Err(RunError::Backend {
                        source: BackendError::NameConflict { .. },
                        ..
                    }) if self.remove_unfinished(&member.spec.name).await? => {
                        let p = self.rt.prepare(member, self.secret).await?;
                        self.rt.launch(p, None).await?;
                    }
                    other => {
                        other?;
                    }
                }
                self.progress.step(&member.team, &member.member, "ready");
                Ok(())
            }
            Action::Recreate { member, old, .. } => self.replace(member, old).await,
            Action::Start {
                team,
                member,
                container,
                reason,
            } => {
                // The planner starts only members the manifests want.
                let m = wanted.ok_or_else(|| ActionError::Session {
                    session: member.clone(),
                    message: "a start was planned for a member no manifest wants".into(),
                })?;
                self.progress.step(team, member, "starting");
                self.rt.restart(m, &container.id).await?;
                if let StartReason::Restart { .. } = reason {
                    let count = restarts(&m.ctl_dir) + 1;
                    let path = m.ctl_dir.join("restarts");
                    files::write_atomic(&path, count.to_string().as_bytes(), 0o600, self.rt.owner)
                        .map_err(|source| ActionError::Io {
                            member: member.clone(),
                            path,
                            source,
                        })?;
                }
                self.progress.step(team, member, "ready");
                Ok(())
            }
            Action::RemoveOrphan {
                team,
                member,
                container,
            }
            | Action::RemoveDuplicate {
                team,
                member,
                container,
            } => {
                self.progress.step(team, member, "removing");
                self.rt
                    .remove(team, member, &container.id)
                    .await
                    .map_err(ActionError::from)
            }
            Action::RemoveStranger {
                team,
                member,
                container,
            } => {
                // Never recorded, so nothing to forget.
                self.progress.step(team, member, "removing");
                self.rt
                    .backend
                    .remove(&container.id)
                    .await
                    .map_err(backend(member))
            }
            Action::Unpause {
                team,
                member,
                container,
            } => {
                self.progress.step(team, member, "starting");
                self.rt
                    .backend
                    .unpause(&container.id)
                    .await
                    .map_err(backend(member))?;
                self.progress.step(team, member, "ready");
                Ok(())
            }
            Action::FinishReplacement {
                team,
                member,
                container,
                name,
            }
            | Action::RestoreName {
                team,
                member,
                container,
                name,
            } => {
                self.progress.step(team, member, "replacing");
                self.rt
                    .backend
                    .rename(&container.id, name)
                    .await
                    .map_err(backend(member))?;
                self.progress.step(team, member, "ready");
                Ok(())
            }
            Action::StartSession { session } => start_session(session),
            Action::StartEgressProxy { member, .. } => Err(ActionError::Session {
                session: member.clone(),
                message: "the egress proxy is not available in this version".into(),
            }),
        }
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

    /// Replace a member's container without a gap in safety: the new one is created under a
    /// temporary name, labelled with the id it replaces, verified and released; only then is
    /// the old one removed and the new one renamed. A crash anywhere leaves a state the
    /// planner finishes or undoes (see `plan`).
    async fn replace(&self, m: &DesiredMember, old: &ContainerRef) -> Result<(), ActionError> {
        let backend = |source| ActionError::Backend {
            member: m.member.clone(),
            source,
        };
        self.progress.step(&m.team, &m.member, "creating");
        let mut p = self.rt.prepare(m, self.secret).await?;
        p.request
            .labels
            .insert(labels::REPLACES.into(), old.id.clone());
        // A leftover replacement of an earlier attempt holds the temporary name.
        let temp = replacement_name(&m.spec.name);
        if let Some(stale) = self.rt.backend.find_by_name(&temp).await.map_err(backend)?
            && stale.labels.get(labels::STORE) == Some(&self.rt.store)
        {
            self.rt.remove(&m.team, &m.member, &stale.id).await?;
        }
        self.progress.step(&m.team, &m.member, "verifying");
        let new_id = self.rt.launch(p, Some(&temp)).await?;
        self.progress.step(&m.team, &m.member, "replacing");
        self.rt.remove(&m.team, &m.member, &old.id).await?;
        self.rt
            .backend
            .rename(&new_id, &m.spec.name)
            .await
            .map_err(backend)?;
        self.progress.step(&m.team, &m.member, "ready");
        Ok(())
    }
}

/// A main session: a detached tmux session on its own socket, with a clean environment.
fn start_session(s: &DesiredSession) -> Result<(), ActionError> {
    let err = |message: String| ActionError::Session {
        session: s.name.clone(),
        message,
    };
    if let Some(dir) = s.socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    }
    let mut cmd = std::process::Command::new("tmux");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .env("TERM", "xterm-256color")
        .envs(&s.env)
        .arg("-S")
        .arg(&s.socket)
        .args(["new-session", "-d", "-s", &s.name, "-c"])
        .arg(&s.cwd)
        .args(&s.command);
    let out = cmd
        .output()
        .map_err(|e| err(format!("cannot run tmux ({e}); install tmux")))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(())
}

/// How often ateam restarted a member (by its restart policy), kept in its control folder.
pub fn restarts(ctl_dir: &Path) -> u64 {
    std::fs::read_to_string(ctl_dir.join("restarts"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// For `status`: the size of a transcript folder and when it last changed.
pub fn transcript_usage(dir: &Path) -> (u64, Option<std::time::SystemTime>) {
    let mut size = 0;
    let mut newest = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                size += meta.len();
            }
            if let Ok(t) = meta.modified() {
                newest = newest.max(Some(t));
            }
        }
    }
    (size, newest)
}
