//! Status as people read it: the table per team, the notes under it, and the refusals with
//! the grant to paste, and the controller's line.

use std::path::PathBuf;
use std::time::SystemTime;

use super::documents::ControllerStatus;
use super::rows::{Grants, MemberStatus, NetworkMode, RowKind, TeamStatus};
use crate::core::container::{ExitReason, LastExit};
use crate::core::quantity::human_bytes;
use crate::core::transcript::Verdict;

impl Grants {
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

/// An allowlist entry as status shows it: one that names a local address exactly (the way to
/// reach a service on this machine on purpose) is marked.
pub(super) fn allow_entry_shown(h: &str) -> String {
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

/// The refusals and the grants to paste, below the status table: a bounded number of lines
/// per member (`servers::egress::log::SHOWN` destinations, as many new entries, as many warnings).
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
    out.push_str(&render_approvals(teams));
    out
}

/// The pending approvals, below the refusals: at most `approvals::SHOWN` per member.
fn render_approvals(teams: &[TeamStatus]) -> String {
    use crate::approvals::{SHOWN, line};
    let now = crate::servers::egress::log::Event::now();
    let mut out = String::new();
    for t in teams {
        for m in &t.members {
            let Some(e) = m.egress.as_ref().filter(|e| !e.approvals.is_empty()) else {
                continue;
            };
            out.push_str(&format!(
                "pending approvals of {}/{} (answer with `ateam approvals allow|deny ID`):\n",
                t.team, m.name
            ));
            for p in e.approvals.iter().take(SHOWN) {
                out.push_str(&format!("  {}\n", line(p, now)));
            }
            if e.approvals.len() > SHOWN {
                out.push_str(&format!(
                    "  and {} more: see `ateam approvals --team {}`\n",
                    e.approvals.len() - SHOWN,
                    t.team
                ));
            }
            out.push('\n');
        }
    }
    out
}

/// The table people read: per team, a row per main session, member and kept transcript,
/// then a note per row whose table cells cannot say it all.
pub fn render_status(teams: &[TeamStatus], now: SystemTime) -> String {
    let mut out = String::new();
    for t in teams {
        out.push_str(&format!(
            "TEAM {} ({}){}\n",
            t.team,
            t.engine,
            if t.drifted { ": drifted" } else { "" }
        ));
        out.push_str(&table(&t.members, now));
        for m in &t.members {
            out.push_str(&row_notes(m, &t.members));
        }
        for m in t.members.iter().filter(|m| m.kind == RowKind::MainSession) {
            out.push_str(&session_notes(m));
        }
        if let Some(b) = &t.board {
            out.push_str(&format!(
                "board: {} todo, {} claimed, {} in progress, {} done; {} messages (ateam tasks, ateam messages)\n",
                b.todo, b.claimed, b.in_progress, b.done, b.messages
            ));
        }
        out.push('\n');
    }
    out
}

/// The columns of the status table.
const HEADER: [&str; 10] = [
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

/// A team's rows under `HEADER`, each column as wide as its widest cell.
fn table(rows: &[MemberStatus], now: SystemTime) -> String {
    let cells: Vec<[String; 10]> = rows.iter().map(|m| table_row(m, now)).collect();
    let mut width = HEADER.map(str::len);
    for r in &cells {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = table_line(&HEADER, &width);
    for r in &cells {
        out.push_str(&table_line(&r.each_ref().map(String::as_str), &width));
    }
    out
}

/// One line of the table: every cell but the last padded to its column's width, and no
/// blanks at the end.
fn table_line(cells: &[&str; 10], width: &[usize; 10]) -> String {
    let mut s = String::new();
    for (i, c) in cells.iter().enumerate() {
        if i + 1 == cells.len() {
            s.push_str(c);
        } else {
            s.push_str(&format!("{c:<w$}  ", w = width[i]));
        }
    }
    s.trim_end().to_string() + "\n"
}

/// A row's cells, in the order of `HEADER`.
fn table_row(m: &MemberStatus, now: SystemTime) -> [String; 10] {
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
        last_exit_and_outcome(m, now),
        human_bytes(m.transcript_bytes),
        ago(m.last_activity_secs),
        match (&m.grants, m.kind) {
            (Some(g), _) => g.summary(),
            (None, RowKind::MainSession) => "host (your own access)".into(),
            (None, RowKind::Member | RowKind::Transcript) => "-".into(),
        },
    ]
}

/// The LAST EXIT cell, and beside it an agent's outcome (`0 (8s ago) failed`): an agent that
/// exits 0 after every write failed does not pass for a success. A task under way adds
/// nothing (the state says it runs).
fn last_exit_and_outcome(m: &MemberStatus, now: SystemTime) -> String {
    let exit = m.last_exit.as_ref().map(|e| last_exit_cell(e, now));
    let outcome = m
        .agent
        .as_ref()
        .map(|a| a.outcome)
        .filter(|v| *v != Verdict::Running)
        .map(Verdict::as_str);
    match (exit, outcome) {
        (Some(e), Some(o)) => format!("{e} {o}"),
        (Some(e), None) => e,
        (None, Some(o)) => o.to_string(),
        (None, None) => "-".into(),
    }
}

/// The note under the table about an agent's outcome, unless it is plainly done or under
/// way: why it failed (the tools that failed), or what failed on the way.
fn agent_note(m: &MemberStatus) -> Option<String> {
    let a = m.agent.as_ref()?;
    let plain = match a.outcome {
        Verdict::Running => true,
        Verdict::Done => a.failed_tools.is_empty(),
        Verdict::Failed | Verdict::Unknown => false,
    };
    (!plain).then(|| {
        format!(
            "  {}: {} {}: {} (ateam transcript {})\n",
            m.name,
            a.name,
            a.outcome.as_str(),
            a.reason,
            m.name
        )
    })
}

/// The notes under the table about one of a team's `rows`: the helpers it asked for, who
/// asked for it, why it is in its state, the secrets its proxy injects, and what its last
/// exit said.
fn row_notes(m: &MemberStatus, rows: &[MemberStatus]) -> String {
    let mut out = String::new();
    let asked: Vec<&str> = rows
        .iter()
        .filter(|h| {
            h.origin.as_ref().and_then(|o| o.requested_by.as_deref()) == Some(m.name.as_str())
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
    if let Some(n) = agent_note(m) {
        out.push_str(&n);
    }
    if let Some(w) = &m.workspace {
        out.push_str(&workspace_line(&m.name, w));
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
    out
}

/// A writer's branch and its work: `branch ateam/t/alice, 2 ahead, 0 behind, 1
/// uncommitted, 2 uncollected` (status's line under the member, top's detail).
pub fn workspace_summary(w: &crate::report::WorkspaceStatus) -> String {
    match &w.error {
        Some(e) => format!("workspace {}: {e}", w.path.display()),
        None => format!(
            "branch {}, {} ahead, {} behind, {} uncommitted, {} uncollected",
            crate::core::untrusted::shown(&w.branch),
            w.ahead,
            w.behind,
            w.uncommitted,
            w.uncollected
        ),
    }
}

fn workspace_line(name: &str, w: &crate::report::WorkspaceStatus) -> String {
    let tail = if w.error.is_none() {
        format!(" (ateam changes {name})")
    } else {
        String::new()
    };
    format!("  {name}: {}{tail}\n", workspace_summary(w))
}

/// Where to find a main session: its terminal while it runs, and its transcript.
fn session_notes(m: &MemberStatus) -> String {
    let mut out = String::new();
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
    out
}

/// The line below the table: whether a controller keeps this state folder converged, what
/// it last saw, and what it waits for.
pub fn render_controller(controller: Option<&ControllerStatus>) -> String {
    let Some(c) = controller else {
        return "controller: not running (ateam controller keeps teams converged)\n".into();
    };
    if !c.running {
        return format!(
            "controller: not running (the last one started {})\n",
            c.since
        );
    }
    let mut out = format!("controller: running since {} (pid {})", c.since, c.pid);
    if let Some(l) = &c.last_reconcile {
        out.push_str(&format!(
            "; last reconcile {} of team {} ({})",
            l.at,
            l.team,
            if l.ok { "ok" } else { "failed" }
        ));
    }
    out.push('\n');
    for (member, due) in &c.restarts_due {
        out.push_str(&format!(
            "  {member}: crash-looping, next restart at {due}\n"
        ));
    }
    for (team, e) in &c.errors {
        out.push_str(&format!("  team {team}: {e}\n"));
    }
    for (team, at) in &c.left_deleted {
        out.push_str(&format!(
            "  team {team}: deleted at {at}; left deleted until ateam apply of it\n"
        ));
    }
    if !c.manifest_errors.is_empty() {
        out.push_str("  the manifests were refused; the last good state stays:\n");
        for l in &c.manifest_errors {
            out.push_str(&format!("    {l}\n"));
        }
    }
    out
}
