//! What can be known before anything changes, for every member a plan brings up: a refusal
//! here leaves the machine and the store as they were.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tracing::{debug, info, warn};

use super::{Executor, Failure};
use crate::backend::{BackendError, GvisorSupport};
use crate::core::container::ContainerRuntime;
use crate::model::PullPolicy;
use crate::plan::spec::DesiredMember;
use crate::plan::{Action, ContainerOp, Plan};
use crate::runtime::{RunError, image};

/// The member an action brings up, and whether the action creates its container (true) or
/// starts the one it has (false, when a manifest still wants the member).
fn brought_up<'p>(
    a: &'p Action,
    desired: &'p [DesiredMember],
) -> Option<(&'p DesiredMember, bool)> {
    match a.container_op()? {
        ContainerOp::Create { member } | ContainerOp::Recreate { member, .. } => {
            Some((member, true))
        }
        ContainerOp::Start { .. } => desired
            .iter()
            .find(|m| (m.team.as_str(), m.member.as_str()) == a.subject())
            .map(|m| (m, false)),
        // Nothing else brings a member up.
        ContainerOp::Remove { .. }
        | ContainerOp::FinishReplacement { .. }
        | ContainerOp::RestoreName { .. }
        | ContainerOp::Unpause { .. }
        | ContainerOp::Stop { .. } => None,
    }
}

/// The members preflight refused, in the order it found them: all of them, not only the
/// first, each said at `info` as it is found.
#[derive(Default)]
struct Refusals(Vec<Failure>);

impl Refusals {
    fn refuse(&mut self, m: &DesiredMember, error: RunError) {
        info!(team = %m.team, member = %m.member, error = %error, "refused before any change");
        self.0.push(Failure {
            team: m.team.clone(),
            member: m.member.clone(),
            error: error.into(),
        });
    }

    /// Every member of an image the engine cannot give (pull it, or say what it runs).
    fn refuse_image(&mut self, members: &[&DesiredMember], e: &BackendError) {
        for m in members {
            self.refuse(
                m,
                RunError::Image {
                    member: m.member.clone(),
                    reason: e.to_string(),
                },
            );
        }
    }
}

/// Why `m`'s command cannot run in `image`, if it cannot: each program it runs, through the
/// wrappers `image::programs` reads (`env -u X prog`, `sh -c 'exec prog'`), must be an
/// executable file where the container would look for it. A command ateam cannot read
/// through is said at `warn` and checked as far as it can tell.
async fn command_missing(
    m: &DesiredMember,
    image: &str,
    config: &crate::backend::ImageConfig,
    probe: &mut image::Probe<'_>,
) -> Option<RunError> {
    let command = m.spec.command.as_ref().unwrap_or(&config.command);
    if command.is_empty() {
        return Some(RunError::NoCommand {
            member: m.member.clone(),
            image: image.to_string(),
        });
    }
    let (programs, unsure) = image::programs(command);
    if let Some(why) = unsure {
        let checked = programs
            .iter()
            .map(|p| format!("`{}`", p.name))
            .collect::<Vec<_>>()
            .join(", ");
        warn!(
            team = %m.team,
            member = %m.member,
            command = %command.join(" "),
            "member `{}`: cannot tell which program its command runs ({why}); only {checked} checked, not refused",
            m.member
        );
    }
    for (i, p) in programs.iter().enumerate() {
        let cwd = p
            .cwd
            .as_ref()
            .map_or_else(|| m.spec.cwd.clone(), |c| m.spec.cwd.join(c));
        let path = p.path.clone().unwrap_or_else(|| image::path_var(m, config));
        let looked = image::candidates(&p.name, &cwd, &path);
        match image::runnable(m, &looked, probe).await {
            Ok(true) => {}
            Ok(false) => {
                return Some(RunError::CommandNotFound {
                    member: m.member.clone(),
                    command: p.name.clone(),
                    run_by: (i > 0).then(|| command.join(" ")),
                    image: image.to_string(),
                    looked,
                });
            }
            Err(e) => {
                return Some(RunError::Image {
                    member: m.member.clone(),
                    reason: e.to_string(),
                });
            }
        }
    }
    None
}

