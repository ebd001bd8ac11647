//! Carrying out a plan: actions of one member run in order, members run side by side with
//! bounded concurrency. All engine writes of an apply happen here.
//!
//! Logged: each member's actions run in a `member` span (team, member); each action is one
//! `info` event (its name as in the plan's JSON, the container when one exists, the reason),
//! and each failure one `warn` event with the error (the caller reports it to the user).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use futures_util::{StreamExt, stream};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::backend::BackendError;
use crate::board::Actor;
use crate::core::container::{ExitReason, LastExit, labels, replacement_name, rfc3339};
use crate::core::intercept::EgressPolicy;
use crate::files;
use crate::model::PullPolicy;
use crate::plan::spec::{DesiredMember, DesiredSession};
use crate::plan::{Action, ContainerRef, Plan, Promotion, ResumeEntry, StartReason};
use crate::report::{drift_text, start_text};
use crate::runtime::{ProxyStarting, RunError, Runtime, image};
use crate::servers::egress;
use crate::sessions;
use crate::store::Record;

/// The default bound on members brought up at once: min(8, 2 x CPUs).
pub fn default_concurrency() -> usize {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (2 * cpus).min(8)
}

/// Where an apply reports progress (a terminal display, or plain lines).
pub trait Progress: Send + Sync {
    /// `member` of `team` reached `step`.
    fn step(&self, team: &str, member: &str, step: Step);
}

/// A member's step in an apply, as its progress line shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Its container is being made.
    Creating,
    /// Its container is being checked against the policy, before and after its start.
    Verifying,
    /// Its existing container is being started.
    Starting,
    /// Its old container goes and its replacement takes its name.
    Replacing,
    /// Its container is being removed.
    Removing,
    /// Its container runs, verified.
    Ready,
    /// Its action failed (the failure is reported with the others).
    Failed,
}

impl Step {
    /// The word a person reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Creating => "creating",
            Step::Verifying => "verifying",
            Step::Starting => "starting",
            Step::Replacing => "replacing",
            Step::Removing => "removing",
            Step::Ready => "ready",
            Step::Failed => "failed",
        }
    }

    /// Whether nothing follows it for this member in this apply.
    pub fn is_last(self) -> bool {
        match self {
            Step::Ready | Step::Removing | Step::Failed => true,
            Step::Creating | Step::Verifying | Step::Starting | Step::Replacing => false,
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Progress for no one: the controller, the helper server and `top` log each action
/// (`execute` does) instead.
pub struct Quiet;

impl Progress for Quiet {
    fn step(&self, _: &str, _: &str, _: Step) {}
}

/// What went wrong for one member; the others went on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// Bringing the member up failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// An engine call failed.
    #[error("member `{member}`: {source}")]
    Backend {
        /// The member.
        member: String,
        /// The engine's error.
        #[source]
        source: BackendError,
    },
    /// A file could not be read or written.
    #[error("member `{member}`: {}: {source}", .path.display())]
    Io {
        /// The member.
        member: String,
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Its egress proxy could not be set up or started.
    #[error("member `{member}`: {source}")]
    Egress {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: egress::ProxyError,
    },
    /// Its helper server could not be started.
    #[error("member `{member}`: its helper server: {source}")]
    Helpers {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: crate::servers::helper::StartError,
    },
    /// An action that cannot be carried out as planned, or a task that panicked, in words.
    #[error("main session `{session}`: {message}")]
    Session {
        /// The session or member it is about.
        session: String,
        /// What is wrong.
        message: String,
    },
    /// A step of starting, stopping or promoting a main session failed.
    #[error("main session `{session}`: {source}")]
    SessionStep {
        /// The session.
        session: String,
        /// What failed.
        #[source]
        source: Box<sessions::SessionError>,
    },
}

/// One failure, by member.
#[derive(Debug)]
pub struct Failure {
    /// Team name.
    pub team: String,
    /// Member (or main session) name.
    pub member: String,
    /// What went wrong.
    pub error: ActionError,
}

/// Carries out a plan's actions on the runtime's engine.
pub struct Executor<'a> {
    /// The engine, store and user to act with.
    pub rt: &'a Runtime,
    /// Members acted on at once (`default_concurrency`).
    pub concurrency: usize,
    /// Looks up a secret's value in ateam's environment.
    pub secret: &'a (dyn Fn(&str) -> Option<String> + Sync),
    /// Where progress goes.
    pub progress: &'a dyn Progress,
}

/// Actions of one key run in order. A session's key is apart from any member's.
fn key(a: &Action) -> (String, String) {
    let (team, subject) = a.subject();
    let subject = match a {
        // A rollback gives the member its transcript back: before the member's own actions.
        Action::StartSession { .. } | Action::Promote { .. } | Action::StopSession { .. } => {
            format!("session/{subject}")
        }
        Action::RollBackPromotion { .. }
        | Action::MakeTranscriptDir { .. }
        | Action::StartEgressProxy { .. }
        | Action::UpdateEgressPolicy { .. }
        | Action::StopEgressProxy { .. }
        | Action::StartHelperServer { .. }
        | Action::StopHelperServer { .. }
        | Action::ReturnTasks { .. }
        | Action::Create { .. }
        | Action::Recreate { .. }
        | Action::Start { .. }
        | Action::RemoveOrphan { .. }
        | Action::RemoveDuplicate { .. }
        | Action::FinishReplacement { .. }
        | Action::RestoreName { .. }
        | Action::Unpause { .. }
        | Action::RemoveStranger { .. } => subject.to_string(),
    };
    (team.to_string(), subject)
}

/// What the log says about an action.
#[derive(Debug, PartialEq)]
struct About<'a> {
    /// Its name, as the `action` tag of the plan's JSON (`diff -o json`).
    action: &'static str,
    /// The container it acts on, when one exists before it runs.
    container: Option<&'a str>,
    /// Why the plan wants it: a short token (for a recreate and a start, the `kind` of its
    /// `Drift` or the name of its `StartReason`, as in the plan's JSON).
    reason: &'static str,
    /// The reason in words, when there is more to say than the token (as `diff` says it).
    detail: Option<String>,
}

