//! What ateam tells people and tools: the plan as a diff, and the status of each team. Pure
//! functions over plans and observations, so the wording is tested without an engine.
//! `documents`: the same as documents for machines (`-o json|yaml`), with their schemas.

mod documents;
#[cfg(test)]
mod tests;

pub use documents::{
    API_VERSION, Change, ContainerId, ControllerStatus, DiffDocument, DiffFinding, FieldChange,
    LastReconcile, StatusDocument, diff_document, diff_schema, status_schema,
};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Serialize;

use crate::core::container::{ExitReason, LastExit, labels, rfc3339, rfc3339_epoch};
use crate::manifest::quantity::human_bytes;
use crate::model::{AccessGrant, Network, Parent, Team};
use crate::plan::{
    Action, ContainerState, Drift, Finding, Observed, ObservedContainer, Plan, StartReason,
};

/// The plan, one line per change, grouped by team; then whether the machine differs from
/// the manifests (`Plan::drifted`), in words.
pub fn render_diff(plan: &Plan) -> String {
    let mut by_team: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in &plan.actions {
        let (team, _) = a.subject();
        by_team
            .entry(team.to_string())
            .or_default()
            .push(format!("  {}", action_text(a)));
    }
    for f in &plan.findings {
        if let Some(line) = finding_text(f) {
            let (team, _) = f.subject();
            by_team
                .entry(team.to_string())
                .or_default()
                .push(format!("  {line}"));
        }
    }
    let mut out = String::new();
    for (team, lines) in by_team {
        out.push_str(&format!("team {team}:\n"));
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    if plan.actions.is_empty() {
        out.push_str(if plan.drifted() {
            "no changes apply would make, but the machine differs from the manifests (above)\n"
        } else {
            "no changes\n"
        });
    }
    out
}

/// One change, as `diff` says it (`+` adds, `-` removes, `~` changes, `>` starts).
pub fn action_text(a: &Action) -> String {
    match a {
        Action::MakeTranscriptDir { member, path, .. } => {
            format!("+ transcript folder of {member}: {}", path.display())
        }
        Action::StartEgressProxy { member, .. } => format!("+ egress proxy of {member}"),
        Action::UpdateEgressPolicy { member, policy, .. } => {
            format!(
                "~ egress allow list of {member}: {}",
                policy.allow.join(",")
            )
        }
        Action::StopEgressProxy { member, .. } => format!("- egress proxy of {member}"),
        Action::StartHelperServer { member, .. } => format!("+ helper server of {member}"),
        Action::StopHelperServer { member, .. } => format!("- helper server of {member}"),
        Action::StartSession { session, resume } => format!(
            "+ start main session {} (tmux -S {}){}",
            session.name,
            session.socket.display(),
            match &session.takes_over {
                Some(old) => format!(
                    ", taking over {old}'s members ({}) with a resume file",
                    resume.len()
                ),
                None => String::new(),
            }
        ),
        Action::Promote {
            session, journal, ..
        } => format!(
            "~ promote member {} to main session{}: stop it, move its transcript to {}, start the session",
            session.name,
            journal
                .as_ref()
                .map(|j| format!(" (interrupted after step `{}`: go on)", j.step.as_str()))
                .unwrap_or_default(),
            session.transcript_dir.display()
        ),
        Action::StopSession {
            session,
            taken_over_by,
            ..
        } => match taken_over_by {
            Some(heir) => format!("- stop main session {session}: {heir} takes it over"),
            None => format!("- stop main session {session}: no manifest wants it"),
        },
        Action::RollBackPromotion { journal } => format!(
            "~ undo the interrupted promotion of {} (after step `{}`): the manifests no longer ask for it",
            journal.name,
            journal.step.as_str()
        ),
        Action::Create { member } => {
            format!("+ create {} ({})", member.member, member.spec.name)
        }
        Action::Recreate { member, reason, .. } => {
            format!("~ recreate {}: {}", member.member, drift_text(reason))
        }
        Action::Start { member, reason, .. } => {
            format!("> start {member}: {}", start_text(reason))
        }
        Action::RemoveOrphan {
            member,
            container,
            why,
            ..
        } => format!(
            "- remove {member} ({}): {}",
            container.name,
            why.as_deref().unwrap_or("no manifest wants it")
        ),
        Action::RemoveDuplicate {
            member, container, ..
        } => format!(
            "- remove duplicate of {member} ({} {})",
            container.name,
            short(&container.id)
        ),
        Action::FinishReplacement { member, name, .. } => {
            format!("~ finish replacing {member}: rename to {name}")
        }
        Action::RestoreName {
            member,
            container,
            name,
            ..
        } => format!(
            "~ rename {member} back: {} was renamed, its name is {name}",
            container.name
        ),
        Action::Unpause { member, .. } => format!("> unpause {member}: someone paused it"),
        Action::RemoveStranger {
            member, container, ..
        } => format!(
            "- remove stranger {} {}: it carries the labels of {member} but ateam did not make it",
            container.name,
            short(&container.id)
        ),
    }
}

/// What apply leaves alone, as `diff` says it (`?` and `!` are drift, `=` is not); none for
/// a finished member (its state says it).
pub fn finding_text(f: &Finding) -> Option<String> {
    Some(match f {
        Finding::Orphan {
            member, container, ..
        } => format!(
            "? orphan {member} ({}): kept; --prune removes it",
            container.name
        ),
        Finding::Conflict {
            container, member, ..
        } => format!(
            "! conflict: {} exists and ateam did not make it; {member} cannot be created",
            container.name
        ),
        Finding::OrphanSession { session, .. } => format!(
            "? main session {session}: its terminal runs, no manifest wants it; --prune stops it"
        ),
        Finding::RetainedTranscript { member, path, .. } => format!(
            "= transcript of removed member {member} kept: {}",
            path.display()
        ),
        Finding::Stranger {
            member, container, ..
        } => format!(
            "! stranger {} {}: it carries the labels of {member} but ateam did not make it; never adopted, --prune removes it",
            container.name,
            short(&container.id)
        ),
        Finding::Finished { .. } => return None,
    })
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

pub fn drift_text(d: &Drift) -> String {
    match d {
        Drift::Spec { changes } => changes
            .iter()
            .map(|c| format!("{} changed from {} to {}", c.field, c.from, c.to))
            .collect::<Vec<_>>()
            .join("; "),
        Drift::SpecHash { from, to } => format!("spec hash changed from {from} to {to}"),
        Drift::Policy { violations } => format!(
            "policy violation: {}",
            violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Drift::Dead => "the engine marks it dead".into(),
    }
}

pub fn start_text(r: &StartReason) -> String {
    match r {
        StartReason::NeverStarted => "created but never started".into(),
        StartReason::NotReleased => {
            "held at its gate: started since ateam last checked it (a restart, or an interrupted apply)".into()
        }
        StartReason::Restart { code, policy } => {
            format!("exited {code}, restart policy {policy:?}")
        }
    }
}

/// What a row of `status` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum RowKind {
    /// A main session: a terminal on the host, with your own access.
    MainSession,
    /// A member's container (or a container with a member's labels: an orphan, a stranger).
    Member,
    /// The kept transcript of a member no manifest wants any more.
    Transcript,
}

/// A member's egress: its proxy, and what it refused since the last apply.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressStatus {
    /// `running`, `down` (apply starts it) or `stale list` (apply gives it the new list).
    pub proxy: String,
    /// The most refused destinations (at most `egress::log::SHOWN`), most frequent first.
    pub refused: Vec<crate::egress::log::Refusal>,
    /// The refused destinations not in `refused`, and how many refusals they had.
    pub refused_left_out: LeftOut,
    /// The AccessGrant that would allow the most refused, ready to paste: never with a
    /// local, metadata or private address or a port that serves more than the web.
    pub suggested_grant: Option<String>,
    /// Entries left out of `suggested_grant` on purpose, each saying what it would open.
    pub not_suggested: Vec<String>,
    /// Entries left out of `suggested_grant` to keep it short.
    pub not_suggested_more: usize,
    /// What its proxy decided in the last minute.
    pub last_minute: EgressCounts,
}

/// How many requests a proxy let through and refused in a span of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressCounts {
    pub allowed: u64,
    pub refused: u64,
    /// Allowed by the list but not carried (no such name, the upstream failed).
    pub failed: u64,
}

