//! `ateam controller --metrics ADDR`: the controller's figures in the Prometheus text format
//! (0.0.4, what Prometheus scrapes by default), encoded by `prometheus-client`.
//!
//! Two sources, one registry:
//! - the controller's own counters, updated as it works: reconciles by team and result and
//!   their durations, manifest loads, the queue's depth ([`Metrics`]);
//! - what `ateam status` reports, read at scrape time from the very call `status` makes
//!   (`app::status::status`), so that the figures match it by construction: members by
//!   state, restarts, what each running member uses, its proxy's decisions in the last
//!   minute, helpers that members asked for ([`Snapshot`], encoded by a `Collector`).
//!
//! Members can name things (a helper's name) and make rows (each helper they ask for): every
//! label value is escaped by the crate, and the per-member series of one scrape are capped at
//! [`MAX_MEMBER_SERIES`] (the rest are counted in `ateam_member_series_left_out`), states per
//! team at [`MAX_STATES`], so that no member can grow the scrape without bound.
//!
//! `serve` is the HTTP side: GET /metrics on a loopback address, the status look cached so
//! that a scraper cannot make the controller hammer the engine.

mod serve;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::runner::QueueStats;
use crate::report::{RowKind, StatusDocument};

pub use serve::{CACHE_FOR, LOOK_TIMEOUT, ServeError, StatusSource, bind, serve};

/// Per-member series in one scrape, over all teams: a team has at most `maxMembers` members,
/// but rows a member can make (helpers, their kept transcripts) must not grow it unbounded.
pub(crate) const MAX_MEMBER_SERIES: usize = 256;
/// Distinct states per team (they are ateam's words, with an exit code in `exited N`).
pub(crate) const MAX_STATES: usize = 32;

/// How a team's reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Converged, or as far as it can until something changes.
    Ok,
    /// Failed: it is retried after the error backoff.
    Error,
    /// Asked to be looked at again after a delay (a crash-looping member's restart is due).
    Requeue,
}

impl ReconcileResult {
    fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Ok => "ok",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
        }
    }
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReconcileLabels {
    team: String,
    result: ReconcileResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TeamLabel {
    team: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LoadLabels {
    result: &'static str,
}

/// The controller's figures: its counters, and the latest status snapshot.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    durations: Family<TeamLabel, Histogram>,
    loads: Family<LoadLabels, Counter>,
    snapshot: Arc<SnapshotCell>,
}

impl Metrics {
    /// A registry with the controller's counters, reading the queue's depth from `queue`.
    pub fn new(queue: Arc<QueueStats>) -> Metrics {
        let mut registry = Registry::default();
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "ateam_reconciles",
            "Team reconciles by how they ended (ok, error, requeue)",
            reconciles.clone(),
        );
        let durations = Family::<TeamLabel, Histogram>::new_with_constructor(|| {
            // 10 ms .. about 80 s: a converged team takes tens of ms, bringing members up s.
            Histogram::new(exponential_buckets(0.01, 2.0, 14))
        });
        registry.register(
            "ateam_reconcile_duration_seconds",
            "How long each team reconcile took",
            durations.clone(),
        );
        let loads = Family::<LoadLabels, Counter>::default();
        registry.register(
            "ateam_manifest_loads",
            "Manifest reads by result (ok, invalid: the last good state stays)",
            loads.clone(),
        );
        registry.register_collector(Box::new(QueueCollector(queue)));
        let snapshot = Arc::new(SnapshotCell::default());
        registry.register_collector(Box::new(snapshot.clone()));
        Metrics {
            registry,
            reconciles,
            durations,
            loads,
            snapshot,
        }
    }

    /// One team reconcile ended.
    pub fn reconciled(&self, team: &str, result: ReconcileResult, took: Duration) {
        let team = team.to_string();
        self.reconciles
            .get_or_create(&ReconcileLabels {
                team: team.clone(),
                result,
            })
            .inc();
        self.durations
            .get_or_create(&TeamLabel { team })
            .observe(took.as_secs_f64());
    }

    /// The manifests were read: taken, or refused (`ok` false).
    pub(crate) fn manifests_loaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "invalid" };
        self.loads.get_or_create(&LoadLabels { result }).inc();
    }

    /// Sets what the status figures are from now on.
    fn set_snapshot(&self, s: Snapshot) {
        *self.snapshot.0.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(s);
    }

    /// Everything, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}

