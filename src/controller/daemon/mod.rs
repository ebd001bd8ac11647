//! `ateam controller`: the long-running loop. Keys are the manifests (reload them) and each
//! team (converge it); the sources that schedule them are the manifest watch, the engine's
//! event stream and a periodic resync. Each team's reconcile is the very `converge` that
//! `ateam apply` runs, under the same store lock, so the two never fight.
//!
//! Keyed by team, not by member: a team is planned from its whole observed state, and its
//! members are brought up side by side within one reconcile; restarts are paced per member
//! by the crash-loop policy all the same.

mod probes;
mod restarts;

pub(super) use restarts::Restarts;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::backoff::{CrashLoopConfig, ErrorBackoffConfig};
use super::exits::Exits;
use super::metrics::{Metrics, ReconcileResult, StatusSource};
use super::queue::QueueConfig;
use super::{Controller, Handle, Next};
use crate::app::apply::{ApplyOptions, Outcome, carry_out, prepare};
use crate::app::delete::delete;
use crate::app::{App, AppError, Manifests};
use crate::core::container::{ContainerState, labels};
use crate::execute::Quiet;
use crate::manifest::ManifestError;
use crate::model::{Model, Team};
use crate::plan::{Observed, Plan, PlanOptions};
use crate::store::controller::{self as status, ControllerRecord, LastReconcile};

/// What the controller reconciles.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// Read the manifests again; schedule the teams that changed.
    Manifests,
    /// Bring this team to what its manifests want.
    Team(String),
    /// Bring this member of this team to what its manifests want, looking at it alone (its
    /// death seen by its pidfd, or an engine event naming it): at 200 members, a look at the
    /// whole team made a heal twice as slow. Its team is looked at as a whole soon after.
    Member {
        /// Team name.
        team: String,
        /// Member name (`validate::is_name`: a label's value, checked before it names a path).
        member: String,
    },
}

impl Key {
    /// The team this key converges, if it does.
    fn team(&self) -> Option<&str> {
        match self {
            Key::Manifests => None,
            Key::Team(team) | Key::Member { team, .. } => Some(team),
        }
    }
}

/// How the controller runs (`ateam controller`'s flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// The manifests to watch.
    pub paths: Vec<PathBuf>,
    /// Remove what no manifest wants (members, strangers, teams whose manifests are gone).
    pub prune: bool,
    /// Look at everything again this often, in case an event was missed.
    pub resync: Duration,
    /// When a crash-looping member is restarted.
    pub crash: CrashLoopConfig,
    /// How many members are brought up at once; default `default_concurrency()`.
    pub concurrency: Option<usize>,
    /// Serve the figures at `/metrics` here (checked by `metrics::listen_addr`).
    pub metrics: Option<std::net::SocketAddr>,
}

#[derive(Default)]
struct State {
    /// The last good desired state of each team (an invalid edit keeps the one before).
    teams: BTreeMap<String, Team>,
    /// The manifests were read successfully at least once.
    loaded: bool,
    /// Every team these manifests named since the controller started: the only teams it
    /// touches. A team applied from other manifests into the same store is not its business.
    known: std::collections::BTreeSet<String>,
    /// Each member's restarts under the crash-loop policy.
    crash: Restarts,
    record: ControllerRecord,
    /// The last clean judgement of the manifests, if the one after it was clean too.
    judged: Option<Judged>,
}

/// How long a clean judgement of unchanged manifests is trusted. What the rules read of the
/// host (grant folders, their owners, mounts) sends no event; this bounds how late a change
/// there is seen.
const JUDGE_AGAIN: Duration = Duration::from_secs(300);

/// What a clean judgement read: the same texts against the same applied teams are judged the
/// same, so a resync need not parse and judge them again (at 200 members that was a fifth of
/// the idle controller's CPU).
struct Judged {
    read: Manifests,
    applied: Vec<Team>,
    at: Instant,
}

impl Judged {
    /// Whether judging `read` against `applied` now would only repeat this judgement.
    fn holds_for(&self, read: &Manifests, applied: &[Team], now: Instant) -> bool {
        now.saturating_duration_since(self.at) < JUDGE_AGAIN
            && self.read == *read
            && self.applied == applied
    }
}

