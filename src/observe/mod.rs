//! Observing the machine: one list call, inspects in parallel (or kept ones, see `cache`),
//! the transcript folders, the sockets. Produces the plain `Observed` value the planner reads;
//! `facts` reads what status shows beyond the plan, after a look.

pub(crate) mod cache;
mod facts;
mod host;
#[cfg(test)]
mod tests;
pub(crate) mod transcripts;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use futures_util::{StreamExt, TryStreamExt, stream};
use tracing::{debug, warn};

use crate::backend::{Backend, BackendError, EngineInfo, Inspected, Summary};
use crate::core::container::{ContainerState, labels};
use crate::core::layout;
use crate::plan::spec::{DesiredMember, DesiredState};
use crate::plan::{Observed, ObservedContainer};
use crate::runtime::{cgroup, gate};
use crate::store::Record;
use cache::Cache;
pub use facts::{EarlyFacts, controller_status, restarts, status_facts};
use host::{
    Servers, board_held, board_news, live_sockets, recorded, servers, sessions, transcript_dirs,
};
pub use transcripts::TranscriptCache;

/// How many inspects run at once.
pub(crate) const INSPECT_CONCURRENCY: usize = 16;

/// The labels of the containers of the store `store` (`layout::store_id`): what a look lists.
pub fn ours(store: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED_BY.to_string(), "ateam".to_string()),
        (labels::STORE.to_string(), store.to_string()),
    ])
}

/// A list asked ahead of the look: none when it was not this engine's.
pub(crate) type Ahead<'a> =
    futures_util::future::BoxFuture<'a, Option<Result<Vec<Summary>, BackendError>>>;

/// Everything the planner needs to know about the machine for `desired`.
pub async fn observe(
    backend: &dyn Backend,
    info: &EngineInfo,
    desired: &DesiredState,
) -> Result<Observed, BackendError> {
    observe_listed(backend, info, desired, None, None).await
}

/// `observe`, with the list of this store's containers asked ahead (`App::begin_look`):
/// what it gives, when it gives one, is this engine's.
///
/// `only` narrows the look to the member of that name in each team in scope (`desired`
/// wanting no other: `PlanOptions::only`): its containers alone are inspected, by id and
/// name with no list (`member_inspects`), and its record, transcript folder and servers
/// alone read, which is all its part of the plan reads. The engine is asked about that
/// member's containers, not the team (on Podman a list waits on each container's lock, and a
/// member that just died has its lock held by Podman's cleanup: at 200 members a team's list
/// took 350 ms, a label-filtered one still 40-60 ms). No kept inspect is used or written then:
/// the member's own are inspected anyway, and the team's kept ones stay as the last whole
/// look left them.
pub(crate) async fn observe_listed(
    backend: &dyn Backend,
    info: &EngineInfo,
    desired: &DesiredState,
    ahead: Option<Ahead<'_>>,
    only: Option<&str>,
) -> Result<Observed, BackendError> {
    // One label-filtered list for ours. Only when a wanted member has no container of ours
    // is everything listed once more, to see a container of that name that is not ours (a
    // conflict the planner must not step on): a no-op apply never pays for that.
    let started = Instant::now();
    let list = list(backend, desired, ahead, only);
    // What needs no engine is read on a blocking thread while the engine lists (Docker
    // takes 35 ms to list 200 containers); then the events that vouch for the kept inspects
    // are asked, still beside the list.
    let (summaries, (local, guard)) = tokio::join!(list, async {
        let (d, o) = (desired.clone(), only.map(str::to_string));
        let local = tokio::task::spawn_blocking(move || Local::read(&d, o.as_deref()))
            .await
            .unwrap_or_else(|_| Local::read(desired, only));
        // With no kept inspect to vouch for (a team's first apply), the events are asked
        // only if the list finds containers of the teams to inspect (below): Docker's replay
        // from the start of what it holds was 10-40 ms of a new team's apply.
        let guard = if local.caches.values().all(Cache::is_empty) {
            None
        } else {
            Some(guard(backend, info, &local.caches).await)
        };
        (local, guard)
    });
    let listed = summaries?;
    debug!(
        elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
        "listed"
    );
    let Local {
        recorded,
        transcript_dirs,
        live_sessions,
        promotions,
        live_sockets,
        servers,
        caches,
        early,
        board_news,
        board_held,
    } = local;
    let (mut containers, listed, foreign, listed_all, reused) = match listed {
        Listed::Summaries(summaries) => {
            let (foreign, listed_all) = foreign(backend, desired, &summaries, &recorded).await?;
            let listed = summaries.len();
            let guard = match guard {
                Some(g) => g,
                None if in_scope(desired, &summaries) => self::guard(backend, info, &caches).await,
                None => None,
            };
            let (containers, reused) =
                inspect_in_scope(backend, desired, summaries, caches, guard, &early).await?;
            (containers, listed, foreign, listed_all, reused)
        }
        Listed::Inspected(asked) => {
            let summaries: Vec<Summary> = asked.iter().map(|(i, _)| i.summary.clone()).collect();
            let (foreign, listed_all) = foreign(backend, desired, &summaries, &recorded).await?;
            let containers = assemble(desired, Vec::new(), asked, BTreeMap::new(), &early);
            (containers, summaries.len(), foreign, listed_all, 0)
        }
    };
    let inspected = containers.len() - reused;
    let foreign_count = foreign.len();
    containers.extend(foreign);
    debug!(
        listed,
        inspected,
        reused,
        listed_all,
        foreign = foreign_count,
        recorded = recorded.len(),
        transcript_dirs = transcript_dirs.len(),
        live_sockets = live_sockets.len(),
        elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
        "observed"
    );
    Ok(Observed {
        containers,
        transcript_dirs,
        live_sockets,
        egress_policies: servers.egress_policies,
        egress_proxies: servers.egress_proxies,
        helper_servers: servers.helper_servers,
        limits_unenforced: !info.limits_enforced,
        recorded,
        live_sessions,
        promotions,
        board_news,
        board_held,
    })
}