/// The queue's depth, read from the loop's atomics at scrape.
#[derive(Debug)]
struct QueueCollector(Arc<QueueStats>);

impl Collector for QueueCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut e,
            "ateam_queue_depth",
            "Keys waiting in the work queue (debounce, requeue or backoff).",
            self.0.waiting(),
        )?;
        gauge(
            &mut e,
            "ateam_reconciles_running",
            "Reconciles running now.",
            self.0.running(),
        )
    }
}

/// What one status look said, reduced to the figures the metrics show.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    /// The look succeeded (false: the engine did not answer in time, or failed).
    pub ok: bool,
    /// How long the look took, in seconds.
    pub took_seconds: f64,
    /// Rows by team, kind and state.
    pub states: BTreeMap<(String, &'static str, String), u64>,
    /// One per member row with a container, at most [`MAX_MEMBER_SERIES`].
    pub members: Vec<MemberFigures>,
    /// Member rows left out by the cap.
    pub left_out: u64,
    /// Members that exist because another member asked for them, by team.
    pub helpers: BTreeMap<String, u64>,
    /// Helper requests by (team, outcome: granted, refused), as the kept events count them.
    pub helper_requests: BTreeMap<(String, &'static str), u64>,
    /// Tasks on each team's board by (team, state), and its messages by team.
    pub board_tasks: BTreeMap<(String, &'static str), u64>,
    /// Messages each team's board holds.
    pub board_messages: BTreeMap<String, u64>,
}

/// One member's figures.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MemberFigures {
    /// Its team: every series is labelled with team and member.
    pub team: String,
    /// Its name.
    pub member: String,
    /// Restarts, as `status` counts them.
    pub restarts: u64,
    /// CPU time used; `None` when not running or the engine does not say.
    pub cpu_seconds: Option<f64>,
    /// Memory in use; `None` when not running or the engine does not say.
    pub memory_bytes: Option<u64>,
    /// Its memory cap, as the engine reports it.
    pub memory_limit_bytes: Option<u64>,
    /// Processes in its container now.
    pub pids: Option<u64>,
    /// Its pids cap, as the engine reports it.
    pub pids_limit: Option<u64>,
    /// Allowed, refused, failed in the last minute (proxied members only).
    pub egress: Option<[u64; 3]>,
    /// Pending approvals a person could answer (`approvals`; proxied members only).
    pub approvals: Option<u64>,
    /// A writer's commits ahead of its base, files not committed, commits not collected.
    pub workspace: Option<[u64; 3]>,
}

impl MemberFigures {
    fn labels(&self) -> Labels2<'_> {
        [("team", &self.team), ("member", &self.member)]
    }
}

fn kind_label(k: RowKind) -> &'static str {
    match k {
        RowKind::MainSession => "main_session",
        RowKind::Member => "member",
        RowKind::Transcript => "transcript",
    }
}

impl Snapshot {
    /// The figures of a status document.
    pub fn of(doc: &StatusDocument, took: Duration) -> Snapshot {
        let mut s = Snapshot {
            ok: true,
            took_seconds: took.as_secs_f64(),
            ..Snapshot::default()
        };
        for t in &doc.teams {
            if let Some(b) = &t.board {
                for (state, n) in [
                    ("todo", b.todo),
                    ("claimed", b.claimed),
                    ("inProgress", b.in_progress),
                    ("done", b.done),
                ] {
                    s.board_tasks.insert((t.team.clone(), state), n as u64);
                }
                s.board_messages.insert(t.team.clone(), b.messages as u64);
            }
            let mut states = 0;
            for row in &t.members {
                let kind = kind_label(row.kind);
                let mut key = (t.team.clone(), kind, row.state.clone());
                if !s.states.contains_key(&key) {
                    if states >= MAX_STATES {
                        key.2 = "other".into();
                    } else {
                        states += 1;
                    }
                }
                *s.states.entry(key).or_default() += 1;
                if row.origin.as_ref().is_some_and(|o| o.kind == "requested") {
                    *s.helpers.entry(t.team.clone()).or_default() += 1;
                }
                let member_row = match row.kind {
                    RowKind::Member => true,
                    RowKind::MainSession | RowKind::Transcript => false,
                };
                if !member_row {
                    continue;
                }
                if s.members.len() >= MAX_MEMBER_SERIES {
                    s.left_out += 1;
                    continue;
                }
                let u = row.usage.unwrap_or_default();
                s.members.push(MemberFigures {
                    team: t.team.clone(),
                    member: row.name.clone(),
                    restarts: row.restarts,
                    cpu_seconds: u.cpu_seconds,
                    memory_bytes: u.memory_bytes,
                    memory_limit_bytes: u.memory_limit_bytes,
                    pids: u.pids,
                    pids_limit: u.pids_limit,
                    egress: row.egress.as_ref().map(|e| {
                        let c = e.last_minute;
                        [c.allowed, c.refused, c.failed]
                    }),
                    approvals: row.egress.as_ref().map(|e| {
                        e.approvals
                            .iter()
                            .filter(|p| p.not_approvable.is_none())
                            .count() as u64
                    }),
                    workspace: row
                        .workspace
                        .as_ref()
                        .filter(|w| w.error.is_none())
                        .map(|w| [w.ahead, w.uncommitted, w.uncollected]),
                });
            }
        }
        s
    }