/// The reconcile function's world.
pub(crate) struct Reconciler {
    app: App,
    opts: Options,
    state: Mutex<State>,
    handle: Handle<Key>,
    /// The running members' first processes, watched for their exit.
    exits: Exits,
    /// When it started: a team the person deleted since is left deleted.
    started: SystemTime,
    /// Its reconciles' turns at the store's lock (`lock_store`).
    turn: tokio::sync::Mutex<()>,
    /// One write of the record at a time, each of the record as it is when written: two
    /// reconciles that end together (a team's and a refused reload) would otherwise write
    /// in the other order than they read, and the older record would stay.
    record_file: Mutex<()>,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Reconciler {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save_record(&self) {
        let _one = self.record_file.lock().unwrap_or_else(|p| p.into_inner());
        let record = self.state().record.clone();
        if let Err(e) = status::write(&self.app.host.state_dir, &record, self.app.owner) {
            warn!(error = %e, "cannot write the controller's record");
        }
    }

    /// Every team this controller's manifests named (now or since it started).
    fn all_teams(&self) -> Vec<String> {
        self.state().known.iter().cloned().collect()
    }

    /// Reloads the manifests or converges one team, and records how it went (for `status`);
    /// what the queue does next with `key`.
    pub async fn reconcile(&self, key: Key) -> Result<Next, AppError> {
        let result = match &key {
            Key::Manifests => self.reload(),
            Key::Team(team) => self.converge_team(team, None).await,
            Key::Member { team, member } => self.converge_team(team, Some(member)).await,
        };
        if let Some(team) = key.team() {
            let mut st = self.state();
            st.record.last_reconcile = Some(LastReconcile {
                at: rfc3339(SystemTime::now()),
                team: team.to_string(),
                ok: result.is_ok(),
            });
            if let Err(e) = &result {
                st.record.errors.insert(team.to_string(), e.to_string());
            }
        }
        self.save_record();
        result
    }

    /// Reads the manifests; on success schedules every team that changed (or went), on
    /// failure keeps the last good state and says why.
    fn reload(&self) -> Result<Next, AppError> {
        let applied = self.app.store.teams()?;
        let read = Manifests::read(&self.opts.paths);
        if let Ok(m) = &read {
            let st = self.state();
            if st
                .judged
                .as_ref()
                .is_some_and(|j| j.holds_for(m, &applied, Instant::now()))
            {
                debug!("manifests unchanged since their last judgement");
                return Ok(Next::AwaitChange);
            }
        }
        let judged = read.and_then(|m| {
            let desired = m.validate(&self.app.host, &applied)?;
            Ok((m, desired))
        });
        let mut st = self.state();
        st.judged = None;
        match judged {
            Ok((read, desired)) => {
                st.judged = Some(Judged {
                    read,
                    applied,
                    at: Instant::now(),
                });
                let new: BTreeMap<String, Team> = desired
                    .teams
                    .into_iter()
                    .map(|t| (t.name.clone(), t))
                    .collect();
                let changed: Vec<String> = new
                    .iter()
                    .filter(|(n, t)| st.teams.get(*n) != Some(*t) || !st.loaded)
                    .map(|(n, _)| n.clone())
                    .chain(st.teams.keys().filter(|n| !new.contains_key(*n)).cloned())
                    .collect();
                st.known.extend(new.keys().cloned());
                st.teams = new;
                st.loaded = true;
                st.record.manifest_errors.clear();
                info!(
                    teams = st.teams.len(),
                    changed = changed.len(),
                    "manifests loaded"
                );
                for t in changed {
                    let _ = self.handle.schedule(Key::Team(t));
                }
            }
            Err(e) => {
                // One line per problem (file:line:column, object, field, message), without the
                // source snippets and the closing count a person sees.
                let lines: Vec<String> = match &e {
                    ManifestError::Invalid(problems) => {
                        problems.iter().map(ToString::to_string).collect()
                    }
                    other @ ManifestError::Empty(_) => vec![other.to_string()],
                };
                for l in &lines {
                    warn!(problem = %l, "manifests refused; the last good state stays");
                }
                st.record.manifest_errors = lines;
            }
        }
        Ok(Next::AwaitChange)
    }

    /// One reconcile of a team, or of its member `only` alone (`PlanOptions::only`): the
    /// crash-loop holds of its members go into the plan, the plan's restarts and deferrals
    /// into the crash-loop records, and the first deferral due comes back as the time to look
    /// again.
    async fn converge_team(&self, name: &str, only: Option<&str>) -> Result<Next, AppError> {
        let (loaded, team) = {
            let st = self.state();
            (st.loaded, st.teams.get(name).cloned())
        };
        if !loaded {
            return Ok(Next::AwaitChange);
        }
        let Some(team) = team else {
            return match only {
                // The team's own key says what becomes of a team that went.
                Some(_) => Ok(Next::AwaitChange),
                None => self.gone(name).await,
            };
        };
        let _lock = self.lock_store().await?;
        if self.left_deleted(name) {
            return Ok(Next::AwaitChange);
        }
        let secret = |n: &str| std::env::var(n).ok();
        let opts = ApplyOptions {
            prune: self.opts.prune,
            concurrency: self.opts.concurrency,
            no_wait: false,
            only: only.map(str::to_string),
        };
        let desired = Model { teams: vec![team] };
        let (now, wall) = (Instant::now(), SystemTime::now());
        let plan = PlanOptions {
            deferred: self.state().crash.holds(name, now, wall),
            ..opts.plan_options()
        };
        let look = prepare(&self.app, &desired, plan, &secret).await?;
        // One member's look sees no other running member: the team's watches stay as the
        // last whole look left them.
        if only.is_none() {
            self.watch_exits(name, &look.observed);
        }
        self.pace_restarts(&look.plan, now, wall);
        let deferred: Vec<SystemTime> = look.plan.deferred.iter().map(|d| d.until).collect();
        let report = carry_out(&self.app, &desired, look, &opts, &secret, &Quiet).await?;
        self.record_outcome(name, &report.outcome, only.is_none());
        let wall = SystemTime::now();
        let next = deferred
            .iter()
            .map(|until| until.duration_since(wall).unwrap_or_default())
            .min();
        Ok(match next {
            Some(d) => Next::Requeue(d),
            None => Next::AwaitChange,
        })
    }

    /// Whether the person deleted the team since this controller started (`ateam delete`,
    /// under the lock it holds now): their last word wins, and is said once in the log and in
    /// the record `status` reads, until an apply of the team takes the mark away. A
    /// controller started after the delete applies the team: starting it is a word too.
    fn left_deleted(&self, name: &str) -> bool {
        let at = self
            .app
            .store
            .deleted_at(name)
            .filter(|at| *at >= self.started);
        let mut st = self.state();
        match at {
            Some(at) => {
                let at = rfc3339(at);
                if st.record.left_deleted.insert(name.to_string(), at.clone()) != Some(at) {
                    warn!(
                        team = name,
                        "the team was deleted (ateam delete): left deleted until it is applied again"
                    );
                    self.exits.forget(name);
                }
                true
            }
            None => {
                st.record.left_deleted.remove(name);
                false
            }
        }
    }

    /// Watches the first process of each of the team's running containers of this look: its
    /// exit schedules its member at once, before the engine's event (see `exits`).
    fn watch_exits(&self, team: &str, observed: &Observed) {
        let running = observed
            .containers
            .iter()
            .filter(|c| {
                c.state == ContainerState::Running
                    && c.labels.get(labels::TEAM).map(String::as_str) == Some(team)
            })
            .filter_map(|c| {
                let member = c.labels.get(labels::MEMBER)?;
                Some((c.id.clone(), c.pid?, member.clone()))
            })
            .collect();
        let (handle, name) = (self.handle.clone(), team.to_string());
        self.exits.watch(team, running, move |member: &str| {
            let _ = handle.schedule_after(member_key(&name, member), Duration::ZERO);
        });
    }

    /// The store's lock, as apply takes it: the two never interleave.
    async fn lock_store(
        &self,
    ) -> Result<(crate::store::Lock, tokio::sync::MutexGuard<'_, ()>), AppError> {
        // This controller's reconciles take turns here, so that the lock is only ever waited
        // for while another process holds it (and the log names that one, never itself).
        let turn = self.turn.lock().await;
        let state_dir = self.app.host.state_dir.clone();
        let owner = self.app.owner;
        tokio::task::spawn_blocking(move || {
            crate::store::Store::new(state_dir, owner).lock(false, |holder| {
                info!(holder, "waiting for the store's lock");
            })
        })
        .await
        .map_err(|e| AppError::Io {
            path: "controller".into(),
            source: std::io::Error::other(e),
        })?
        .map_err(AppError::from)
        // The lock first: a tuple drops in order, and the next reconcile's turn must find
        // the lock free.
        .map(|lock| (lock, turn))
    }

    /// What did not converge, in the record (and the log); a team that did is cleared when
    /// `whole` (a look at one member says nothing of the others).
    fn record_outcome(&self, name: &str, outcome: &Outcome, whole: bool) {
        let problem = match outcome {
            Outcome::NoChanges => None,
            Outcome::Refused(f) => Some(format!(
                "refused: {}",
                f.iter()
                    .map(|f| f.error.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            Outcome::Applied {
                failures,
                not_running,
                ..
            } => {
                let mut v: Vec<String> = failures.iter().map(|f| f.error.to_string()).collect();
                v.extend(
                    not_running
                        .iter()
                        .map(|n| format!("{}/{} {}", n.team, n.member, n.why)),
                );
                (!v.is_empty()).then(|| v.join("; "))
            }
        };
        let mut st = self.state();
        match problem {
            Some(p) => {
                warn!(team = name, problem = %p, "not converged");
                st.record.errors.insert(name.to_string(), p);
            }
            None if whole => {
                st.record.errors.remove(name);
            }
            None => {}
        }
    }

    /// A team no manifest names any more: its members are left as they are (status reports
    /// them) unless `--prune`, which removes its containers; transcripts stay.
    async fn gone(&self, name: &str) -> Result<Next, AppError> {
        self.exits.forget(name);
        let Some(stored) = self.app.store.team(name)? else {
            return Ok(Next::AwaitChange);
        };
        if !self.opts.prune {
            info!(
                team = name,
                "no manifest names this team any more; its members keep running (--prune removes them)"
            );
            return Ok(Next::AwaitChange);
        }
        info!(
            team = name,
            "no manifest names this team any more: removing its containers"
        );
        let desired = Model {
            teams: vec![stored],
        };
        // Its turn first: `delete` takes the store's lock itself.
        let _turn = self.turn.lock().await;
        delete(&self.app, &desired, false, false, &Quiet, |holder| {
            info!(holder, "waiting for the store's lock");
        })
        .await?;
        // A prune of the controller's own is no person's word: the team comes back when its
        // manifests name it again.
        self.app.store.unmark_deleted(name)?;
        Ok(Next::AwaitChange)
    }

    /// Records what the plan does with restarts (it reads the plan; the plan is final), and
    /// says so for each restart that begins to wait: in the log, as an event, and in the
    /// record `status` reads (`restarts_due`).
    fn pace_restarts(&self, plan: &Plan, now: Instant, wall: SystemTime) {
        let cfg = self.opts.crash;
        let mut guard = self.state();
        let st = &mut *guard;
        for w in st.crash.record(plan, cfg, now) {
            let (team, member) = (w.team.as_str(), w.member.as_str());
            info!(
                team,
                member,
                delay_s = w.delay.as_secs_f64(),
                "crash loop: the restart waits"
            );
            let until = rfc3339(wall + w.delay);
            let why = format!(
                "crash loop: exited again {:.1}s after its last start; backoff {} until {until}",
                w.ran_for.min(Duration::from_secs(86_400)).as_secs_f64(),
                humantime::format_duration(Duration::from_secs(w.delay.as_secs().max(1)))
            );
            let e =
                crate::events::Event::new(team, member, crate::events::EventKind::CrashLoop, &why);
            crate::events::record(&self.app.host.state_dir, self.app.owner, &e);
            st.record
                .restarts_due
                .insert(format!("{team}/{member}"), until);
        }
        // Restarts that are no longer waiting are no longer due.
        let waiting = st.crash.waiting();
        st.record.restarts_due.retain(|k, _| waiting.contains(k));
    }
}

/// The metrics' status figures: `ateam status` of the applied teams this controller keeps.
impl StatusSource for Reconciler {
    async fn status(&self) -> Result<crate::report::StatusDocument, AppError> {
        let known = self.state().known.clone();
        let mut desired = self.app.applied(None)?;
        desired.teams.retain(|t| known.contains(&t.name));
        crate::app::status::status(&self.app, &desired, None).await
    }

    fn helper_requests(&self) -> BTreeMap<(String, &'static str), u64> {
        use crate::events::EventKind;
        let known = self.state().known.clone();
        let mut out = BTreeMap::new();
        for team in known {
            for e in crate::events::read(&self.app.host.state_dir, &team) {
                let outcome = match e.kind {
                    EventKind::HelperGranted => "granted",
                    EventKind::HelperRefused => "refused",
                    EventKind::Created
                    | EventKind::Replaced
                    | EventKind::Started
                    | EventKind::Restarted
                    | EventKind::Released
                    | EventKind::Held
                    | EventKind::Removed
                    | EventKind::Repaired
                    | EventKind::Failed
                    | EventKind::StrangerSeen
                    | EventKind::CrashLoop
                    | EventKind::EgressRefused
                    | EventKind::ApprovalPending
                    | EventKind::SessionStarted
                    | EventKind::SessionStopped
                    | EventKind::Promoted
                    | EventKind::TaskGiven
                    | EventKind::AgentDone
                    | EventKind::TasksReturned
                    | EventKind::BoardTask
                    | EventKind::AgentFailed
                    | EventKind::Refused
                    | EventKind::Deleted
                    | EventKind::Stopped
                    | EventKind::Suspended
                    | EventKind::Resumed
                    | EventKind::Forked => continue,
                };
                *out.entry((team.clone(), outcome)).or_default() += e.count;
            }
        }
        out
    }
}

/// The key of `member` of `team`, as an event's or a watch's label names it: one that is
/// no member's name (a label anyone with the engine could set) looks at the whole team.
fn member_key(team: &str, member: &str) -> Key {
    if crate::manifest::is_name(member) {
        Key::Member {
            team: team.to_string(),
            member: member.to_string(),
        }
    } else {
        Key::Team(team.to_string())
    }
}

/// Counts one reconcile in the metrics.
fn count(r: &Reconciler, m: &Metrics, key: &Key, result: &Result<Next, AppError>, took: Duration) {
    match key {
        Key::Manifests => m.manifests_loaded(r.state().record.manifest_errors.is_empty()),
        Key::Team(team) | Key::Member { team, .. } => {
            let how = match result {
                Ok(Next::AwaitChange) => ReconcileResult::Ok,
                Ok(Next::Requeue(_)) => ReconcileResult::Requeue,
                Err(_) => ReconcileResult::Error,
            };
            m.reconciled(team, how, took);
        }
    }
}

/// Runs the controller until `shutdown`; with `once`, reconciles everything one time and
/// returns whether it all converged.
pub async fn run(
    app: App,
    opts: Options,
    once: bool,
    shutdown: CancellationToken,
) -> Result<bool, ControllerError> {
    let _lock = status::lock(&app.host.state_dir, app.owner)?;
    let controller = Controller::<Key>::new(
        QueueConfig {
            max_running: std::num::NonZeroUsize::new(4).expect("4 is not 0"),
            debounce: Duration::from_millis(300),
        },
        ErrorBackoffConfig::default(),
    );
    let handle = controller.handle();
    let metrics = match opts.metrics.filter(|_| !once) {
        Some(addr) => Some((
            super::metrics::bind(addr).await?,
            Arc::new(Metrics::new(controller.stats())),
        )),
        None => None,
    };
    let record = ControllerRecord {
        version: 1,
        pid: std::process::id(),
        since: rfc3339(SystemTime::now()),
        ..Default::default()
    };
    let r = Arc::new(Reconciler {
        app,
        opts,
        started: SystemTime::now(),
        turn: tokio::sync::Mutex::new(()),
        record_file: Mutex::new(()),
        state: Mutex::new(State {
            record,
            ..Default::default()
        }),
        handle: handle.clone(),
        exits: Exits::default(),
    });
    r.save_record();
    if once {
        return run_once(&r).await;
    }
    let _ = handle.schedule(Key::Manifests);
    let watch_handle = handle.clone();
    let _watch = super::watch::watch(&r.opts.paths, move || {
        let _ = watch_handle.schedule(Key::Manifests);
    })
    .map_err(ControllerError::Watch)?;
    drop(handle);
    run_loop(controller, r, metrics, shutdown).await;
    Ok(true)
}

/// `--once`: the manifests, then every team, one time each; whether it all converged.
async fn run_once(r: &Reconciler) -> Result<bool, ControllerError> {
    r.reconcile(Key::Manifests).await?;
    let problems = r.state().record.manifest_errors.clone();
    if !problems.is_empty() {
        // Once, there is no last good state to keep: as `apply`, refuse (exit 3).
        return Err(ControllerError::Invalid(problems));
    }
    let mut ok = true;
    for team in r.all_teams() {
        if let Err(e) = r.reconcile(Key::Team(team.clone())).await {
            warn!(team, error = %e, "reconcile failed");
            ok = false;
        }
        ok &= !r.state().record.errors.contains_key(&team);
    }
    Ok(ok)
}

/// The long run: the sources that schedule keys (engine events, resync, the egress probe,
/// the metrics server) as owned tasks, and the reconcile loop until `shutdown`; then the
/// tasks are stopped and awaited.
async fn run_loop(
    controller: Controller<Key>,
    r: Arc<Reconciler>,
    metrics: Option<(tokio::net::TcpListener, Arc<Metrics>)>,
    shutdown: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(probes::engine_events(r.clone(), shutdown.clone()));
    tasks.spawn(probes::resync(r.clone(), shutdown.clone()));
    tasks.spawn(probes::egress_probe(r.clone(), shutdown.clone()));
    tasks.spawn(probes::board_probe(r.clone(), shutdown.clone()));
    let counters = metrics.as_ref().map(|(_, m)| m.clone());
    if let Some((listener, m)) = metrics {
        tasks.spawn(super::metrics::serve(
            listener,
            m,
            r.clone(),
            shutdown.clone(),
        ));
    }
    info!(
        paths = ?r.opts.paths,
        resync_s = r.opts.resync.as_secs(),
        prune = r.opts.prune,
        "controller started"
    );
    controller
        .run(
            move |key: Key| {
                let r = r.clone();
                let counters = counters.clone();
                async move {
                    let start = Instant::now();
                    let result = r.reconcile(key.clone()).await;
                    if let Some(m) = &counters {
                        count(&r, m, &key, &result, start.elapsed());
                    }
                    result
                }
            },
            shutdown.clone(),
        )
        .await;
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    info!("controller stopped");
}

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// Another controller holds the state folder, or its lock could not be taken.
    #[error(transparent)]
    Lock(#[from] status::StatusError),
    /// ateam failed outside a team's reconcile (those are retried, not returned).
    #[error(transparent)]
    App(#[from] AppError),
    /// The manifests' folders could not be watched.
    #[error("watching the manifests: {0}")]
    Watch(#[source] notify::Error),
    /// The `/metrics` endpoint could not be served.
    #[error(transparent)]
    Metrics(#[from] super::metrics::ServeError),
    /// `--once` read manifests it refused (one line per problem); nothing was changed.
    #[error("the manifests are invalid; nothing was changed:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member's name from a label becomes its own key only when a manifest could have given
    /// it: anything else (a path, a stranger's label) looks at the whole team.
    #[test]
    fn a_member_key_only_for_a_name_a_manifest_could_give() {
        let member = |m: &str| Key::Member {
            team: "t".into(),
            member: m.into(),
        };
        assert_eq!(member_key("t", "m-1"), member("m-1"));
        for bad in ["../x", "", "M", "a/b", "-a", &"a".repeat(64)] {
            assert_eq!(member_key("t", bad), Key::Team("t".into()), "{bad:?}");
        }
        assert_eq!(member("m").team(), Some("t"));
        assert_eq!(Key::Manifests.team(), None);
    }

    /// A judgement is trusted only for the same texts, the same applied teams, and not for
    /// longer than `JUDGE_AGAIN`.
    #[test]
    fn a_judgement_holds_only_for_what_it_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("team.yaml");
        let read = |text: &str| {
            std::fs::write(&file, text).expect("write");
            Manifests::read(std::slice::from_ref(&file)).expect("read")
        };
        let team = |name: &str| Team::named(name, dir.path().join("sessions"));
        let now = Instant::now();
        let judged = Judged {
            read: read("kind: Team\n"),
            applied: vec![team("a")],
            at: now,
        };
        assert!(judged.holds_for(&read("kind: Team\n"), &[team("a")], now));
        assert!(!judged.holds_for(&read("kind: Team \n"), &[team("a")], now));
        assert!(!judged.holds_for(&read("kind: Team\n"), &[team("b")], now));
        assert!(!judged.holds_for(&read("kind: Team\n"), &[], now));
        let later = now + JUDGE_AGAIN;
        assert!(!judged.holds_for(&read("kind: Team\n"), &[team("a")], later));
    }
}