/// Ours, as the look asks for them: the member's containers alone (`only`), else the list
/// asked ahead when there is one, else a list now.
async fn list(
    backend: &dyn Backend,
    desired: &DesiredState,
    ahead: Option<Ahead<'_>>,
    only: Option<&str>,
) -> Result<Listed, BackendError> {
    let ours = ours(&desired.store);
    match (only, ahead) {
        (Some(member), _) => member_inspects(backend, desired, member, &ours)
            .await
            .map(Listed::Inspected),
        (None, Some(f)) => match f.await {
            Some(listed) => listed.map(Listed::Summaries),
            None => backend.list(&ours).await.map(Listed::Summaries),
        },
        (None, None) => backend.list(&ours).await.map(Listed::Summaries),
    }
}

/// What a look reads from the state folder and the host alone, needing nothing of the
/// engine's answers.
struct Local {
    recorded: BTreeSet<String>,
    transcript_dirs: BTreeSet<PathBuf>,
    live_sessions: BTreeSet<(String, String)>,
    promotions: Vec<crate::core::session::Promotion>,
    live_sockets: BTreeSet<PathBuf>,
    servers: Servers,
    board_news: BTreeMap<(String, String), crate::board::store::News>,
    board_held: BTreeSet<(String, String)>,
    /// The inspects kept by each team in scope, by team name.
    caches: BTreeMap<String, Cache>,
    early: Early,
}

impl Local {
    /// The kept inspects and the limits of their starts on a thread of their own (at 200
    /// members, 600 cgroup files), the rest on this one. `only`: that member's alone, and no
    /// kept inspect (`observe_listed`).
    fn read(desired: &DesiredState, only: Option<&str>) -> Local {
        std::thread::scope(|scope| {
            let kept = scope.spawn(|| {
                let caches: BTreeMap<String, Cache> = desired
                    .teams
                    .iter()
                    .filter(|_| only.is_none())
                    .map(|t| (t.name.clone(), Cache::load(&t.run_dir)))
                    .collect();
                let limits = Early::limits(&caches);
                (caches, limits)
            });
            let (live_sessions, promotions) = sessions(desired);
            let mut local = Local {
                recorded: recorded(desired, only),
                transcript_dirs: transcript_dirs(desired, only),
                live_sessions,
                promotions,
                live_sockets: live_sockets(desired),
                servers: servers(desired, only),
                board_news: board_news(desired, only),
                board_held: board_held(desired),
                early: Early {
                    releases: Early::releases(desired),
                    limits: BTreeMap::new(),
                },
                caches: BTreeMap::new(),
            };
            // A thread that panicked leaves the kept inspects out: every container is
            // inspected and read after the list, as with no cache.
            if let Ok((caches, limits)) = kept.join() {
                local.caches = caches;
                local.early.limits = limits;
            }
            local
        })
    }
}