    /// A look that failed: only `ateam_status_ok 0` (stale figures would mislead).
    pub fn failed(took: Duration) -> Snapshot {
        Snapshot {
            took_seconds: took.as_secs_f64(),
            ..Snapshot::default()
        }
    }
}

/// The latest snapshot, swapped whole at each refresh.
#[derive(Debug, Default)]
struct SnapshotCell(Mutex<Arc<Snapshot>>);

type Labels2<'a> = [(&'static str, &'a str); 2];
type Labels3<'a> = [(&'static str, &'a str); 3];

/// A gauge without labels.
fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl prometheus_client::encoding::EncodeGaugeValue,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&v)
}

/// A gauge family's series, one per `(labels, value)`.
fn gauges<'a, S: EncodeLabelSet + 'a, V: prometheus_client::encoding::EncodeGaugeValue + 'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (S, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

/// A counter family's series.
fn counters<'a, S: EncodeLabelSet + 'a, V: prometheus_client::encoding::EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (S, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        m.encode_family(&labels)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

impl Collector for SnapshotCell {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        gauge(
            &mut e,
            "ateam_status_ok",
            "1 if the last status look succeeded; 0: the member figures are left out.",
            i64::from(s.ok),
        )?;
        gauge(
            &mut e,
            "ateam_status_look_seconds",
            "How long the last status look took (cached a few seconds between scrapes).",
            s.took_seconds,
        )?;
        if !s.ok {
            return Ok(());
        }
        let states = s.states.iter().map(|((team, kind, state), n)| {
            let l: Labels3 = [("team", team), ("kind", kind), ("state", state)];
            (l, *n as i64)
        });
        gauges(
            &mut e,
            "ateam_members",
            "Rows of status by team, kind (member, main_session, transcript) and state.",
            states,
        )?;
        let helpers = s
            .helpers
            .iter()
            .map(|(t, n)| ([("team", t.as_str())], *n as i64));
        gauges(
            &mut e,
            "ateam_helper_members",
            "Members that exist because another member asked for them (accepted helper requests still desired).",
            helpers,
        )?;
        let requests = s.helper_requests.iter().map(|((t, outcome), n)| {
            let l: Labels2 = [("team", t.as_str()), ("outcome", outcome)];
            (l, *n as i64)
        });
        gauges(
            &mut e,
            "ateam_helper_requests",
            "Helper requests by outcome (granted, refused) among the team's kept events (`ateam events`; bounded, so a gauge).",
            requests,
        )?;
        let tasks = s.board_tasks.iter().map(|((t, state), n)| {
            let l: Labels2 = [("team", t.as_str()), ("state", state)];
            (l, *n as i64)
        });
        gauges(
            &mut e,
            "ateam_board_tasks",
            "Tasks on the team's board by state (todo, claimed, inProgress, done).",
            tasks,
        )?;
        let messages = s
            .board_messages
            .iter()
            .map(|(t, n)| ([("team", t.as_str())], *n as i64));
        gauges(
            &mut e,
            "ateam_board_messages",
            "Messages the team's board holds (bounded: the oldest are dropped).",
            messages,
        )?;
        gauge(
            &mut e,
            "ateam_member_series_left_out",
            "Member rows left out of the per-member families by the cap.",
            s.left_out,
        )?;
        encode_members(&mut e, &s.members)
    }
}