impl EgressCounts {
    /// The decisions among `events` made since `since` (seconds since the epoch).
    pub fn of(events: &[crate::egress::log::Event], since: f64) -> EgressCounts {
        use crate::egress::log::Verdict;
        let mut c = EgressCounts::default();
        for e in events.iter().filter(|e| e.ts >= since) {
            match e.verdict {
                Verdict::Allowed => c.allowed += 1,
                Verdict::Refused => c.refused += 1,
                Verdict::Failed => c.failed += 1,
            }
        }
        c
    }
}

/// What a running member uses now, as its cgroup counts it, and the limits it runs under.
/// Each figure is absent where the kernel's files could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// CPU time since its container started (a counter: its rate is the CPU share).
    pub cpu_seconds: Option<f64>,
    pub memory_bytes: Option<u64>,
    /// None: no memory limit.
    pub memory_limit_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// None: no pids limit.
    pub pids_limit: Option<u64>,
}

/// Refusals beyond those listed: `status` stays short however much a member knocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeftOut {
    pub destinations: usize,
    pub refusals: u64,
}

impl EgressStatus {
    /// Takes in the refusals since the last apply (`refused`: most frequent first) of a
    /// member of `team` with `grant`: the top ones, a count of the rest, and the grant to paste.
    pub fn add_refusals(
        &mut self,
        team: &str,
        grant: &AccessGrant,
        mut refused: Vec<crate::egress::log::Refusal>,
    ) {
        use crate::egress::log::{SHOWN, suggest};
        let s = suggest(team, grant, &refused);
        self.suggested_grant = s.grant;
        self.not_suggested = s.withheld;
        self.not_suggested_more = s.more;
        let rest = refused.split_off(refused.len().min(SHOWN));
        self.refused_left_out = LeftOut {
            destinations: rest.len(),
            refusals: rest.iter().map(|r| r.count).sum(),
        };
        self.refused = refused;
    }
}

