//! Apply: judge the manifests, take the store's lock, look, plan, check what can be checked
//! before any change, carry out the plan, record what was applied, and look once more to
//! say which members do not run and why.

use std::collections::BTreeMap;

use super::{App, AppError, Look, Manifests};
use crate::backend::{BackendError, EngineKind, Summary, logs_text};
use crate::core::container::{is_replacement, labels};
use crate::core::layout;
use crate::execute::{Executor, Failure, Progress, default_concurrency};
use crate::model::Model;
use crate::model::RestartPolicy;
use crate::plan::{ContainerState, Finding, Plan, PlanOptions, Refusal};
use crate::store::{Record, StoreError};

/// How to apply, beyond the manifests.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Remove ateam's containers that no manifest wants, and strangers.
    pub prune: bool,
    /// How many members are brought up at once; default `default_concurrency()`.
    pub concurrency: Option<usize>,
    /// Fail at once when another command holds the store's lock.
    pub no_wait: bool,
    /// Bring up this member alone, and never a main session (`PlanOptions::only`): the
    /// helper server's apply of one requested member.
    pub only: Option<String>,
}

impl ApplyOptions {
    /// What the planner is told of these options.
    pub(crate) fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            prune: self.prune,
            only: self.only.clone(),
            ..PlanOptions::default()
        }
    }
}

/// What an apply did, for the caller to render.
#[derive(Debug)]
pub struct ApplyReport {
    /// The engine applied on.
    pub engine: EngineKind,
    /// Members the manifests want.
    pub members: usize,
    /// What the plan leaves alone and a person should know: orphans, strangers, conflicts,
    /// retained transcripts.
    pub left_alone: Vec<Finding>,
    /// What it came to.
    pub outcome: Outcome,
}

/// How an apply ended.
#[derive(Debug)]
pub enum Outcome {
    /// The machine already matched.
    NoChanges,
    /// Refused before anything changed.
    Refused(Vec<Failure>),
    /// Carried out. `failures`: actions that failed; `not_running`: members that are not up
    /// afterwards (beyond those failures), with why; `finished`: members done with exit 0
    /// whose restart policy leaves them done.
    Applied {
        /// The actions that failed.
        failures: Vec<Failure>,
        /// Members not up afterwards, beyond the failures.
        not_running: Vec<NotRunning>,
        /// `(team, member)` done with exit 0, whose restart policy leaves them done.
        finished: Vec<(String, String)>,
    },
}

/// A member the manifests want that is not running after an apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRunning {
    /// Team name.
    pub team: String,
    /// Member name.
    pub member: String,
    /// Why: its exit code and last output, its state, or that it has no container.
    pub why: String,
}

impl ApplyReport {
    /// Everything the manifests want runs (or finished as its policy allows).
    pub fn converged(&self) -> bool {
        match &self.outcome {
            Outcome::NoChanges => true,
            Outcome::Refused(_) => false,
            Outcome::Applied {
                failures,
                not_running,
                ..
            } => failures.is_empty() && not_running.is_empty(),
        }
    }
}

/// Applies `manifests`. `secret` looks up a `secretEnv` value; `waiting` is told who holds
/// the lock when apply has to wait for it; `judged` is shown the manifests as judged under
/// the lock, before any change.
pub async fn apply(
    app: &App,
    manifests: &Manifests,
    o: ApplyOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
    judged: impl FnOnce(&Model),
) -> Result<ApplyReport, AppError> {
    let (mut lock, desired, early) = match app.store.try_lock_existing() {
        // Free, as it mostly is: judged once, under it, while the engine lists what it holds
        // of this store (the look takes that list if the judged teams are on that engine).
        Some(lock) => {
            let early = app.begin_look();
            (lock, app.judge(manifests)?, early)
        }
        None => {
            // Refused manifests are refused before the store is touched or waited for...
            let before = app.store.teams()?;
            let first = app.judge_against(manifests, &before)?;
            let lock = app.store.lock(o.no_wait, waiting)?;
            // ...and judged again under the lock, against the teams an apply that held it
            // stored (when one did: the same teams are judged the same).
            let applied = app.store.teams()?;
            let desired = if applied == before {
                first
            } else {
                app.judge_against(manifests, &applied)?
            };
            (lock, desired, None)
        }
    };
    judged(&desired);
    lock.announce().map_err(|source| StoreError::Io {
        path: layout::lock_path(&app.host.state_dir),
        source,
    })?;
    let started = std::time::SystemTime::now();
    let look = prepare_from(app, &desired, o.plan_options(), secret, early).await?;
    let report = carry_out(app, &desired, look, &o, secret, progress).await?;
    // What the proxies refused before this apply is history for `status`.
    for t in &desired.teams {
        for m in &t.members {
            let paths = crate::servers::egress::Paths::new(&app.host.state_dir, &t.name, &m.name);
            crate::servers::egress::mark_applied(&paths, started).map_err(|source| {
                AppError::Io {
                    path: paths.policy.clone(),
                    source,
                }
            })?;
        }
    }
    Ok(report)
}