/// The per-member families.
fn encode_members(e: &mut DescriptorEncoder, ms: &[MemberFigures]) -> Result<(), std::fmt::Error> {
    counters(
        e,
        "ateam_member_restarts",
        "Restarts ateam made by the member's restart policy.",
        ms.iter().map(|m| (m.labels(), m.restarts)),
    )?;
    counters(
        e,
        "ateam_member_cpu_seconds",
        "CPU time the running member used since its container started (its cgroup).",
        ms.iter()
            .filter_map(|m| m.cpu_seconds.map(|v| (m.labels(), v))),
    )?;
    let opt = |f: fn(&MemberFigures) -> Option<u64>| {
        ms.iter().filter_map(move |m| f(m).map(|v| (m.labels(), v)))
    };
    gauges(
        e,
        "ateam_member_memory_bytes",
        "Memory the running member uses now (its cgroup).",
        opt(|m| m.memory_bytes),
    )?;
    gauges(
        e,
        "ateam_member_memory_limit_bytes",
        "The running member's memory limit (absent: none).",
        opt(|m| m.memory_limit_bytes),
    )?;
    gauges(
        e,
        "ateam_member_pids",
        "Processes in the running member.",
        opt(|m| m.pids),
    )?;
    gauges(
        e,
        "ateam_member_pids_limit",
        "The running member's pids limit (absent: none).",
        opt(|m| m.pids_limit),
    )?;
    let egress = ms.iter().flat_map(|m| {
        let [team, member] = m.labels();
        ["allowed", "refused", "failed"]
            .into_iter()
            .zip(m.egress.unwrap_or_default())
            .filter(|_| m.egress.is_some())
            .map(move |(verdict, n)| ([team, member, ("verdict", verdict)], n))
    });
    gauges(
        e,
        "ateam_egress_decisions_last_minute",
        "What the member's egress proxy decided in the last minute, by verdict.",
        egress,
    )?;
    gauges(
        e,
        "ateam_member_pending_approvals",
        "Refusals of the member a person could approve (ateam approvals), by what they ask.",
        ms.iter()
            .filter_map(|m| m.approvals.map(|n| (m.labels(), n))),
    )?;
    let ws = |i: usize| {
        ms.iter()
            .filter_map(move |m| m.workspace.map(|w| (m.labels(), w[i])))
    };
    gauges(
        e,
        "ateam_workspace_ahead_commits",
        "Commits on a writer's branch that its base has not.",
        ws(0),
    )?;
    gauges(
        e,
        "ateam_workspace_uncommitted_files",
        "Files of a writer's workspace that differ from its branch's commit.",
        ws(1),
    )?;
    gauges(
        e,
        "ateam_workspace_uncollected_commits",
        "Commits of a writer not yet collected into the person's repository.",
        ws(2),
    )
}

/// Why `--metrics ADDR` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// Not `host:port`.
    #[error("`{0}` is not an address and port (127.0.0.1:9464, [::1]:9464, localhost:9464)")]
    Syntax(String),
    /// The figures name teams and members: not for the network unless asked.
    #[error(
        "`{0}` is not a loopback address: the metrics name your teams and members; \
         use 127.0.0.1, [::1] or localhost, or add --metrics-allow-remote"
    )]
    NotLoopback(String),
}

/// The address `--metrics` listens on: an IP literal with a port, or `localhost:PORT`
/// (taken as 127.0.0.1, never looked up: a hosts file could point it anywhere). Loopback
/// only unless `allow_remote`.
pub fn listen_addr(raw: &str, allow_remote: bool) -> Result<SocketAddr, AddrError> {
    let addr = match raw.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .map(|p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p))
            .map_err(|_| AddrError::Syntax(raw.into()))?,
        None => raw
            .parse::<SocketAddr>()
            .map_err(|_| AddrError::Syntax(raw.into()))?,
    };
    if !allow_remote && !addr.ip().is_loopback() {
        return Err(AddrError::NotLoopback(raw.into()));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests;