/// The kernel's files a look reads of each member, read before the engine's list says which
/// containers run: each wanted member's release file, and the limits enforced on the cgroups
/// of each kept start. Whether a start is the kept one, and the start token its release is
/// judged against, are still read after the list (`Cache::get`): only what belongs to that
/// very start is used.
#[derive(Default)]
struct Early {
    /// Each wanted member's release file, by control folder (None: there is none).
    releases: BTreeMap<PathBuf, Option<String>>,
    /// The limits enforced on each kept start's cgroups, by `Start::cgroup`.
    limits: BTreeMap<String, cgroup::Enforced>,
}

impl Early {
    fn releases(desired: &DesiredState) -> BTreeMap<PathBuf, Option<String>> {
        desired
            .members
            .iter()
            .map(|m| (m.ctl_dir.clone(), gate::release_text(&m.ctl_dir)))
            .collect()
    }

    fn limits(caches: &BTreeMap<String, Cache>) -> BTreeMap<String, cgroup::Enforced> {
        caches
            .values()
            .flat_map(Cache::memberships)
            .map(|c| (c.to_string(), cgroup::enforced_on(c)))
            .collect()
    }

    /// `gate::released_for`, from the release file read early when there is one.
    fn released(&self, ctl: &std::path::Path, id: &str, now: Option<&str>) -> bool {
        match self.releases.get(ctl) {
            Some(text) => text
                .as_deref()
                .is_some_and(|t| gate::names_start(t, id, now)),
            None => gate::released_for(ctl, id, now),
        }
    }

    /// `cgroup::overlay_with`, from the limits read early for these cgroups when there are.
    fn overlay(&self, effective: &mut crate::policy::Effective, membership: Option<&str>) {
        match membership.and_then(|m| self.limits.get(m)) {
            Some(e) => cgroup::overlay_enforced(effective, *e),
            None => cgroup::overlay_with(effective, membership),
        }
    }
}

/// Containers not ours that hold the name of a wanted member with no container of ours (a
/// conflict), and whether everything had to be listed to find them.
async fn foreign(
    backend: &dyn Backend,
    desired: &DesiredState,
    summaries: &[Summary],
    recorded: &BTreeSet<String>,
) -> Result<(Vec<ObservedContainer>, bool), BackendError> {
    let have: BTreeSet<(&str, &str)> = summaries
        .iter()
        .filter(|s| recorded.contains(&s.id))
        .filter_map(|s| {
            Some((
                s.labels.get(labels::TEAM)?.as_str(),
                s.labels.get(labels::MEMBER)?.as_str(),
            ))
        })
        .collect();
    let missing: BTreeSet<&str> = desired
        .members
        .iter()
        .filter(|m| !have.contains(&(m.team.as_str(), m.member.as_str())))
        .map(|m| m.spec.name.as_str())
        .collect();
    let others = if missing.is_empty() {
        Vec::new()
    } else {
        backend.list(&BTreeMap::new()).await?
    };
    let foreign: Vec<ObservedContainer> = others
        .into_iter()
        .filter(|s| {
            missing.contains(s.name.as_str()) && s.labels.get(labels::STORE) != Some(&desired.store)
        })
        .map(|s| ObservedContainer {
            id: s.id,
            name: s.name,
            labels: s.labels,
            state: s.state,
            created: s.created,
            effective: None,
            released: false,
            last_exit: None,
            pid: None,
            pid_files: None,
        })
        .collect();
    Ok((foreign, !missing.is_empty()))
}