/// A login keeper runs while a member's proxy injects a login (`logins::keeper`): it
/// refreshes the login ahead of its end and gives the proxies the new token.
fn keep_logins(app: &App, desired: &crate::plan::spec::DesiredState) {
    let uses = desired.members.iter().any(|m| {
        m.egress.as_ref().is_some_and(|e| {
            !crate::core::intercept::injected_logins(&e.policy.intercept).is_empty()
        })
    });
    if uses && let Err(e) = crate::app::login_keeper::ensure(&app.host.state_dir, app.owner) {
        tracing::warn!(error = %e, "the login keeper did not start");
    }
}

/// A changed value of an injected secret reaches its running proxy (no action of the plan:
/// the planner never sees secret values).
fn refresh_injected(
    app: &App,
    desired: &crate::plan::spec::DesiredState,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
) {
    for m in &desired.members {
        let Some(e) = &m.egress else { continue };
        let paths = crate::servers::egress::Paths::new(&app.host.state_dir, &m.team, &m.member);
        let logins = (app.host.state_dir.as_path(), app.owner);
        if let Err(err) = crate::servers::egress::refresh_secrets(&paths, &e.policy, secret, logins)
        {
            // A missing value is refused where the member is created or its proxy started;
            // here it only means the proxy keeps what it has.
            tracing::warn!(member = %m.member, error = %err, "injected secrets not refreshed");
        }
    }
}

/// Makes the machine match `desired` once: look, plan, check, carry out, record, look again.
/// The caller holds the store's lock.
pub async fn converge(
    app: &App,
    desired: &Model,
    o: ApplyOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
) -> Result<ApplyReport, AppError> {
    let look = prepare(app, desired, o.plan_options(), secret).await?;
    carry_out(app, desired, look, &o, secret, progress).await
}