impl RowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::MainSession => "MainSession",
            RowKind::Member => "Member",
            RowKind::Transcript => "Transcript",
        }
    }
}

/// What a member may use: its AccessGrant, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grants {
    /// The AccessGrant's name.
    pub name: String,
    /// Folders mounted read-only.
    pub read: Vec<PathBuf>,
    /// Folders mounted read-write.
    pub write: Vec<PathBuf>,
    /// Those of `write` the member's uid cannot write (by owner, group and mode bits): the
    /// table shows them as `rw!:`, never as writable. Empty when all are writable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_writable: Vec<PathBuf>,
    /// The uid the member runs as, when some of `write` is not writable by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_writable_by: Option<u32>,
    pub network: NetworkGrant,
}

/// The network a member may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkGrant {
    pub mode: NetworkMode,
    /// The hosts of an `allow` grant; empty otherwise.
    pub allow: Vec<String>,
    /// Those of `allow` tunnelled as they are (end-to-end TLS).
    pub tunnelled: Vec<String>,
    /// Those of `allow` with rules: the proxy reads and judges each request.
    pub intercepted: Vec<String>,
    /// The credentials the proxy puts on requests, by secret name (never a value).
    pub injected: Vec<Injection>,
}

/// One credential the proxy injects: `ANTHROPIC_API_KEY -> api.anthropic.com (x-api-key)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Injection {
    /// The member's `secretEnv` whose value the proxy holds.
    pub secret: String,
    pub host: String,
    /// The header it goes in: a header name, `bearer` or `basic` (both `Authorization`).
    pub how: String,
}

impl std::fmt::Display for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {} ({})", self.secret, self.host, self.how)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NetworkMode {
    /// No network at all.
    None,
    /// Only the listed hosts (through the egress proxy).
    Allow,
    /// The engine's default network.
    Open,
}

impl Grants {
    pub fn of(g: &AccessGrant) -> Grants {
        let (mode, allow) = match &g.network {
            Network::None => (NetworkMode::None, vec![]),
            Network::Allow(hosts) => (NetworkMode::Allow, hosts.clone()),
            Network::Open => (NetworkMode::Open, vec![]),
        };
        use crate::core::intercept::Credential;
        let ruled = |h: &String| g.intercept.iter().any(|i| i.host == *h);
        let (intercepted, tunnelled) = allow.iter().cloned().partition(ruled);
        let injected = g
            .intercept
            .iter()
            .filter_map(|i| {
                let c = i.credentials.as_ref()?;
                let how = match c {
                    Credential::Header { header, .. } => header.clone(),
                    Credential::Bearer { .. } => "bearer".into(),
                    Credential::Basic { .. } => "basic".into(),
                };
                Some(Injection {
                    secret: c.secret().to_string(),
                    host: i.host.clone(),
                    how,
                })
            })
            .collect();
        Grants {
            name: g.name.clone(),
            read: g.read.clone(),
            write: g.write.clone(),
            not_writable: vec![],
            not_writable_by: None,
            network: NetworkGrant {
                mode,
                allow,
                tunnelled,
                intercepted,
                injected,
            },
        }
    }