impl Executor<'_> {
    /// Pulls `image` as its members' `imagePullPolicy` asks: when one says `Always`, or when
    /// the engine lacks it and one says `IfNotPresent` (all `Never`: a missing image is the
    /// refusal `image_config` gives).
    async fn pull_if_wanted(
        &self,
        image: &str,
        members: &[&DesiredMember],
    ) -> Result<(), BackendError> {
        let wants = |p: PullPolicy| members.iter().any(|m| m.pull == p);
        let pull = wants(PullPolicy::Always)
            || (wants(PullPolicy::IfNotPresent)
                && matches!(
                    self.rt.backend.image_config(image).await,
                    Err(BackendError::ImageMissing { .. })
                ));
        if pull {
            let started = Instant::now();
            self.rt
                .backend
                .pull(image)
                .await
                .map_err(|e| BackendError::PullFailed {
                    engine: self.rt.info.kind.to_string(),
                    image: image.to_string(),
                    message: e.to_string(),
                })?;
            info!(
                image,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "image pulled"
            );
        }
        Ok(())
    }

    /// Checks what can be known before anything changes, for every member the plan creates,
    /// recreates or starts: a refusal here leaves the machine and the store as they were.
    /// For every member it creates, also: each `secretEnv` is set, its image is on the
    /// engine, and its command is an executable file in it (`runtime::image`: one probe
    /// container per image, created, looked at and removed). Every problem is reported,
    /// not only the first. (`Runtime` checks the same again before each container is made.)
    pub async fn preflight(&self, plan: &Plan, desired: &[DesiredMember]) -> Vec<Failure> {
        let started = Instant::now();
        let mut refused = Refusals::default();
        let no_agent = self.check_agents(plan, desired, &mut refused).await;
        let created = self.check_members(plan, desired, &no_agent, &mut refused);
        self.check_runtimes(plan, desired, &mut refused).await;
        let images = created.len();
        for (image, members) in created {
            self.check_image(image, &members, &mut refused).await;
        }
        debug!(
            images,
            refused = refused.0.len(),
            elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
            "checked before any change"
        );
        refused.0
    }

    /// The members brought up under gVisor, refused where the engine cannot run it: the
    /// engine is asked once, and only when one such member is brought up.
    async fn check_runtimes(&self, plan: &Plan, desired: &[DesiredMember], refused: &mut Refusals) {
        let gvisor: Vec<&DesiredMember> = plan
            .actions
            .iter()
            .filter_map(|a| brought_up(a, desired))
            .map(|(m, _)| m)
            .filter(|m| m.spec.runtime == ContainerRuntime::Gvisor)
            .collect();
        if gvisor.is_empty() {
            return;
        }
        let why = match self.rt.backend.gvisor().await {
            Ok(GvisorSupport::PerContainer | GvisorSupport::Everything) => return,
            Ok(GvisorSupport::Absent(why)) => why,
            Err(e) => format!("the engine did not say whether it can: {e}"),
        };
        for m in gvisor {
            refused.refuse(
                m,
                RunError::RuntimeUnavailable {
                    member: m.member.clone(),
                    runtime: m.spec.runtime.to_string(),
                    engine: self.rt.info.kind.to_string(),
                    why: why.clone(),
                },
            );
        }
    }

    /// What `preflight` would refuse that needs no engine and changes nothing (no agent
    /// fetched, no image pulled, no probe made): limits, folders, user, transcripts folder,
    /// secrets. `diff` and `doctor -f` say it before an apply would.
    pub fn preflight_offline(&self, plan: &Plan, desired: &[DesiredMember]) -> Vec<Failure> {
        let mut refused = Refusals::default();
        self.check_members(plan, desired, &BTreeSet::new(), &mut refused);
        refused.0
    }

    /// The agents' native builds of the members brought up, fetched when missing (once per
    /// build) and checked (`runtime::agents`). Returns the members refused for theirs.
    async fn check_agents(
        &self,
        plan: &Plan,
        desired: &[DesiredMember],
        refused: &mut Refusals,
    ) -> BTreeSet<(String, String)> {
        let mut by_build: BTreeMap<&std::path::Path, Vec<&DesiredMember>> = BTreeMap::new();
        for a in &plan.actions {
            if let Some((m, _)) = brought_up(a, desired)
                && let Some(c) = &m.agent_build
            {
                by_build.entry(&c.dir).or_default().push(m);
            }
        }
        let mut out = BTreeSet::new();
        for members in by_build.values() {
            let Some(c) = members.first().and_then(|m| m.agent_build.as_ref()) else {
                continue;
            };
            if let Err(e) = crate::runtime::agents::ensure(c).await {
                let source = Arc::new(e);
                for m in members {
                    refused.refuse(
                        m,
                        RunError::Agent {
                            member: m.member.clone(),
                            source: source.clone(),
                        },
                    );
                    out.insert((m.team.clone(), m.member.clone()));
                }
            }
        }
        out
    }

    /// The preflight checks that need no engine, member by member in the plan's order: its
    /// limits, folders and user; for a member created, its secrets too. Returns the members
    /// created, by image, for the checks that need the engine (all of them are made: a
    /// refusal here does not hide one there).
    fn check_members<'p>(
        &self,
        plan: &'p Plan,
        desired: &'p [DesiredMember],
        no_agent: &BTreeSet<(String, String)>,
        refused: &mut Refusals,
    ) -> BTreeMap<&'p str, Vec<&'p DesiredMember>> {
        let mut created: BTreeMap<&str, Vec<&DesiredMember>> = BTreeMap::new();
        for a in &plan.actions {
            let Some((m, creates)) = brought_up(a, desired) else {
                continue;
            };
            // Every check, each refusal said: one run tells the person all there is to fix.
            // (Whether its folders are writable depends on its user being known.)
            let checks = [
                self.rt.check_limits(m),
                self.rt.check_read_only(m),
                self.rt
                    .member_owner(m)
                    .and_then(|_| self.rt.check_writable(m)),
                self.rt.check_transcript_dir(m),
            ];
            for e in checks.into_iter().filter_map(Result::err) {
                refused.refuse(m, e);
            }
            if !creates {
                continue;
            }
            let missing: Vec<&String> = m
                .spec
                .secret_env
                .iter()
                .filter(|name| (self.secret)(name).is_none())
                .collect();
            for name in &missing {
                refused.refuse(
                    m,
                    RunError::MissingSecret {
                        member: m.member.clone(),
                        name: (*name).clone(),
                    },
                );
            }
            // Its command is its agent's, which is not there to look for.
            if !no_agent.contains(&(m.team.clone(), m.member.clone())) {
                created.entry(&m.spec.image).or_default().push(m);
            }
        }
        created
    }

    /// The preflight checks of the members created from one image that need the engine: the
    /// image is there (pulled as their `imagePullPolicy` asks) and each one's command is in
    /// it, looked for with one probe container, removed after.
    async fn check_image(&self, image: &str, members: &[&DesiredMember], refused: &mut Refusals) {
        if let Some(b) = members.iter().find_map(|m| m.build.as_ref()) {
            let engine = self.rt.info.kind.to_string();
            if let Err(e) =
                crate::runtime::build::ensure(self.rt.backend.as_ref(), &engine, image, b).await
            {
                for m in members {
                    refused.refuse(
                        m,
                        RunError::Image {
                            member: m.member.clone(),
                            reason: e.to_string(),
                        },
                    );
                }
                return;
            }
        }
        if let Err(e) = self.pull_if_wanted(image, members).await {
            refused.refuse_image(members, &e);
            return;
        }
        let config = match self.rt.backend.image_config(image).await {
            Ok(c) => c,
            Err(e) => {
                refused.refuse_image(members, &e);
                return;
            }
        };
        let mut probe = image::Probe::new(
            self.rt.backend.as_ref(),
            image,
            &config,
            &self.rt.store,
            Some((&self.rt.state_dir, self.rt.owner)),
        );
        for m in members {
            if let Some(e) = command_missing(m, image, &config, &mut probe).await {
                refused.refuse(m, e);
            }
        }
        if let Err(e) = probe.remove().await {
            warn!(image, error = %e, "cannot remove the probe container");
        }
    }
}