/// The first half of a converge: look and plan with `opts`, refuse a plan the planner
/// refuses, and what needs no action (an injected secret's new value, a stranger's event).
/// The plan in the `Look` is final: `carry_out` runs it as it is. (The controller records
/// the restarts it paces from it in between.)
pub async fn prepare(
    app: &App,
    desired: &Model,
    opts: PlanOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Look, AppError> {
    prepare_from(app, desired, opts, secret, None).await
}

/// `prepare`, with the list `early` asked ahead (`App::begin_look`).
async fn prepare_from(
    app: &App,
    desired: &Model,
    opts: PlanOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    early: Option<crate::app::EarlyList>,
) -> Result<Look, AppError> {
    for t in &desired.teams {
        app.store
            .check_member_records(&t.name, opts.only.as_deref())?;
    }
    let look = app.look_from(desired, opts, early).await?;
    if let Some(r) = look.plan.refusals.first() {
        return Err(refused(r));
    }
    refresh_injected(app, &look.desired, secret);
    keep_logins(app, &look.desired);
    record_strangers(app, &look.plan);
    Ok(look)
}

/// A refusal of the planner, as the error apply returns.
fn refused(r: &Refusal) -> AppError {
    match r {
        Refusal::NoMainSession { team, members } => AppError::NoMainSession {
            team: team.clone(),
            members: members.clone(),
        },
    }
}

/// The second half of a converge: check what can be checked before any change, record the
/// teams, carry out `look.plan`, forget the dropped helpers, and say who does not run.
pub(crate) async fn carry_out(
    app: &App,
    desired: &Model,
    look: Look,
    o: &ApplyOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
) -> Result<ApplyReport, AppError> {
    let mut report = ApplyReport {
        engine: look.info.kind,
        members: look.desired.members.len(),
        left_alone: left_alone(&look.plan),
        outcome: Outcome::NoChanges,
    };
    if look.plan.is_noop() {
        for t in &desired.teams {
            app.store.save_team(t)?;
        }
        app.remember_engine(&desired.teams, look.backend.as_ref())?;
        forget_dropped(app, &look, &[]);
        return Ok(report);
    }
    let rt = app.runtime(&look);
    let exec = Executor {
        rt: &rt,
        concurrency: o.concurrency.unwrap_or_else(default_concurrency),
        secret,
        progress,
    };
    let refused = exec.preflight(&look.plan, &look.desired.members).await;
    if !refused.is_empty() {
        report.outcome = Outcome::Refused(refused);
        return Ok(report);
    }
    // Recorded before the members come up, not after: a member's command runs from its
    // release on, and `exec`, `logs` and the helper server find it through this record.
    for t in &desired.teams {
        app.store.save_team(t)?;
    }
    app.remember_engine(&desired.teams, look.backend.as_ref())?;
    let failures = exec.run(&look.plan, &look.desired.members).await;
    keep_logins(app, &look.desired);
    forget_dropped(app, &look, &failures);
    let (not_running, finished) = not_running(&look, &failures, o.only.is_some()).await?;
    report.outcome = Outcome::Applied {
        failures,
        not_running,
        finished,
    };
    Ok(report)
}

/// What the plan leaves alone and a person should know (a finished member is no news).
fn left_alone(plan: &Plan) -> Vec<Finding> {
    plan.findings
        .iter()
        .filter(|f| match f {
            Finding::Orphan { .. }
            | Finding::OrphanSession { .. }
            | Finding::Stranger { .. }
            | Finding::Conflict { .. }
            | Finding::RetainedTranscript { .. } => true,
            // Said by `suspend`; status shows it on the member's row.
            Finding::Finished { .. } | Finding::Suspended { .. } => false,
        })
        .cloned()
        .collect()
}

/// Wait-until-running: one more look, and the reason for every member that is not up
/// (beyond `failures`); with them, the members finished as their restart policy allows.
/// A list call is enough: states only, no inspects. A look at one member (`narrowed`) asks
/// for its recorded containers alone: a list walks all of the engine's, and the store's lock
/// is held meanwhile (Podman, 200 members, just after a death: 200 ms).
async fn not_running(
    look: &Look,
    failures: &[Failure],
    narrowed: bool,
) -> Result<(Vec<NotRunning>, Vec<(String, String)>), AppError> {
    let after = if narrowed {
        recorded_summaries(look).await?
    } else {
        let ours = BTreeMap::from([(labels::STORE.to_string(), look.desired.store.clone())]);
        look.backend.list(&ours).await?
    };
    let mut not_running = Vec::new();
    let mut finished = Vec::new();
    for m in &look.desired.members {
        // Down because the person asked (`ateam suspend`), or failed and said so already.
        if m.suspended.is_some()
            || failures
                .iter()
                .any(|f| f.team == m.team && f.member == m.member)
        {
            continue;
        }
        let record = Record::load(&m.record);
        let c = after.iter().find(|c| {
            record.ids.contains(&c.id) && !is_replacement(&m.spec.name, &c.name, &c.labels)
        });
        let why = match c.map(|c| (c, c.state)) {
            Some((_, ContainerState::Running)) => continue,
            // Done already, and its restart policy leaves it done: not a failure.
            Some((_, ContainerState::Exited { code: 0 })) if m.restart != RestartPolicy::Always => {
                finished.push((m.team.clone(), m.member.clone()));
                continue;
            }
            Some((c, ContainerState::Exited { code })) => {
                let logs = logs_text(look.backend.as_ref(), &c.id, 10)
                    .await
                    .unwrap_or_default();
                format!(
                    "exited with code {code}; last output:\n{}",
                    logs.lines()
                        .map(|l| format!("    {l}\n"))
                        .collect::<String>()
                )
            }
            Some((c, state)) => format!("is {state:?} ({})", c.name),
            None => "has no container".to_string(),
        };
        not_running.push(NotRunning {
            team: m.team.clone(),
            member: m.member.clone(),
            why,
        });
    }
    Ok((not_running, finished))
}

/// The containers the records of the look's members name, as the engine has them now.
async fn recorded_summaries(look: &Look) -> Result<Vec<Summary>, AppError> {
    let mut out = Vec::new();
    for m in &look.desired.members {
        for id in Record::load(&m.record).ids {
            match look.backend.inspect(&id).await {
                Ok(i) => out.push(i.summary),
                Err(BackendError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(out)
}

/// A stranger is an event once per container, not at every reconcile that sees it again.
fn record_strangers(app: &App, plan: &Plan) {
    use crate::events::{Event, EventKind, record, stranger_recorded};
    for f in &plan.findings {
        if let Finding::Stranger {
            team,
            member,
            container,
        } = f
            && !stranger_recorded(&app.host.state_dir, team, &container.id)
        {
            let why = format!(
                "container {} has this store's labels but ateam did not make it: never adopted or started (--prune removes it)",
                container.name
            );
            let e =
                Event::new(team, member, EventKind::StrangerSeen, &why).container(&container.id);
            record(&app.host.state_dir, app.owner, &e);
        }
    }
}

/// After a converge: forget the requested members that are no longer wanted (those whose
/// removal did not fail). (Their helper servers are the plan's: `StopHelperServer`.)
fn forget_dropped(app: &App, look: &Look, failures: &[Failure]) {
    for d in &look.dropped {
        if failures
            .iter()
            .any(|f| f.team == d.team && f.member == d.member)
        {
            continue;
        }
        match crate::requests::forget(&app.host.state_dir, &d.team, &d.member) {
            Ok(()) => {
                tracing::info!(team = %d.team, member = %d.member, why = %d.why, "requested member dropped")
            }
            Err(e) => tracing::warn!(error = %e, "forgetting a requested member"),
        }
    }
}