/// Our containers of the teams in scope, inspected (or kept from the last look, see
/// `cache`: `caches` of the teams in scope, kept where `guard` vouches for them), sorted by
/// name then id; with how many were kept.
/// Whether any of `summaries` is a container of a team in scope (one a look inspects).
fn in_scope(desired: &DesiredState, summaries: &[Summary]) -> bool {
    summaries.iter().any(|s| {
        s.labels
            .get(labels::TEAM)
            .is_some_and(|t| desired.teams.iter().any(|x| x.name == *t))
    })
}

async fn inspect_in_scope(
    backend: &dyn Backend,
    desired: &DesiredState,
    summaries: Vec<Summary>,
    mut caches: BTreeMap<String, Cache>,
    guard: Option<cache::Guard>,
    early: &Early,
) -> Result<(Vec<ObservedContainer>, usize), BackendError> {
    // Only the teams in scope are planned for: another team's containers need no inspect.
    let scope: BTreeSet<&str> = desired.teams.iter().map(|t| t.name.as_str()).collect();
    match guard {
        Some(g) => caches.values_mut().for_each(|c| c.check(&g)),
        None => caches.clear(),
    }
    let team_of = |s: &Summary| s.labels.get(labels::TEAM).cloned().unwrap_or_default();
    let mut kept = Vec::new();
    let mut ask = Vec::new();
    for s in summaries {
        let team = team_of(&s);
        if !scope.contains(team.as_str()) {
            continue;
        }
        match caches.get(team.as_str()).and_then(|c| c.get(&s)) {
            Some((i, start)) => kept.push((i, Some(start))),
            None => ask.push(s),
        }
    }
    let reused = kept.len();
    let asked = inspect_all(backend, ask.into_iter().map(|s| s.id)).await?;
    Ok((assemble(desired, kept, asked, caches, early), reused))
}

/// Inspects of `ids`, some at a time; none for one that is gone.
async fn inspect_all(
    backend: &dyn Backend,
    ids: impl Iterator<Item = String>,
) -> Result<Vec<(Inspected, Option<cache::Start>)>, BackendError> {
    stream::iter(ids)
        .map(|id| async move { inspect_start(backend, &id).await })
        .buffer_unordered(INSPECT_CONCURRENCY)
        .try_filter_map(|c| async move { Ok(c) })
        .try_collect()
        .await
}

/// What an engine answered for a look: a list to inspect (or keep), or one member's
/// containers inspected already (`member_inspects`).
enum Listed {
    Summaries(Vec<Summary>),
    Inspected(Vec<(Inspected, Option<cache::Start>)>),
}

/// One member's containers (`desired` wants that member alone), asked by what names them
/// instead of by a list: the ids its record holds and its container's name. A list costs
/// the engine a walk of all its containers (Podman at 200 members: 40-60 ms, behind each
/// container's lock). What this misses, a container with the member's labels that ateam did
/// not record under another name, is a stranger: no look adopts, starts or releases one, and
/// the team's look, which follows every event, reports it.
async fn member_inspects(
    backend: &dyn Backend,
    desired: &DesiredState,
    member: &str,
    ours: &BTreeMap<String, String>,
) -> Result<Vec<(Inspected, Option<cache::Start>)>, BackendError> {
    // By its record in each team in scope, wanted or not (a member no manifest wants any
    // more is looked at for its removal).
    let ids: BTreeSet<String> = desired
        .teams
        .iter()
        .flat_map(|t| Record::load(&layout::member_record_path(&t.run_dir, member)).ids)
        .collect();
    let mut found = inspect_all(backend, ids.into_iter()).await?;
    // Then the names no recorded container holds: mostly the member's own container is
    // both, and on Podman a second inspect of it waits for the first (its lock), which
    // after a death is held by the engine's cleanup.
    let names: BTreeSet<String> = desired
        .members
        .iter()
        .map(|m| m.spec.name.clone())
        .filter(|n| !found.iter().any(|(i, _)| i.summary.name == *n))
        .collect();
    found.extend(inspect_all(backend, names.into_iter()).await?);
    let wanted: BTreeSet<(&str, &str)> = desired
        .teams
        .iter()
        .map(|t| (t.name.as_str(), member))
        .collect();
    let mut seen = BTreeSet::new();
    found.retain(|(i, _)| {
        let l = &i.summary.labels;
        let label = |k| l.get(k).map(String::as_str).unwrap_or("");
        ours.iter().all(|(k, v)| l.get(k) == Some(v))
            && wanted.contains(&(label(labels::TEAM), label(labels::MEMBER)))
            && seen.insert(i.summary.id.clone())
    });
    Ok(found)
}