fn about(a: &Action) -> About<'_> {
    About {
        action: a.name(),
        container: a.container().map(|c| c.id.as_str()),
        reason: a.reason(),
        detail: match a {
            Action::Recreate { reason, .. } => Some(drift_text(reason)),
            Action::Start { reason, .. } => Some(start_text(reason)),
            Action::MakeTranscriptDir { .. }
            | Action::StartEgressProxy { .. }
            | Action::UpdateEgressPolicy { .. }
            | Action::StopEgressProxy { .. }
            | Action::StartHelperServer { .. }
            | Action::StopHelperServer { .. }
            | Action::ReturnTasks { .. }
            | Action::StartSession { .. }
            | Action::StopSession { .. }
            | Action::Promote { .. }
            | Action::RollBackPromotion { .. }
            | Action::Create { .. }
            | Action::RemoveOrphan { .. }
            | Action::RemoveDuplicate { .. }
            | Action::FinishReplacement { .. }
            | Action::RestoreName { .. }
            | Action::Unpause { .. }
            | Action::RemoveStranger { .. } => None,
        },
    }
}

/// What `ateam events` says of an action carried out (`failed`: how it failed): the changes to
/// members and main sessions a person asks about, not the plumbing (proxies, helper servers,
/// transcript folders), whose failures are events all the same.
///
/// `released` is the container whose command the action let run (a create's, a replacement's,
/// a start's): the event names it, so that every start ateam released can be found by its
/// container (a replacement's reason names the old one). An action that failed after it
/// released one (a replacement whose old container could not be removed) says both: the
/// start, then the failure; a start without its event would look like one past the gate.
fn events_of(
    a: &Action,
    released: Option<&str>,
    failed: Option<&ActionError>,
) -> Vec<crate::events::Event> {
    match (failed, released) {
        (None, _) => event_of(a, released, None).into_iter().collect(),
        (Some(err), None) => event_of(a, None, Some(err)).into_iter().collect(),
        (Some(err), Some(id)) => {
            let start = match a {
                Action::Recreate { old, .. } => {
                    let (team, subject) = a.subject();
                    let reason = format!(
                        "created and started to replace {}; the replacement did not finish",
                        short_id(&old.id)
                    );
                    Some(
                        crate::events::Event::new(
                            team,
                            subject,
                            crate::events::EventKind::Created,
                            &reason,
                        )
                        .container(id),
                    )
                }
                Action::MakeTranscriptDir { .. }
                | Action::StartEgressProxy { .. }
                | Action::UpdateEgressPolicy { .. }
                | Action::StopEgressProxy { .. }
                | Action::StartHelperServer { .. }
                | Action::StopHelperServer { .. }
                | Action::ReturnTasks { .. }
                | Action::StartSession { .. }
                | Action::StopSession { .. }
                | Action::Promote { .. }
                | Action::RollBackPromotion { .. }
                | Action::Create { .. }
                | Action::Start { .. }
                | Action::RemoveOrphan { .. }
                | Action::RemoveDuplicate { .. }
                | Action::FinishReplacement { .. }
                | Action::RestoreName { .. }
                | Action::Unpause { .. }
                | Action::RemoveStranger { .. } => event_of(a, Some(id), None),
            };
            start
                .into_iter()
                .chain(event_of(a, None, Some(err)))
                .collect()
        }
    }
}

/// The one event of an action that ended as `failed` says; see `events_of`.
fn event_of(
    a: &Action,
    made: Option<&str>,
    failed: Option<&ActionError>,
) -> Option<crate::events::Event> {
    use crate::events::{Event, EventKind as K};
    let (team, subject) = a.subject();
    let ev = |kind, reason: &str| Event::new(team, subject, kind, reason);
    let mut e = match failed {
        Some(err) => ev(failure_kind(err), &err.to_string()),
        None => match a {
            Action::Create { .. } => ev(K::Created, "created and started"),
            Action::Recreate { reason, old, .. } => ev(
                K::Replaced,
                &format!(
                    "replaced because {} (was {})",
                    drift_text(reason),
                    short_id(&old.id)
                ),
            ),
            Action::FinishReplacement { .. } => {
                ev(K::Replaced, "an interrupted replacement finished")
            }
            Action::Start {
                reason: StartReason::Restart { code, policy },
                ..
            } => ev(
                K::Restarted,
                &format!("restarted after exit {code} (restart policy {policy:?})"),
            ),
            Action::Start {
                reason: StartReason::NeverStarted,
                ..
            } => ev(K::Started, "started: it was created but never started"),
            Action::Start {
                reason:
                    StartReason::Board {
                        messages, tasks, ..
                    },
                ..
            } => ev(
                K::TaskGiven,
                &format!(
                    "woken by the team's board: {messages} message(s), {tasks} task(s) for it"
                ),
            ),
            Action::Start {
                reason: StartReason::NotReleased,
                ..
            } => ev(
                K::Released,
                "held at its gate since a start ateam had not checked; checked and released",
            ),
            Action::RemoveOrphan { why, .. } => ev(
                K::Removed,
                &format!(
                    "removed: {}",
                    why.as_deref().unwrap_or("no manifest wants it")
                ),
            ),
            Action::RemoveDuplicate { .. } => ev(K::Removed, "removed: a duplicate"),
            Action::RemoveStranger { .. } => {
                ev(K::Removed, "removed a container ateam did not make")
            }
            Action::RestoreName { name, .. } => ev(
                K::Repaired,
                &format!("renamed behind ateam's back; named back to {name}"),
            ),
            Action::Unpause { .. } => ev(K::Repaired, "paused behind ateam's back; let go on"),
            Action::RollBackPromotion { .. } => ev(
                K::Repaired,
                "an interrupted promotion no manifest asks for was rolled back",
            ),
            Action::StartSession { .. } => ev(K::SessionStarted, "main session started"),
            Action::StopSession {
                taken_over_by: Some(heir),
                ..
            } => ev(
                K::SessionStopped,
                &format!("main session stopped: taken over by {heir}"),
            ),
            Action::StopSession { .. } => ev(
                K::SessionStopped,
                "main session stopped: no manifest wants it",
            ),
            Action::Promote { .. } => ev(K::Promoted, "promoted from a member to a main session"),
            Action::ReturnTasks { why, .. } => ev(
                K::TasksReturned,
                &format!("its tasks on the board went back to todo: {why}"),
            ),
            Action::MakeTranscriptDir { .. }
            | Action::StartEgressProxy { .. }
            | Action::UpdateEgressPolicy { .. }
            | Action::StopEgressProxy { .. }
            | Action::StartHelperServer { .. }
            | Action::StopHelperServer { .. } => return None,
        },
    };
    match (made, a.container()) {
        (Some(id), _) => e = e.container(id),
        (None, Some(c)) => e = e.container(&c.id),
        (None, None) => {}
    }
    Some(e)
}