    /// For the table: folder names and the network, `ro:repo,docs rw:work net:none`.
    pub fn summary(&self) -> String {
        let names = |v: &[PathBuf]| {
            v.iter()
                .map(|p| {
                    // Shown escaped: a folder a member named (a helper's grant) never
                    // steers the terminal.
                    p.file_name()
                        .map(|n| crate::core::untrusted::shown(&n.to_string_lossy()).into_owned())
                        .unwrap_or_else(|| "/".into())
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let net = match self.network.mode {
            NetworkMode::None => "none".to_string(),
            NetworkMode::Allow => format!(
                "allow {}",
                self.network
                    .allow
                    .iter()
                    .map(|e| {
                        let ruled = self.network.intercepted.contains(e);
                        allow_entry_shown(e) + if ruled { "(rules)" } else { "" }
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            NetworkMode::Open => "open(widest:any host)".into(),
        };
        let mut parts = Vec::new();
        if !self.read.is_empty() {
            parts.push(format!("ro:{}", names(&self.read)));
        }
        let (bad, good): (Vec<PathBuf>, Vec<PathBuf>) = self
            .write
            .iter()
            .cloned()
            .partition(|p| self.not_writable.contains(p));
        if !good.is_empty() {
            parts.push(format!("rw:{}", names(&good)));
        }
        if !bad.is_empty() {
            let by = self
                .not_writable_by
                .map(|u| format!(" (not writable by uid {u})"))
                .unwrap_or_default();
            parts.push(format!("rw!:{}{by}", names(&bad)));
        }
        parts.push(format!("net:{net}"));
        parts.join(" ")
    }
}

/// One row of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberStatus {
    pub name: String,
    pub kind: RowKind,
    /// The main session or member it works for; none for a main session, an orphan, a
    /// stranger, a kept transcript.
    pub parent: Option<String>,
    /// `running`, `exited N`, `missing`, `drifted`, `policy violation`, `held at gate`,
    /// `orphan`, `stranger`, `conflict`, `retained`, ... (for people; `drifted` is the
    /// verdict).
    pub state: String,
    /// Why, when the state is not plain (the drifted field, the violations, what apply does).
    pub detail: Option<String>,
    /// This row differs from the manifests (`Plan::drifted`, the definition diff shares).
    pub drifted: bool,
    /// The container's name.
    pub container: Option<String>,
    /// The container's id.
    pub container_id: Option<String>,
    /// When the container was created (RFC 3339).
    pub created_at: Option<String>,
    /// Seconds since `createdAt`.
    pub age_secs: Option<u64>,
    /// How often ateam restarted it by its restart policy.
    pub restarts: u64,
    /// When a running controller restarts this crash-looping member next (RFC 3339).
    pub next_restart: Option<String>,
    /// How it last ended: the engine's record while its container is exited, else the last
    /// exit or failed start ateam saw (kept across restarts).
    pub last_exit: Option<LastExit>,
    /// Its transcript folder.
    pub transcript: Option<PathBuf>,
    pub transcript_bytes: u64,
    /// When its transcript last changed (RFC 3339).
    pub last_activity_at: Option<String>,
    /// Seconds since `lastActivityAt`.
    pub last_activity_secs: Option<u64>,
    /// Its AccessGrant; none for a main session (your own access) and for rows no manifest
    /// describes.
    pub grants: Option<Grants>,
    /// Memory and pids limits are not enforced by this engine (allowed by the team).
    pub limits_unenforced: bool,
    /// Its egress proxy, for a member whose network is an allow list.
    pub egress: Option<EgressStatus>,
    /// A main session's terminal: the tmux socket (`tmux -S <it> attach`, or `ateam attach`).
    pub terminal: Option<PathBuf>,
    /// Why a member exists: a manifest, or another member's request. None for other rows.
    pub origin: Option<OriginStatus>,
    /// What it uses now, while its container runs.
    pub usage: Option<Usage>,
}

/// Where a member comes from.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OriginStatus {
    /// `manifest` or `requested`.
    pub kind: String,
    /// The member that asked for it (`requested`).
    pub requested_by: Option<String>,
    /// When it asked (RFC 3339).
    pub requested_at: Option<String>,
}

impl OriginStatus {
    fn of(o: &crate::model::Origin) -> OriginStatus {
        match o {
            crate::model::Origin::Manifest => OriginStatus {
                kind: "manifest".into(),
                requested_by: None,
                requested_at: None,
            },
            crate::model::Origin::Requested { by, at } => OriginStatus {
                kind: "requested".into(),
                requested_by: Some(by.clone()),
                requested_at: Some(at.clone()),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeamStatus {
    pub team: String,
    /// `docker`, `podman` or `podman (rootless)`.
    pub engine: String,
    pub members: Vec<MemberStatus>,
    /// Anything of this team differs from the manifests.
    pub drifted: bool,
}

/// Facts status needs that are not in the plan: read from disk by the caller.
pub struct Extras<'a> {
    pub now: SystemTime,
    pub transcript_usage: &'a dyn Fn(&std::path::Path) -> (u64, Option<SystemTime>),
    pub restarts: &'a dyn Fn(&str, &str) -> u64,
    /// The last exit ateam recorded for `(team, member)` (`store::Record`).
    pub last_exit: &'a dyn Fn(&str, &str) -> Option<LastExit>,
    /// A main session's terminal, by team and name.
    pub session: &'a dyn Fn(&str, &str) -> SessionFacts,
    /// `Some(uid)` when a member of this `user` (`None`: the host's default) runs as `uid`
    /// and cannot write this folder (`host::access`).
    pub not_writable: &'a dyn Fn(&std::path::Path, Option<crate::model::UserId>) -> Option<u32>,
}

/// A member's grants, with the write grants its uid cannot write marked.
fn grants_of(m: &crate::model::Member, extras: &Extras<'_>) -> Grants {
    let mut g = Grants::of(&m.access);
    for p in &m.access.write {
        if let Some(uid) = (extras.not_writable)(p, m.user) {
            g.not_writable.push(p.clone());
            g.not_writable_by = Some(uid);
        }
    }
    g
}

/// What status shows of a main session beyond the plan.
pub struct SessionFacts {
    /// Its tmux socket.
    pub socket: PathBuf,
    /// When ateam started it, in seconds since the epoch.
    pub started: Option<i64>,
}

impl Extras<'_> {
    fn secs_since(&self, t: SystemTime) -> u64 {
        self.now.duration_since(t).map(|d| d.as_secs()).unwrap_or(0)
    }

    fn age(&self, c: &ObservedContainer) -> u64 {
        let now = self
            .now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        (now - c.created).max(0) as u64
    }
}

/// The later of two exits (RFC 3339 UTC times compare as text; one without a time is older).
fn later(a: Option<LastExit>, b: Option<LastExit>) -> Option<LastExit> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.at > a.at { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The status of one team, from its model, what was observed and the plan made from them.
/// A row is drifted exactly when the plan says so (`Plan::subject_drifted`): status, diff
/// and apply --dry-run give one verdict.
pub fn team_status(
    team: &Team,
    engine: &str,
    observed: &Observed,
    plan: &Plan,
    extras: &Extras,
) -> TeamStatus {
    let mine = |member: &str| {
        observed.containers.iter().find(|c| {
            c.labels.get(labels::TEAM).map(String::as_str) == Some(&team.name)
                && c.labels.get(labels::MEMBER).map(String::as_str) == Some(member)
                && observed.recorded.contains(&c.id)
                && !crate::core::container::is_replacement(
                    &crate::core::container::container_name(&team.name, member),
                    &c.name,
                    &c.labels,
                )
        })
    };
    // What the plan would do about this row, in diff's words: the detail of a row whose
    // state alone does not say why it drifted.
    let planned = |subject: &str| {
        let lines: Vec<String> = plan
            .actions
            .iter()
            .filter(|a| a.subject() == (team.name.as_str(), subject))
            .map(action_text)
            .collect();
        (!lines.is_empty()).then(|| format!("apply would: {}", lines.join("; ")))
    };
    let drifted = |subject: &str| plan.subject_drifted(&team.name, subject);
    let mut rows = Vec::new();
    for s in &team.sessions {
        let running = !plan.actions.iter().any(|a| matches!(a, Action::StartSession { session, .. } | Action::Promote { session, .. } if session.name == s.name && session.team == team.name));
        let SessionFacts { socket, started } = (extras.session)(&team.name, &s.name);
        let transcript = if s.transcript_dir.as_os_str().is_empty() {
            crate::core::layout::session_transcript_dir(&team.session_dir, &s.name)
        } else {
            s.transcript_dir.clone()
        };
        let (bytes, last) = (extras.transcript_usage)(&transcript);
        let now_secs = extras
            .now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let started = started.filter(|_| running);
        let origin = match (&s.promoted_from, &s.takes_over) {
            (Some(m), _) => Some(format!("promoted from member {m}")),
            (None, Some(old)) => Some(format!("took over from {old}")),
            (None, None) => None,
        };
        rows.push(MemberStatus {
            name: s.name.clone(),
            kind: RowKind::MainSession,
            parent: None,
            state: if running {
                "running".into()
            } else {
                "not running".into()
            },
            detail: if running { origin } else { planned(&s.name) },
            drifted: drifted(&s.name),
            container: None,
            container_id: None,
            created_at: started.and_then(rfc3339_epoch),
            age_secs: started.map(|t| (now_secs - t).max(0) as u64),
            restarts: 0,
            next_restart: None,
            last_exit: None,
            transcript: Some(transcript),
            transcript_bytes: bytes,
            last_activity_at: last.map(rfc3339),
            last_activity_secs: last.map(|t| extras.secs_since(t)),
            grants: None,
            limits_unenforced: false,
            egress: None,
            terminal: Some(socket),
            origin: None,
            usage: None,
        });
    }
    for m in &team.members {
        let c = mine(&m.name);
        let action = plan.actions.iter().find(|a| {
            a.subject() == (team.name.as_str(), m.name.as_str())
                && matches!(
                    a,
                    Action::Create { .. }
                        | Action::Recreate { .. }
                        | Action::Start { .. }
                        | Action::FinishReplacement { .. }
                        | Action::RestoreName { .. }
                )
        });
        let conflict = plan.findings.iter().any(|f| matches!(f, Finding::Conflict { team: t, member, .. } if *t == team.name && *member == m.name));
        let (state, detail) = match (c, action) {
            _ if conflict => (
                "conflict".to_string(),
                Some("a container ateam did not make holds its name".to_string()),
            ),
            (None, _) => ("missing".into(), None),
            (
                Some(_),
                Some(Action::Recreate {
                    reason: r @ Drift::Policy { .. },
                    ..
                }),
            ) => ("policy violation".into(), Some(drift_text(r))),
            (Some(_), Some(Action::Recreate { reason, .. })) => {
                ("drifted".into(), Some(drift_text(reason)))
            }
            (Some(c), Some(Action::RestoreName { name, .. })) => (
                "renamed".into(),
                Some(format!("renamed to {}; apply names it {name} again", c.name)),
            ),
            (Some(c), _) => match c.state {
                ContainerState::Running if !c.released => (
                    "held at gate".into(),
                    Some("started since ateam last checked it (a restart, or an interrupted apply): its command does not run; apply checks and releases it".into()),
                ),
                ContainerState::Running | ContainerState::Restarting => ("running".into(), None),
                ContainerState::Exited { code } => (
                    format!("exited {code}"),
                    action.map(|_| "the restart policy asks for a restart".to_string()),
                ),
                ContainerState::Created => ("created".into(), Some("never started".into())),
                ContainerState::Paused => (
                    "paused".into(),
                    Some("someone paused it; apply lets it go on".into()),
                ),
                ContainerState::Removing => ("removing".into(), None),
                ContainerState::Dead => ("dead".into(), None),
            },
        };
        let drifted = drifted(&m.name);
        let detail = match detail {
            None if drifted => planned(&m.name),
            d => d,
        };
        let (state, detail, drifted, egress) = egress_state(team, m, plan, state, detail, drifted);
        // A running member whose helper server is silent: its requests fail until apply (or
        // the controller) starts the server.
        let helpers_down = plan.actions.iter().any(|a| {
            matches!(a, Action::StartHelperServer { team: t, member } if *t == team.name && *member == m.name)
        });
        let state = if helpers_down && state == "running" {
            "helpers down".to_string()
        } else {
            state
        };
        let (bytes, last) = (extras.transcript_usage)(&m.transcript_dir);
        rows.push(MemberStatus {
            name: m.name.clone(),
            kind: RowKind::Member,
            parent: Some(match &m.parent {
                Parent::MainSession(p) | Parent::Member(p) => p.clone(),
            }),
            state,
            detail,
            drifted,
            container: c.map(|c| c.name.clone()),
            container_id: c.map(|c| c.id.clone()),
            created_at: c.and_then(|c| rfc3339_epoch(c.created)),
            age_secs: c.map(|c| extras.age(c)),
            restarts: (extras.restarts)(&team.name, &m.name),
            next_restart: None,
            last_exit: later(
                (extras.last_exit)(&team.name, &m.name),
                c.and_then(|c| c.last_exit.clone()),
            ),
            transcript: Some(m.transcript_dir.clone()),
            transcript_bytes: bytes,
            last_activity_at: last.map(rfc3339),
            last_activity_secs: last.map(|t| extras.secs_since(t)),
            grants: Some(grants_of(m, extras)),
            limits_unenforced: observed.limits_unenforced && c.is_some(),
            egress,
            terminal: None,
            origin: Some(OriginStatus::of(&m.origin)),
            usage: None,
        });
    }
    let strangers = plan
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::Stranger {
                team,
                member,
                container,
            } => Some((team, member, container)),
            _ => None,
        })
        .chain(plan.actions.iter().filter_map(|a| match a {
            Action::RemoveStranger {
                team,
                member,
                container,
            } => Some((team, member, container)),
            _ => None,
        }));
    // A container that is no member of the manifests: an orphan or a stranger.
    let unwanted_row =
        |member: &str, container: &crate::plan::ContainerRef, state: &str, detail| {
            let c = observed.containers.iter().find(|c| c.id == container.id);
            MemberStatus {
                name: member.to_string(),
                kind: RowKind::Member,
                parent: None,
                state: state.into(),
                detail: Some(detail),
                drifted: true,
                container: Some(container.name.clone()),
                container_id: Some(container.id.clone()),
                created_at: c.and_then(|c| rfc3339_epoch(c.created)),
                age_secs: c.map(|c| extras.age(c)),
                restarts: 0,
                next_restart: None,
                last_exit: c.and_then(|c| c.last_exit.clone()),
                transcript: None,
                transcript_bytes: 0,
                last_activity_at: None,
                last_activity_secs: None,
                grants: None,
                limits_unenforced: false,
                egress: None,
                terminal: None,
                origin: None,
                usage: None,
            }
        };
    for (_, member, container) in strangers.filter(|(t, _, _)| **t == team.name) {
        rows.push(unwanted_row(
            member,
            container,
            "stranger",
            format!(
                "{} {} carries ateam's labels but ateam did not make it: never adopted nor released; apply removes it when it holds a member's name, --prune in any case",
                container.name,
                short(&container.id)
            ),
        ));
    }
    for f in &plan.findings {
        match f {
            Finding::Orphan {
                team: t,
                member,
                container,
            } if *t == team.name => rows.push(unwanted_row(
                member,
                container,
                "orphan",
                "no manifest wants it; apply --prune removes it".into(),
            )),
            Finding::RetainedTranscript {
                team: t,
                member,
                path,
            } if *t == team.name => {
                let (bytes, last) = (extras.transcript_usage)(path);
                rows.push(MemberStatus {
                    name: member.clone(),
                    kind: RowKind::Transcript,
                    parent: None,
                    state: "retained".into(),
                    detail: Some(
                        "the member is gone; its transcript is kept (delete --purge removes it)"
                            .into(),
                    ),
                    drifted: false,
                    container: None,
                    container_id: None,
                    created_at: None,
                    age_secs: None,
                    restarts: 0,
                    next_restart: None,
                    last_exit: None,
                    transcript: Some(path.clone()),
                    transcript_bytes: bytes,
                    last_activity_at: last.map(rfc3339),
                    last_activity_secs: last.map(|t| extras.secs_since(t)),
                    grants: None,
                    limits_unenforced: false,
                    egress: None,
                    terminal: None,
                    origin: None,
                    usage: None,
                });
            }
            Finding::OrphanSession { team: t, session } if *t == team.name => {
                let SessionFacts { socket, started } = (extras.session)(&team.name, session);
                rows.push(MemberStatus {
                    name: session.clone(),
                    kind: RowKind::MainSession,
                    parent: None,
                    state: "orphan".into(),
                    detail: Some(
                        "its terminal runs but no manifest wants it; apply --prune stops it".into(),
                    ),
                    drifted: true,
                    container: None,
                    container_id: None,
                    created_at: started.and_then(rfc3339_epoch),
                    age_secs: None,
                    restarts: 0,
                    next_restart: None,
                    last_exit: None,
                    transcript: None,
                    transcript_bytes: 0,
                    last_activity_at: None,
                    last_activity_secs: None,
                    grants: None,
                    limits_unenforced: false,
                    egress: None,
                    terminal: Some(socket),
                    origin: None,
                    usage: None,
                });
            }
            _ => {}
        }
    }
    TeamStatus {
        team: team.name.clone(),
        engine: engine.to_string(),
        members: rows,
        drifted: plan.team_drifted(&team.name),
    }
}

/// A member's egress proxy as the plan sees it: down (to start), or holding an old list.
fn egress_state(
    team: &Team,
    m: &crate::model::Member,
    plan: &Plan,
    state: String,
    detail: Option<String>,
    drifted: bool,
) -> (String, Option<String>, bool, Option<EgressStatus>) {
    if !matches!(m.access.network, Network::Allow(_)) {
        return (state, detail, drifted, None);
    }
    let ours = |t: &String, member: &String| *t == team.name && *member == m.name;
    let down = plan
        .actions
        .iter()
        .any(|a| matches!(a, Action::StartEgressProxy { team: t, member, .. } if ours(t, member)));
    let stale = plan.actions.iter().any(
        |a| matches!(a, Action::UpdateEgressPolicy { team: t, member, .. } if ours(t, member)),
    );
    let (proxy, note) = if down {
        ("down", Some("egress proxy not running; apply starts it"))
    } else if stale {
        (
            "stale list",
            Some("egress allow list changed; apply gives the proxy the new list"),
        )
    } else {
        ("running", None)
    };
    let egress = Some(EgressStatus {
        proxy: proxy.into(),
        refused: vec![],
        refused_left_out: LeftOut::default(),
        suggested_grant: None,
        not_suggested: vec![],
        not_suggested_more: 0,
        last_minute: EgressCounts::default(),
    });
    let Some(note) = note else {
        return (state, detail, drifted, egress);
    };
    let state = if down && state == "running" {
        "egress down".to_string()
    } else {
        state
    };
    let detail = Some(match detail {
        Some(d) => format!("{d}; {note}"),
        None => note.to_string(),
    });
    (state, detail, true, egress)
}

/// An allowlist entry as status shows it: one that names a local address exactly (the way to
/// reach a service on this machine on purpose) is marked.
fn allow_entry_shown(h: &str) -> String {
    use crate::core::egress::{Entry, HOST_SERVICE, Target, special};
    let Ok(e) = Entry::parse(h) else {
        return h.to_string();
    };
    let local = match (&e.target, e.exact_address()) {
        (_, Some((ip, _))) => special(ip).is_some(),
        // The host's loopback, by the name the proxy alone knows.
        (Target::Name(n), None) => n == HOST_SERVICE,
        (Target::Below(_) | Target::Ip(_), None) => false,
    };
    if local {
        format!("{h}(local)")
    } else {
        h.to_string()
    }
}

fn ago(secs: Option<u64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 60 => format!("{s}s"),
        Some(s) if s < 3600 => format!("{}m", s / 60),
        Some(s) if s < 86400 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86400),
    }
}

/// The LAST EXIT cell: the code (or what ended it) and how long ago.
fn last_exit_cell(e: &LastExit, now: SystemTime) -> String {
    let what = match (e.reason, e.exit_code) {
        (ExitReason::OomKilled, _) => "oom-killed".to_string(),
        (ExitReason::StartFailed, _) => "start failed".to_string(),
        (ExitReason::Completed | ExitReason::Error, Some(code)) => code.to_string(),
        (ExitReason::Completed | ExitReason::Error, None) => "?".to_string(),
    };
    let when =
        e.at.as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .map(|t| now.duration_since(t).map(|d| d.as_secs()).unwrap_or(0));
    match when {
        Some(s) => format!("{what} ({} ago)", ago(Some(s))),
        None => what,
    }
}

/// The table people read.
/// The refusals and the grants to paste, below the status table: a bounded number of lines
/// per member (`egress::log::SHOWN` destinations, as many new entries, as many warnings).
pub fn render_refusals(teams: &[TeamStatus]) -> String {
    let mut out = String::new();
    for t in teams {
        for m in &t.members {
            let Some(e) = m.egress.as_ref().filter(|e| !e.refused.is_empty()) else {
                continue;
            };
            let logs = format!("ateam logs {} --egress", m.name);
            out.push_str(&format!(
                "egress refused for {}/{} since the last apply ({logs}):\n",
                t.team, m.name
            ));
            for r in &e.refused {
                out.push_str(&format!(
                    "  {}:{} ({}x): {}\n",
                    r.host, r.port, r.count, r.reason
                ));
            }
            let left = &e.refused_left_out;
            if left.destinations > 0 {
                out.push_str(&format!(
                    "  and {} more destinations ({} refusals): see {logs}\n",
                    left.destinations, left.refusals
                ));
            }
            if let Some(g) = &e.suggested_grant {
                let some = if e.not_suggested.is_empty() && e.not_suggested_more == 0 {
                    "them"
                } else {
                    "the most refused"
                };
                out.push_str(&format!("  to allow {some}, change the grant to:\n"));
                for l in g.lines() {
                    out.push_str(&format!("    {l}\n"));
                }
            }
            if !e.not_suggested.is_empty() {
                out.push_str("  not offered, allow only if you mean it:\n");
                for w in &e.not_suggested {
                    out.push_str(&format!("    {w}\n"));
                }
            }
            if e.not_suggested_more > 0 {
                out.push_str(&format!(
                    "  and {} more entries not offered: see {logs}\n",
                    e.not_suggested_more
                ));
            }
            out.push('\n');
        }
    }
    out
}

pub fn render_status(teams: &[TeamStatus], now: SystemTime) -> String {
    let mut out = String::new();
    for t in teams {
        out.push_str(&format!(
            "TEAM {} ({}){}\n",
            t.team,
            t.engine,
            if t.drifted { ": drifted" } else { "" }
        ));
        let header = [
            "NAME",
            "KIND",
            "PARENT",
            "STATE",
            "AGE",
            "RESTARTS",
            "LAST EXIT",
            "TRANSCRIPT",
            "ACTIVE",
            "GRANTS",
        ];
        let rows: Vec<[String; 10]> = t
            .members
            .iter()
            .map(|m| {
                let mut state = m.state.clone();
                if m.limits_unenforced {
                    state.push_str(", limits not enforced");
                }
                [
                    m.name.clone(),
                    m.kind.as_str().to_string(),
                    m.parent.clone().unwrap_or_else(|| "-".into()),
                    state,
                    ago(m.age_secs),
                    m.restarts.to_string(),
                    m.last_exit
                        .as_ref()
                        .map(|e| last_exit_cell(e, now))
                        .unwrap_or_else(|| "-".into()),
                    human_bytes(m.transcript_bytes),
                    ago(m.last_activity_secs),
                    match (&m.grants, m.kind) {
                        (Some(g), _) => g.summary(),
                        (None, RowKind::MainSession) => "host (your own access)".into(),
                        (None, RowKind::Member | RowKind::Transcript) => "-".into(),
                    },
                ]
            })
            .collect();
        let mut width = header.map(str::len);
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}  ", w = width[i]));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(header.to_vec()));
        for r in &rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
        }
        for m in &t.members {
            let asked: Vec<&str> = t
                .members
                .iter()
                .filter(|h| {
                    h.origin.as_ref().and_then(|o| o.requested_by.as_deref())
                        == Some(m.name.as_str())
                })
                .map(|h| h.name.as_str())
                .collect();
            if !asked.is_empty() {
                out.push_str(&format!(
                    "  {}: asked for helpers {}\n",
                    m.name,
                    asked.join(", ")
                ));
            }
            if let Some(o) = &m.origin
                && let Some(by) = &o.requested_by
            {
                out.push_str(&format!(
                    "  {}: requested by {by}{}\n",
                    m.name,
                    o.requested_at
                        .as_deref()
                        .map(|t| format!(" at {t}"))
                        .unwrap_or_default()
                ));
            }
            if let Some(d) = &m.detail {
                out.push_str(&format!("  {}: {d}\n", m.name));
            }
            for i in m.grants.iter().flat_map(|g| &g.network.injected) {
                out.push_str(&format!("  {}: injects {i}\n", m.name));
            }
            if let Some(e) = &m.last_exit
                && let Some(msg) = &e.message
            {
                out.push_str(&format!(
                    "  {}: last exit{}: {msg}\n",
                    m.name,
                    e.at.as_deref()
                        .map(|t| format!(" at {t}"))
                        .unwrap_or_default()
                ));
            }
        }
        for m in t.members.iter().filter(|m| m.kind == RowKind::MainSession) {
            if let Some(sock) = &m.terminal
                && m.state == "running"
            {
                out.push_str(&format!(
                    "  {}: terminal `tmux -S {} attach` (or `ateam attach {}`)\n",
                    m.name,
                    sock.display(),
                    m.name
                ));
            }
            if let Some(dir) = &m.transcript {
                out.push_str(&format!("  {}: transcript {}\n", m.name, dir.display()));
            }
        }
        out.push('\n');
    }
    out
}