/// The look's containers, from the kept and the asked inspects, each kept again for the
/// next look in its team's `caches` (saved here), sorted by name then id.
fn assemble(
    desired: &DesiredState,
    kept: Vec<(Inspected, Option<cache::Start>)>,
    asked: Vec<(Inspected, Option<cache::Start>)>,
    mut caches: BTreeMap<String, Cache>,
    early: &Early,
) -> Vec<ObservedContainer> {
    let team_of = |s: &Summary| s.labels.get(labels::TEAM).cloned().unwrap_or_default();
    let wanted: BTreeMap<(&str, &str), &DesiredMember> = desired
        .members
        .iter()
        .map(|m| ((m.team.as_str(), m.member.as_str()), m))
        .collect();
    let mut containers = Vec::new();
    for (i, start) in kept.into_iter().chain(asked) {
        if let Some(c) = caches.get_mut(team_of(&i.summary).as_str()) {
            c.keep(&i, start.as_ref());
        }
        let label = |k| i.summary.labels.get(k).map(String::as_str).unwrap_or("");
        let m = wanted
            .get(&(label(labels::TEAM), label(labels::MEMBER)))
            .copied();
        containers.push(observed_one(i, m, start.as_ref(), early));
    }
    for c in caches.into_values() {
        c.save();
    }
    containers.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
    containers
}

/// Memory, memory+swap and pids limits, as `Effective` holds them.
fn limits_of(e: &crate::policy::Effective) -> (u64, i64, i64) {
    (e.memory_bytes, e.memory_swap_bytes, e.pids_limit)
}

/// The kernel's limits differ from the engine's word (an update out of band, or the look
/// read them through cgroups kept from an earlier read): read again, from the process's
/// cgroups as they are now, and say both reads. A difference that holds is the verdict's;
/// one that does not is what a controller once replaced a member for, right after an apply
/// had checked it (memory found unlimited).
fn reread_limits(i: &mut Inspected, engine: (u64, i64, i64), start: Option<&cache::Start>) {
    let first = limits_of(&i.effective);
    let now = i.pid.and_then(cgroup::membership);
    let mut fresh = i.effective.clone();
    (
        fresh.memory_bytes,
        fresh.memory_swap_bytes,
        fresh.pids_limit,
    ) = engine;
    cgroup::overlay_with(&mut fresh, now.as_deref());
    let again = limits_of(&fresh);
    let memory_line = |m: Option<&str>| {
        m.and_then(|t| {
            t.lines()
                .find(|l| l.contains(":memory:"))
                .map(str::to_string)
        })
    };
    let kept = memory_line(start.and_then(|s| s.cgroup.as_deref()));
    let now = memory_line(now.as_deref());
    let id = &i.summary.id;
    // A steady difference (an out-of-band update; rootless members on cgroup v1, in the
    // user's cgroup) is the verdict's to say; a read that changed is worth a line.
    if again == first {
        debug!(%id, pid = ?i.pid, ?engine, kernel = ?first, "the kernel's limits differ from the engine's");
    } else {
        warn!(%id, pid = ?i.pid, ?engine, ?first, ?again, ?kept, ?now, "the kernel's limits read twice differ");
    }
    i.effective = fresh;
}