/// A container id as `events` and `status` show it.
fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// `held` when the checks at the gate refused a member (its container is gone before its
/// command ran), `failed` otherwise.
fn failure_kind(err: &ActionError) -> crate::events::EventKind {
    fn at_gate(e: &RunError) -> bool {
        match e {
            RunError::Pin { .. }
            | RunError::PolicyViolation { .. }
            | RunError::Process { .. }
            | RunError::Workspace { .. } => true,
            RunError::Rollback { cause, .. } => at_gate(cause),
            RunError::Ca { .. }
            | RunError::Egress { .. }
            | RunError::Backend { .. }
            | RunError::LimitsNotEnforced { .. }
            | RunError::MissingSecret { .. }
            | RunError::NoCommand { .. }
            | RunError::Image { .. }
            | RunError::CommandNotFound { .. }
            | RunError::RootlessUser { .. }
            | RunError::Io { .. }
            | RunError::WritableBelowReadOnly { .. }
            | RunError::NotWritable { .. }
            | RunError::TranscriptFolder { .. }
            | RunError::Agent { .. } => false,
        }
    }
    match err {
        ActionError::Run(e) if at_gate(e) => crate::events::EventKind::Held,
        ActionError::Run(_)
        | ActionError::Backend { .. }
        | ActionError::Io { .. }
        | ActionError::Egress { .. }
        | ActionError::Helpers { .. }
        | ActionError::Session { .. }
        | ActionError::SessionStep { .. } => crate::events::EventKind::Failed,
    }
}