/// How often, and how long apart, a container the engine calls running whose first process
/// is gone is asked about again (`inspect_start`).
const DYING_TRIES: u32 = 100;
const DYING_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// An inspect of `id`, with what is read of its running start (each start is read once: for
/// the cache, its gate's release and its limits); none when it was removed since the list.
///
/// The engine may still say `running` for a few milliseconds after the first process died
/// (Docker until containerd's exit reaches it; Podman until conmon's exit file is written,
/// and the controller's pidfd wakes it before that). Read as it is, that start would be
/// running and not released: planned as a gate to open, started again with no exit recorded
/// and no crash-loop pacing. So while its `/proc` entry is gone, the engine is asked again
/// until it says how the container ended (up to a second, then taken as it stands).
async fn inspect_start(
    backend: &dyn Backend,
    id: &str,
) -> Result<Option<(Inspected, Option<cache::Start>)>, BackendError> {
    let mut tries = 0;
    loop {
        let i = match backend.inspect(id).await {
            Ok(i) => i,
            // Removed between list and inspect: it is simply not there.
            Err(BackendError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let pid = i.pid.filter(|_| i.summary.state == ContainerState::Running);
        let start = pid.and_then(cache::Start::read);
        let dying = start.is_none()
            && pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
        if !dying || tries == DYING_TRIES {
            return Ok(Some((i, start)));
        }
        debug!(
            id,
            pid, "running, says the engine, but its first process is gone: asking again"
        );
        tries += 1;
        tokio::time::sleep(DYING_PAUSE).await;
    }
}

/// What vouches for kept inspects on this engine, if anything does (`cache::Guard`). The
/// events are asked before any inspect of this look, so that its inspects are newer than
/// the anchor they are kept with. An engine that cannot replay its events, or fails to, keeps
/// nothing: every container is inspected, as before there was a cache.
async fn guard(
    backend: &dyn Backend,
    info: &EngineInfo,
    caches: &BTreeMap<String, Cache>,
) -> Option<cache::Guard> {
    if info.inspect_holds_while_running() {
        return Some(cache::Guard::Holds);
    }
    if caches.is_empty() {
        return None;
    }
    // From the oldest anchor; from the start of what the engine holds when a team's kept
    // inspects have none. A team that keeps none needs only the newest event (the anchor of
    // this look's inspects): the last minute's, not a replay of all the engine holds.
    let now = now_nano();
    let since = caches
        .values()
        .map(|c| match (c.anchor_time(), c.is_empty()) {
            (Some(t), _) => Some(t),
            (None, true) => Some(now.saturating_sub(60_000_000_000)),
            (None, false) => None,
        })
        .try_fold(i64::MAX, |m, t| t.map(|t| m.min(t)))
        .unwrap_or(0);
    let asked = Instant::now();
    let events = backend.recent_events(since.min(now)).await;
    debug!(
        teams = caches.len(),
        elapsed_ms = asked.elapsed().as_micros() as f64 / 1e3,
        "asked the engine's recent events"
    );
    match events {
        Ok(events) => events.map(cache::Guard::Events),
        Err(e) => {
            debug!(error = %e, "the engine's recent events are unavailable: inspecting all");
            None
        }
    }
}

fn now_nano() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// One inspected container. A running member counts as released only when its gate file
/// names this very start (see `gate::is_released`): one that an interrupted apply never
/// verified, or that was restarted behind ateam's back, is held at its gate.
/// `wanted` is the member its labels name, if one is; `start` what was read of its running
/// first process (`cache::Start`).
fn observed_one(
    mut i: Inspected,
    wanted: Option<&DesiredMember>,
    start: Option<&cache::Start>,
    early: &Early,
) -> ObservedContainer {
    let engine = limits_of(&i.effective);
    match start {
        Some(s) => early.overlay(&mut i.effective, s.cgroup.as_deref()),
        // Not running (paused, say) or gone: read now, if it has a process at all.
        None => cgroup::overlay(&mut i.effective, i.pid),
    }
    if limits_of(&i.effective) != engine {
        reread_limits(&mut i, engine, start);
    }
    let released = match wanted {
        Some(m) if i.summary.state == ContainerState::Running => {
            early.released(&m.ctl_dir, &i.summary.id, start.map(|s| s.token.as_str()))
        }
        _ => false,
    };
    ObservedContainer {
        id: i.summary.id,
        name: i.summary.name,
        labels: i.summary.labels,
        state: i.summary.state,
        created: i.summary.created,
        effective: Some(i.effective),
        released,
        last_exit: i.last_exit,
        pid: i.pid,
        pid_files: i.pid_files,
    }
}