/// The member an action brings up, and whether the action creates its container (true) or
/// starts the one it has (false, when a manifest still wants the member).
fn brought_up<'p>(
    a: &'p Action,
    desired: &'p [DesiredMember],
) -> Option<(&'p DesiredMember, bool)> {
    match a {
        Action::Create { member } | Action::Recreate { member, .. } => Some((member, true)),
        Action::Start { team, member, .. } => desired
            .iter()
            .find(|m| m.team == *team && m.member == *member)
            .map(|m| (m, false)),
        // Nothing else brings a member up.
        Action::MakeTranscriptDir { .. }
        | Action::StartEgressProxy { .. }
        | Action::UpdateEgressPolicy { .. }
        | Action::StopEgressProxy { .. }
        | Action::StartHelperServer { .. }
        | Action::StopHelperServer { .. }
        | Action::ReturnTasks { .. }
        | Action::StartSession { .. }
        | Action::StopSession { .. }
        | Action::Promote { .. }
        | Action::RollBackPromotion { .. }
        | Action::RemoveOrphan { .. }
        | Action::RemoveDuplicate { .. }
        | Action::FinishReplacement { .. }
        | Action::RestoreName { .. }
        | Action::Unpause { .. }
        | Action::RemoveStranger { .. } => None,
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

    /// Runs every action; returns the failures (empty when all went well).
    pub async fn run(&self, plan: &Plan, desired: &[DesiredMember]) -> Vec<Failure> {
        // Owned, not borrowed: the future must be Send for a caller that spawns it (the
        // controller), and rustc cannot prove that of closures over borrowed groups.
        let mut groups: BTreeMap<(String, String), Vec<Action>> = BTreeMap::new();
        for a in &plan.actions {
            groups.entry(key(a)).or_default().push(a.clone());
        }
        let by_name: BTreeMap<(String, String), DesiredMember> = desired
            .iter()
            .map(|m| ((m.team.clone(), m.member.clone()), m.clone()))
            .collect();
        let by_name = Arc::new(by_name);
        stream::iter(groups)
            .map(|((team, member), actions)| {
                let by_name = by_name.clone();
                let span = info_span!("member", team = %team, member = %member);
                async move {
                    // The member's proxy, started by its action and waited for by the create
                    // (or replacement) that follows it in this group, at its release.
                    let mut proxy = None;
                    for (n, a) in actions.iter().enumerate() {
                        let about = about(a);
                        info!(
                            action = about.action,
                            container = about.container,
                            reason = about.reason,
                            detail = about.detail.as_deref(),
                            "running action"
                        );
                        let started = Instant::now();
                        let wanted = by_name.get(&(team.clone(), member.clone()));
                        let launched_next = actions[n + 1..]
                            .iter()
                            .any(|b| matches!(b, Action::Create { .. } | Action::Recreate { .. }));
                        let Carried { released, done } = if let (
                            true,
                            Action::StartEgressProxy {
                                team,
                                member,
                                policy,
                                ..
                            },
                        ) = (launched_next, a)
                        {
                            Carried {
                                done: self
                                    .begin_egress_proxy(wanted, team, member, policy)
                                    .map(|starting| proxy = Some(starting)),
                                released: None,
                            }
                        } else {
                            self.carry_out(a, wanted, &mut proxy).await
                        };
                        for e in events_of(a, released.as_deref(), done.as_ref().err()) {
                            crate::events::record(&self.rt.state_dir, self.rt.owner, &e);
                        }
                        if let Err(error) = done {
                            if let Some(m) = wanted {
                                self.record_failed_start(a, m, &error);
                            }
                            // At info: the failure is returned and the caller says it (apply
                            // prints it; the controller logs it at warn), so a person at the
                            // default level does not read it twice. Named here too, for when
                            // the span is not recorded.
                            info!(
                                team = %team,
                                member = %member,
                                action = about.action,
                                container = about.container,
                                error = %error,
                                elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
                                "action failed; the member's next actions are skipped"
                            );
                            self.progress.step(&team, &member, Step::Failed);
                            return Some(Failure {
                                team,
                                member,
                                error,
                            });
                        }
                        debug!(
                            action = about.action,
                            elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
                            "action done"
                        );
                    }
                    None
                }
                .instrument(span)
            })
            .buffer_unordered(self.concurrency.max(1))
            .filter_map(|f| async move { f })
            .collect()
            .await
    }

    /// Carries out an action; with the container whose command it let run, if it got that far
    /// (its event names it, even when a later step failed).
    async fn carry_out(
        &self,
        a: &Action,
        wanted: Option<&DesiredMember>,
        proxy: &mut Option<ProxyStarting>,
    ) -> Carried {
        match a {
            Action::Create { member } => Carried::launched(self.create(member, proxy).await),
            // A replacement without a gap in safety: the new container is created under a
            // temporary name, labelled with the id it replaces, verified and released; only
            // then is the old one removed and the new one renamed. A crash anywhere leaves a
            // state the planner finishes or undoes (see `plan`).
            Action::Recreate { member, old, .. } => {
                match self.launch_replacement(member, old, proxy).await {
                    Ok(id) => Carried {
                        done: self.finish_replacement(member, old, &id).await,
                        released: Some(id),
                    },
                    Err(e) => Carried::launched(Err(e)),
                }
            }
            Action::Start {
                team,
                member,
                container,
                reason,
            } => {
                // The planner starts only members the manifests want.
                let Some(m) = wanted else {
                    return Carried::launched(Err(ActionError::Session {
                        session: member.clone(),
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
            Action::MakeTranscriptDir { .. }
            | Action::RemoveOrphan { .. }
            | Action::RemoveDuplicate { .. }
            | Action::RemoveStranger { .. }
            | Action::Unpause { .. }
            | Action::FinishReplacement { .. }
            | Action::RestoreName { .. }
            | Action::StartSession { .. }
            | Action::Promote { .. }
            | Action::StopSession { .. }
            | Action::RollBackPromotion { .. }
            | Action::StartEgressProxy { .. }
            | Action::UpdateEgressPolicy { .. }
            | Action::StartHelperServer { .. }
            | Action::StopHelperServer { .. }
            | Action::ReturnTasks { .. }
            | Action::StopEgressProxy { .. } => Carried {
                done: self.one(a, wanted).await,
                released: None,
            },
        }
    }

    /// Every action but those that bring a member's container up (`carry_out`'s own): the
    /// match only says which family carries it out, so that each family reads on its own.
    async fn one(&self, a: &Action, wanted: Option<&DesiredMember>) -> Result<(), ActionError> {
        match a {
            Action::MakeTranscriptDir { member, path, .. } => {
                self.make_transcript_dir(wanted, member, path)
            }
            // Carried out by `carry_out`, which says what they released.
            Action::Create { .. } | Action::Recreate { .. } | Action::Start { .. } => {
                Box::pin(self.carry_out(a, wanted, &mut None)).await.done
            }
            Action::RemoveOrphan {
                team,
                member,
                container,
                ..
            }
            | Action::RemoveDuplicate {
                team,
                member,
                container,
            } => self.remove_recorded(team, member, container).await,
            Action::RemoveStranger {
                team,
                member,
                container,
            } => self.remove_stranger(team, member, container).await,
            Action::Unpause {
                team,
                member,
                container,
            } => self.unpause(team, member, container).await,
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
            } => self.rename(team, member, container, name).await,
            Action::StartSession { session, resume } => self.start_session(session, resume).await,
            Action::Promote {
                session,
                containers,
                journal,
                resume,
            } => {
                self.promote(session, containers, journal.as_deref(), resume)
                    .await?;
                // The member's work is the session's now.
                let (from, to) = (
                    Actor::Member(session.name.clone()),
                    Actor::Main(session.name.clone()),
                );
                self.board_change(&session.team, &session.name, |b| {
                    b.hand_over(&from, &to, "promoted to a main session")
                })
            }
            Action::StopSession {
                team,
                session,
                socket,
                taken_over_by,
            } => {
                self.stop_session(session, socket).await?;
                // What it held goes to its heir, or back to todo.
                let me = Actor::Main(session.clone());
                self.board_change(team, session, |b| match taken_over_by {
                    Some(heir) => b.hand_over(
                        &me,
                        &Actor::Main(heir.clone()),
                        &format!("main session {session} was taken over by {heir}"),
                    ),
                    None => b.give_back(&me, &format!("main session {session} stopped")),
                })
            }
            Action::RollBackPromotion { journal } => self.roll_back(journal),
            Action::StartEgressProxy {
                team,
                member,
                policy,
                ..
            } => self.start_egress_proxy(wanted, team, member, policy).await,
            Action::UpdateEgressPolicy {
                team,
                member,
                policy,
            } => self.update_egress_policy(wanted, team, member, policy),
            Action::StopEgressProxy { team, member } => self.stop_egress_proxy(team, member).await,
            Action::StartHelperServer { team, member } => {
                self.start_helper_server(wanted, team, member).await
            }
            Action::StopHelperServer { team, member } => {
                self.stop_helper_server(team, member).await
            }
            Action::ReturnTasks { team, member, why } => self.return_tasks(team, member, why),
        }
    }

    /// Makes a member's transcript folder. The member's own: it writes its transcript there
    /// as the user it runs as.
    fn make_transcript_dir(
        &self,
        wanted: Option<&DesiredMember>,
        member: &str,
        path: &Path,
    ) -> Result<(), ActionError> {
        let owner = match wanted {
            Some(m) => self.rt.member_owner(m)?,
            None => self.rt.owner,
        };
        files::member_dir(path, self.rt.owner, owner).map_err(|source| ActionError::Io {
            member: member.to_string(),
            path: path.to_path_buf(),
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

    /// Starts a main session's terminal on the host.
    async fn start_session(
        &self,
        session: &DesiredSession,
        resume: &[ResumeEntry],
    ) -> Result<(), ActionError> {
        let (s, resume, owner) = (session.clone(), resume.to_vec(), self.rt.owner);
        blocking(&session.name, move || sessions::start(&s, owner, &resume))
            .await?
            .map_err(|source| session_step(&session.name, source))
    }

    /// Turns a member into a main session, step by step (`sessions::promote`).
    async fn promote(
        &self,
        session: &DesiredSession,
        containers: &[ContainerRef],
        journal: Option<&Promotion>,
        resume: &[ResumeEntry],
    ) -> Result<(), ActionError> {
        sessions::promote(self.rt, session, containers, journal, resume)
            .await
            .map_err(|source| session_step(&session.name, source))
    }

    /// Ends a main session's terminal that no manifest wants.
    async fn stop_session(&self, session: &str, socket: &Path) -> Result<(), ActionError> {
        let socket = socket.to_path_buf();
        blocking(session, move || sessions::stop(&socket))
            .await?
            .map_err(|source| session_step(session, source))
    }

    /// Undoes an interrupted promotion that no manifest asks for any more.
    fn roll_back(&self, journal: &Promotion) -> Result<(), ActionError> {
        sessions::roll_back(self.rt, journal).map_err(|source| session_step(&journal.name, source))
    }

    /// Starts a member's egress proxy, as the member's user, once the certificates and
    /// secrets its policy names are in place.
    async fn start_egress_proxy(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<(), ActionError> {
        let (owner, paths, policy) = self.egress_files(wanted, team, member, policy)?;
        let store_owner = self.rt.owner;
        blocking(member, move || {
            egress::start(&paths, &policy, store_owner, owner)
        })
        .await?
        .map_err(|source| ActionError::Egress {
            member: member.to_string(),
            source,
        })
    }

    /// `start_egress_proxy` for a member whose container is made next: its files are written
    /// now (the team's CA among them, before the container's CA files are), and the proxy is
    /// started on the blocking pool while the container is made; the create waits for it
    /// before the release (`Runtime::launch_with`).
    fn begin_egress_proxy(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<ProxyStarting, ActionError> {
        let (owner, paths, policy) = self.egress_files(wanted, team, member, policy)?;
        let store_owner = self.rt.owner;
        let socket = paths.socket.clone();
        let task =
            tokio::task::spawn_blocking(move || egress::start(&paths, &policy, store_owner, owner));
        Ok(Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(egress::ProxyError::Io {
                    path: socket,
                    source: std::io::Error::other(e),
                })
            })
        }))
    }

    /// Gives a running egress proxy the member's new allowlist (its intercepts first).
    fn update_egress_policy(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<(), ActionError> {
        let (owner, paths, policy) = self.egress_files(wanted, team, member, policy)?;
        egress::write_policy(&paths, &policy, owner).map_err(|source| ActionError::Io {
            member: member.to_string(),
            path: paths.policy.clone(),
            source,
        })
    }

    /// Stops a member's egress proxy and removes its intercepts: no certificate or secret
    /// value outlives the proxy that needed it.
    async fn stop_egress_proxy(&self, team: &str, member: &str) -> Result<(), ActionError> {
        let paths = egress::Paths::new(&self.rt.state_dir, team, member);
        let pid = paths.pid.clone();
        blocking(member, move || {
            egress::stop(&paths).and_then(|()| files::remove_if_present(&paths.intercept))
        })
        .await?
        .map_err(|source| ActionError::Io {
            member: member.to_string(),
            path: pid,
            source,
        })
    }

    /// Starts a member's helper server, as the member's user.
    async fn start_helper_server(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
    ) -> Result<(), ActionError> {
        let owner = self.member_of(wanted, member)?;
        let (state_dir, store_owner) = (self.rt.state_dir.clone(), self.rt.owner);
        let (t, m) = (team.to_string(), member.to_string());
        blocking(member, move || {
            crate::servers::helper::start(&state_dir, &t, &m, store_owner, owner)
        })
        .await?
        .map_err(|source| ActionError::Helpers {
            member: member.to_string(),
            source,
        })
    }

    /// Stops a member's helper server.
    async fn stop_helper_server(&self, team: &str, member: &str) -> Result<(), ActionError> {
        let paths = crate::servers::helper::Paths::new(&self.rt.state_dir, team, member);
        let pid = paths.pid.clone();
        blocking(member, move || crate::servers::helper::stop(&paths))
            .await?
            .map_err(|source| ActionError::Io {
                member: member.to_string(),
                path: pid,
                source,
            })
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
    fn record_failed_start(&self, a: &Action, m: &DesiredMember, error: &ActionError) {
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

    /// The certificates and secrets of a member's intercepted hosts, before its proxy reads
    /// a policy that names them.
    fn write_intercepts(
        &self,
        wanted: Option<&DesiredMember>,
        paths: &egress::Paths,
        policy: &crate::core::intercept::EgressPolicy,
        member_owner: files::Owner,
    ) -> Result<(), ActionError> {
        let Some(m) = wanted else { return Ok(()) };
        let cx = egress::InterceptContext {
            state_dir: &self.rt.state_dir,
            team: &m.team,
            ctl_dir: &m.ctl_dir,
            store_owner: self.rt.owner,
            member: member_owner,
            secret: self.secret,
        };
        egress::write_intercepts(paths, policy, &cx).map_err(|source| ActionError::Egress {
            member: m.member.clone(),
            source,
        })
    }

    /// The user a wanted member runs as (its proxy runs as that user too).
    /// What a proxy starts from or reloads: the member's user, its paths, its intercepts
    /// written, and its policy file.
    fn egress_files(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<(files::Owner, egress::Paths, egress::PolicyFile), ActionError> {
        let owner = self.member_of(wanted, member)?;
        let paths = egress::Paths::new(&self.rt.state_dir, team, member);
        self.write_intercepts(wanted, &paths, policy, owner)?;
        Ok((owner, paths, egress::PolicyFile::new(team, member, policy)))
    }

    fn member_of(
        &self,
        wanted: Option<&DesiredMember>,
        member: &str,
    ) -> Result<files::Owner, ActionError> {
        let m = wanted.ok_or_else(|| ActionError::Session {
            session: member.to_string(),
            message: "an egress proxy was planned for a member no manifest wants".into(),
        })?;
        Ok(self.rt.member_owner(m)?)
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

    /// Returns what `member` held on its team's board to `todo`, saying why.
    fn return_tasks(&self, team: &str, member: &str, why: &str) -> Result<(), ActionError> {
        let who = Actor::Member(member.to_string());
        self.board_change(team, member, |b| b.give_back(&who, why))
    }

    /// A change of `team`'s board made by an action on `subject`.
    fn board_change(
        &self,
        team: &str,
        subject: &str,
        change: impl FnOnce(
            &crate::board::store::Board,
        ) -> Result<Vec<u64>, crate::board::store::BoardError>,
    ) -> Result<(), ActionError> {
        let board = crate::board::store::Board::new(&self.rt.state_dir, team, self.rt.owner);
        change(&board).map(|_| ()).map_err(|e| ActionError::Io {
            member: subject.to_string(),
            path: crate::core::layout::team_run_dir(&self.rt.state_dir, team).join("board"),
            source: std::io::Error::other(e.to_string()),
        })
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
}

/// An action carried out: how it ended, and the container whose command it let run, if it got
/// that far (a replacement is released before its old container is removed, and that can
/// still fail).
struct Carried {
    done: Result<(), ActionError>,
    released: Option<String>,
}

impl Carried {
    /// A create's outcome: its container is released exactly when it succeeded.
    fn launched(r: Result<String, ActionError>) -> Carried {
        match r {
            Ok(id) => Carried {
                done: Ok(()),
                released: Some(id),
            },
            Err(e) => Carried {
                done: Err(e),
                released: None,
            },
        }
    }
}

/// The error of a failed engine call for `member`, for `map_err`.
fn backend_error(member: &str) -> impl FnOnce(BackendError) -> ActionError {
    let member = member.to_string();
    move |source| ActionError::Backend { member, source }
}

/// A failed step of a main session's start, stop, promotion or rollback.
fn session_step(session: &str, source: sessions::SessionError) -> ActionError {
    ActionError::SessionStep {
        session: session.to_string(),
        source: Box::new(source),
    }
}

/// Runs `f` (a terminal, a detached process, their files) off the async workers; a task that
/// panicked or was cancelled is said as a failure of `subject`.
async fn blocking<T: Send + 'static>(
    subject: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ActionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ActionError::Session {
            session: subject.to_string(),
            message: e.to_string(),
        })
}

/// How often ateam restarted a member (by its restart policy), kept in its control folder
/// (read without following a link or opening a FIFO there).
pub fn restarts(ctl_dir: &Path) -> u64 {
    files::read_small(&crate::core::layout::restarts_path(ctl_dir), 64)
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// How much of a transcript folder `status` looks at: a member owns the folder and can make
/// it as deep or as wide as it likes; what lies past these bounds is not counted.
pub const TRANSCRIPT_WALK: files::Bounds = files::Bounds {
    depth: 32,
    entries: 100_000,
};

/// For `status`: the size of a transcript folder and when it last changed. Symlinks are
/// counted as themselves (never their targets), FIFOs are never opened, the walk is
/// bounded (`TRANSCRIPT_WALK`), and the sum stops at `u64::MAX`.
pub fn transcript_usage(dir: &Path) -> (u64, Option<std::time::SystemTime>) {
    let mut size: u64 = 0;
    let mut newest = None;
    let Ok(d) = files::Dir::open(dir) else {
        return (0, None);
    };
    d.walk(TRANSCRIPT_WALK, |e| {
        // Saturating: sparse files on a file system that allows 8 EiB each (tmpfs, xfs,
        // btrfs) cost the member nothing but add up past 64 bits.
        if e.kind != rustix::fs::FileType::Directory {
            size = size.saturating_add(e.len);
        }
        newest = newest.max(e.modified);
    });
    (size, newest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RestartPolicy;
    use crate::plan::Drift;

    fn c() -> ContainerRef {
        ContainerRef {
            id: "0123abcd".into(),
            name: "ateam-t-m".into(),
        }
    }

    #[test]
    fn events_say_what_was_done_and_why_and_a_gate_refusal_is_held() {
        use crate::events::EventKind;
        let restart = Action::Start {
            team: "t".into(),
            member: "m".into(),
            container: c(),
            reason: StartReason::Restart {
                code: 137,
                policy: RestartPolicy::Always,
            },
        };
        let e = event_of(&restart, None, None).unwrap();
        assert_eq!((e.kind, e.member.as_str()), (EventKind::Restarted, "m"));
        assert!(e.reason.contains("after exit 137"), "{}", e.reason);
        assert_eq!(e.container.as_deref(), Some("0123abcd"));
        let held = ActionError::Run(RunError::PolicyViolation {
            member: "m".into(),
            id: "0123abcd".into(),
            stage: "after start",
            violations: vec![],
        });
        assert_eq!(
            event_of(&restart, None, Some(&held)).unwrap().kind,
            EventKind::Held
        );
        let rolled = ActionError::Run(RunError::Rollback {
            cause: Box::new(RunError::Process {
                member: "m".into(),
                id: "0123abcd".into(),
                what: "uid 0".into(),
            }),
            id: "0123abcd".into(),
            rollback: BackendError::NotFound {
                id: "0123abcd".into(),
            },
        });
        assert_eq!(
            event_of(&restart, None, Some(&rolled)).unwrap().kind,
            EventKind::Held
        );
        let other = ActionError::Run(RunError::MissingSecret {
            member: "m".into(),
            name: "KEY".into(),
        });
        let e = event_of(&restart, None, Some(&other)).unwrap();
        assert_eq!(e.kind, EventKind::Failed);
        assert!(e.reason.contains("secretEnv `KEY`"), "{}", e.reason);
        let stop = Action::StopEgressProxy {
            team: "t".into(),
            member: "m".into(),
        };
        assert_eq!(event_of(&stop, None, None), None);
        assert_eq!(
            event_of(&stop, None, Some(&other)).unwrap().kind,
            EventKind::Failed
        );
    }

    /// A replacement released, then unable to remove its old container: its start is an
    /// event naming it (the soak found a start with none), and the failure follows.
    #[test]
    fn a_replacement_released_then_failed_says_its_start() {
        use crate::events::EventKind;
        let d = crate::plan::tests::want(vec![crate::plan::tests::member("m")]);
        let recreate = Action::Recreate {
            member: Box::new(d.members[0].clone()),
            old: c(),
            reason: Drift::Dead,
        };
        let gone = ActionError::Backend {
            member: "m".into(),
            source: BackendError::NotFound {
                id: "0123abcd".into(),
            },
        };
        let said = |released, failed| {
            events_of(&recreate, released, failed)
                .into_iter()
                .map(|e| (e.kind, e.container))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            said(Some("feed0001"), Some(&gone)),
            vec![
                (EventKind::Created, Some("feed0001".to_string())),
                (EventKind::Failed, Some("0123abcd".to_string())),
            ]
        );
        let e = &events_of(&recreate, Some("feed0001"), Some(&gone))[0];
        assert!(e.reason.contains("to replace 0123abcd"), "{}", e.reason);
        assert_eq!(
            said(None, Some(&gone)),
            vec![(EventKind::Failed, Some("0123abcd".to_string()))]
        );
        assert_eq!(
            said(Some("feed0001"), None),
            vec![(EventKind::Replaced, Some("feed0001".to_string()))]
        );
        // A restart released, then unable to count itself: the restart is said too.
        let restart = Action::Start {
            team: "t".into(),
            member: "m".into(),
            container: c(),
            reason: StartReason::NotReleased,
        };
        let kinds: Vec<_> = events_of(&restart, Some("0123abcd"), Some(&gone))
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, vec![EventKind::Released, EventKind::Failed]);
    }

    #[test]
    fn an_action_is_logged_with_its_container_and_reason() {
        let start = Action::Start {
            team: "t".into(),
            member: "m".into(),
            container: c(),
            reason: StartReason::Restart {
                code: 3,
                policy: RestartPolicy::OnFailure,
            },
        };
        assert_eq!(
            about(&start),
            About {
                action: "start",
                container: Some("0123abcd"),
                reason: "restart",
                detail: Some("exited 3, restart policy OnFailure".into()),
            }
        );
        let dir = Action::MakeTranscriptDir {
            team: "t".into(),
            member: "m".into(),
            path: "/s/members/m".into(),
        };
        assert_eq!(
            about(&dir),
            About {
                action: "makeTranscriptDir",
                container: None,
                reason: "missing",
                detail: None,
            }
        );
    }

    /// The names in the log are the plan's own (`diff -o json`), so the two can be joined.
    #[test]
    fn logged_names_are_the_plans_json_names() {
        let (team, member) = (String::from("t"), String::from("m"));
        let actions = [
            Action::MakeTranscriptDir {
                team: team.clone(),
                member: member.clone(),
                path: "/x".into(),
            },
            Action::StartEgressProxy {
                team: team.clone(),
                member: member.clone(),
                socket: "/x.sock".into(),
                policy: Default::default(),
            },
            Action::UpdateEgressPolicy {
                team: team.clone(),
                member: member.clone(),
                policy: Default::default(),
            },
            Action::StopEgressProxy {
                team: team.clone(),
                member: member.clone(),
            },
            Action::RemoveOrphan {
                team: team.clone(),
                member: member.clone(),
                container: c(),
                why: None,
            },
            Action::RemoveDuplicate {
                team: team.clone(),
                member: member.clone(),
                container: c(),
            },
            Action::RemoveStranger {
                team: team.clone(),
                member: member.clone(),
                container: c(),
            },
            Action::FinishReplacement {
                team: team.clone(),
                member: member.clone(),
                container: c(),
                name: "n".into(),
            },
            Action::RestoreName {
                team: team.clone(),
                member: member.clone(),
                container: c(),
                name: "n".into(),
            },
            Action::Unpause {
                team,
                member,
                container: c(),
            },
        ];
        for a in &actions {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json["action"], about(a).action, "{json}");
        }
        for d in [
            Drift::Spec { changes: vec![] },
            Drift::SpecHash {
                from: "a".into(),
                to: "b".into(),
            },
            Drift::Policy { violations: vec![] },
            Drift::Dead,
        ] {
            let json = serde_json::to_value(&d).unwrap();
            assert_eq!(json["kind"], d.kind(), "{json}");
        }
        for r in [
            StartReason::NeverStarted,
            StartReason::NotReleased,
            StartReason::Restart {
                code: 1,
                policy: RestartPolicy::Always,
            },
        ] {
            // Externally tagged: a name, or an object with one key.
            let json = serde_json::to_value(r).unwrap();
            let name = json
                .as_str()
                .map(str::to_string)
                .or_else(|| json.as_object()?.keys().next().cloned())
                .unwrap();
            assert_eq!(name, r.name(), "{json}");
        }
    }

    #[test]
    fn sparse_transcript_sizes_stop_at_the_top() {
        // tmpfs allows files of 8 EiB; where /dev/shm is missing or smaller, nothing to prove.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        for i in 0..3 {
            let f = std::fs::File::create(dir.path().join(format!("sparse-{i}"))).unwrap();
            if f.set_len(i64::MAX as u64).is_err() {
                return;
            }
        }
        assert_eq!(transcript_usage(dir.path()).0, u64::MAX);
    }

    /// The executor against the fake engine (`backend::fake`) on the runtime's rig: the engine
    /// calls of a replacement and a create, stopped at each step, and the events they leave.
    mod with_fake {
        use super::*;
        use crate::backend::fake::{Call, Fault};
        use crate::core::container::ContainerState;
        use crate::events::EventKind;
        use crate::runtime::rig::{Init, Rig, TEAM};

        /// The old container a replacement replaces; the new one is the fake's first.
        const OLD: &str = "01d000000001";
        const NEW: &str = "fake00000001";

        fn no_secret(_: &str) -> Option<String> {
            None
        }

        async fn run(rig: &Rig, plan: &Plan) -> Vec<Failure> {
            let ex = Executor {
                rt: &rig.rt,
                concurrency: 1,
                secret: &no_secret,
                progress: &Quiet,
            };
            ex.run(plan, &rig.desired.members).await
        }

        fn plan(action: Action) -> Plan {
            Plan {
                actions: vec![action],
                ..Plan::default()
            }
        }

        /// The member's old container, running, and a plan that replaces it.
        fn replacing(rig: &Rig) -> Plan {
            rig.fake
                .add(rig.existing(OLD, ContainerState::Running, None));
            plan(Action::Recreate {
                member: Box::new(rig.member.clone()),
                old: ContainerRef {
                    id: OLD.into(),
                    name: rig.member.spec.name.clone(),
                },
                reason: Drift::Dead,
            })
        }

        fn events(rig: &Rig) -> Vec<(EventKind, Option<String>)> {
            crate::events::read(&rig.rt.state_dir, TEAM)
                .into_iter()
                .map(|e| (e.kind, e.container))
                .collect()
        }

        fn temp(rig: &Rig) -> String {
            replacement_name(&rig.member.spec.name)
        }

        /// The calls of a replacement up to and with the check after start.
        fn launched(rig: &Rig) -> Vec<Call> {
            vec![
                Call::FindByName { name: temp(rig) },
                Call::Create { name: temp(rig) },
                Call::Inspect { id: NEW.into() },
                Call::Start { id: NEW.into() },
                Call::Inspect { id: NEW.into() },
            ]
        }

        fn names(rig: &Rig) -> Vec<(String, String)> {
            rig.fake
                .containers()
                .into_values()
                .map(|c| (c.summary.id, c.summary.name))
                .collect()
        }

        fn failed_start_recorded(rig: &Rig) -> bool {
            Record::load(&rig.member.record)
                .last_exit
                .is_some_and(|l| l.reason == ExitReason::StartFailed)
        }

        #[tokio::test]
        async fn a_replacement_releases_the_new_then_removes_the_old_and_takes_its_name() {
            let rig = Rig::new();
            let init = Init::spawn();
            rig.fake.set_pid(Some(init.pid()));
            let plan = replacing(&rig);
            let failures = run(&rig, &plan).await;
            assert!(failures.is_empty(), "{failures:?}");
            let mut want = launched(&rig);
            want.extend([
                Call::Remove { id: OLD.into() },
                Call::Rename {
                    id: NEW.into(),
                    name: rig.member.spec.name.clone(),
                },
            ]);
            assert_eq!(rig.fake.calls(), want);
            assert_eq!(
                names(&rig),
                vec![(NEW.into(), rig.member.spec.name.clone())]
            );
            assert!(rig.released().unwrap().starts_with(NEW));
            assert_eq!(events(&rig), vec![(EventKind::Replaced, Some(NEW.into()))]);
        }

        #[tokio::test]
        async fn a_replacement_whose_create_fails_leaves_the_old_alone() {
            let rig = Rig::new();
            rig.fake.fail(Fault::nth("create", 1));
            let plan = replacing(&rig);
            let failures = run(&rig, &plan).await;
            assert!(
                matches!(
                    failures[..],
                    [Failure {
                        error: ActionError::Run(RunError::Backend { .. }),
                        ..
                    }]
                ),
                "{failures:?}"
            );
            assert_eq!(rig.fake.calls(), launched(&rig)[..2]);
            assert_eq!(
                names(&rig),
                vec![(OLD.into(), rig.member.spec.name.clone())]
            );
            assert_eq!(events(&rig), vec![(EventKind::Failed, Some(OLD.into()))]);
            assert!(failed_start_recorded(&rig));
        }

        #[tokio::test]
        async fn a_replacement_whose_start_fails_removes_the_new_one() {
            let rig = Rig::new();
            rig.fake.fail(Fault::nth("start", 1));
            let plan = replacing(&rig);
            let failures = run(&rig, &plan).await;
            assert_eq!(failures.len(), 1);
            let mut want = launched(&rig)[..4].to_vec();
            want.push(Call::Remove { id: NEW.into() });
            assert_eq!(rig.fake.calls(), want);
            assert_eq!(
                names(&rig),
                vec![(OLD.into(), rig.member.spec.name.clone())]
            );
            assert_eq!(rig.released(), None);
            assert_eq!(events(&rig), vec![(EventKind::Failed, Some(OLD.into()))]);
        }

        /// The gate holds a replacement that differs from the policy once started: it is
        /// removed before its command ran, and the event says held.
        #[tokio::test]
        async fn a_replacement_that_fails_its_check_after_start_is_held_and_removed() {
            let rig = Rig::new();
            let init = Init::spawn();
            rig.fake.set_pid(Some(init.pid()));
            rig.fake.doctor(|i| {
                if i.summary.id == NEW && i.summary.state == ContainerState::Running {
                    i.effective.privileged = true;
                }
            });
            let plan = replacing(&rig);
            let failures = run(&rig, &plan).await;
            assert!(
                matches!(
                    failures[..],
                    [Failure {
                        error: ActionError::Run(RunError::PolicyViolation {
                            stage: "after start",
                            ..
                        }),
                        ..
                    }]
                ),
                "{failures:?}"
            );
            let mut want = launched(&rig);
            want.push(Call::Remove { id: NEW.into() });
            assert_eq!(rig.fake.calls(), want);
            assert_eq!(rig.released(), None, "the gate never opened");
            assert_eq!(
                names(&rig),
                vec![(OLD.into(), rig.member.spec.name.clone())]
            );
            assert_eq!(events(&rig), vec![(EventKind::Held, Some(OLD.into()))]);
        }

        /// Released, then unable to remove the old container: both stay, the new one under
        /// its temporary name, and the events say its start before the failure.
        #[tokio::test]
        async fn a_replacement_whose_old_cannot_be_removed_says_the_start_then_the_failure() {
            let rig = Rig::new();
            let init = Init::spawn();
            rig.fake.set_pid(Some(init.pid()));
            rig.fake
                .fail(Fault::when(|c| *c == Call::Remove { id: OLD.into() }));
            let plan = replacing(&rig);
            let failures = run(&rig, &plan).await;
            assert_eq!(failures.len(), 1, "{failures:?}");
            let mut want = launched(&rig);
            want.push(Call::Remove { id: OLD.into() });
            assert_eq!(rig.fake.calls(), want, "no rename");
            assert_eq!(
                names(&rig),
                vec![
                    (OLD.into(), rig.member.spec.name.clone()),
                    (NEW.into(), temp(&rig)),
                ]
            );
            assert!(rig.released().unwrap().starts_with(NEW));
            assert_eq!(
                events(&rig),
                vec![
                    (EventKind::Created, Some(NEW.into())),
                    (EventKind::Failed, Some(OLD.into())),
                ]
            );
        }

        /// A leftover replacement of an earlier attempt (ours, holding the temporary name) is
        /// removed before the new one is made.
        #[tokio::test]
        async fn a_replacement_removes_the_leftover_of_an_earlier_attempt_first() {
            let rig = Rig::new();
            let init = Init::spawn();
            rig.fake.set_pid(Some(init.pid()));
            let mut stale = rig.existing("57a1e0000001", ContainerState::Created, None);
            stale.summary.name = temp(&rig);
            rig.fake.add(stale);
            let plan = replacing(&rig);
            assert!(run(&rig, &plan).await.is_empty());
            let calls = rig.fake.calls();
            assert_eq!(
                calls[..3],
                [
                    Call::FindByName { name: temp(&rig) },
                    Call::Remove {
                        id: "57a1e0000001".into()
                    },
                    Call::Create { name: temp(&rig) },
                ]
            );
        }

        #[tokio::test]
        async fn a_failed_create_is_an_event_and_the_members_last_exit() {
            let rig = Rig::new();
            rig.fake.fail(Fault::nth("create", 1));
            let plan = plan(Action::Create {
                member: Box::new(rig.member.clone()),
            });
            let failures = run(&rig, &plan).await;
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert_eq!(
                rig.fake.calls(),
                vec![Call::Create {
                    name: rig.member.spec.name.clone()
                }]
            );
            assert_eq!(events(&rig), vec![(EventKind::Failed, None)]);
            assert!(failed_start_recorded(&rig));
            assert!(rig.fake.containers().is_empty());
        }

        /// A create that finds its name held by an unfinished container of this store removes
        /// it and creates again; one of anyone else is left alone and the create fails.
        #[tokio::test]
        async fn a_create_takes_its_name_back_only_from_an_unfinished_container_of_ours() {
            let rig = Rig::new();
            let init = Init::spawn();
            rig.fake.set_pid(Some(init.pid()));
            let name = rig.member.spec.name.clone();
            rig.fake
                .add(rig.existing("0dd000000001", ContainerState::Created, None));
            let create = plan(Action::Create {
                member: Box::new(rig.member.clone()),
            });
            assert!(run(&rig, &create).await.is_empty());
            assert_eq!(
                rig.fake.calls(),
                vec![
                    Call::Create { name: name.clone() },
                    Call::FindByName { name: name.clone() },
                    Call::Remove {
                        id: "0dd000000001".into()
                    },
                    Call::Create { name: name.clone() },
                    Call::Inspect { id: NEW.into() },
                    Call::Start { id: NEW.into() },
                    Call::Inspect { id: NEW.into() },
                ]
            );
            assert_eq!(events(&rig), vec![(EventKind::Created, Some(NEW.into()))]);

            let rig = Rig::new();
            let mut foreign = rig.existing("f0e000000001", ContainerState::Running, None);
            foreign.summary.labels.clear();
            rig.fake.add(foreign);
            let create = plan(Action::Create {
                member: Box::new(rig.member.clone()),
            });
            let failures = run(&rig, &create).await;
            assert!(
                matches!(
                    failures[..],
                    [Failure {
                        error: ActionError::Run(RunError::Backend {
                            source: BackendError::NameConflict { .. },
                            ..
                        }),
                        ..
                    }]
                ),
                "{failures:?}"
            );
            assert_eq!(
                rig.fake.calls(),
                vec![
                    Call::Create { name: name.clone() },
                    Call::FindByName { name },
                ]
            );
            assert_eq!(rig.fake.containers().len(), 1, "never touched");
        }
    }
}
