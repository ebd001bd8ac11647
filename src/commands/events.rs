//! `ateam events [TEAM] [-w] [-o json]`: what apply, the controller and the helper servers
//! did and why, newest last, as `kubectl get events` shows it. Text that a member chose comes
//! back escaped from `ateam::events` (reasons quoting a helper's name, a host it asked for).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::bail;

use crate::cli::{Global, Output};
use ateam::app::App;
use ateam::core::layout;
use ateam::events::{Event, EventKind, SessionCache, team_events};
use ateam::transcripts::AgentHome;

use super::common::app;
use super::exit::Exit;

/// How often `-w` looks at the files again.
const POLL: Duration = Duration::from_millis(250);

pub fn run(
    global: &Global,
    team: Option<&str>,
    watch: bool,
    output: Output,
) -> anyhow::Result<Exit> {
    let json = match output {
        Output::Text => false,
        Output::Json => true,
        Output::Yaml => bail!("events print text or JSON (-o json)"),
    };
    if let Some(t) = team
        && (t.is_empty() || t.contains('/') || t == "." || t == "..")
    {
        bail!("`{t}` is not a team's name");
    }
    let ctx = app(global);
    let state_dir = ctx.host.state_dir.clone();
    let teams = || teams(&state_dir, team);
    let wide = team.is_none();
    let cache = SessionCache::default();
    let all = collect(&ctx, &teams(), &cache);
    if !watch {
        if json {
            outln!("{}", serde_json::to_string_pretty(&all)?);
        } else if all.is_empty() {
            outln!("No events.");
        } else {
            print_table(&all, wide, true);
        }
        return Ok(Exit::Ok);
    }
    // Follow: what is there, then each new event (and a collapsed one again when its count
    // grows) as it comes, until interrupted.
    let mut shown: HashMap<String, u64> = HashMap::new();
    let mut header = !json;
    let mut seen = fingerprint(&ctx, &teams());
    let mut batch = all;
    loop {
        let new: Vec<Event> = batch
            .iter()
            .filter(|e| shown.get(&identity(e)) != Some(&e.count))
            .cloned()
            .collect();
        // Only what is still in the files is remembered: the memory stays bounded.
        shown = batch.iter().map(|e| (identity(e), e.count)).collect();
        for e in &new {
            if json {
                outln!("{}", serde_json::to_string(e)?);
            }
        }
        if !json && !new.is_empty() {
            print_table(&new, wide, header);
            header = false;
        }
        loop {
            std::thread::sleep(POLL);
            let now = fingerprint(&ctx, &teams());
            if now != seen {
                seen = now;
                break;
            }
        }
        batch = collect(&ctx, &teams(), &cache);
    }
}

/// The team named, or every team of the state folder.
fn teams(state_dir: &Path, team: Option<&str>) -> Vec<String> {
    if let Some(t) = team {
        return vec![t.to_string()];
    }
    let mut v: Vec<String> = std::fs::read_dir(layout::teams_dir(state_dir))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The agent members of `team` as applied (their transcripts hold their tasks' ends).
fn agents(ctx: &App, team: &str) -> Vec<AgentHome> {
    ctx.applied_or_deleted(Some(team))
        .map(|d| {
            d.teams
                .iter()
                .flat_map(|t| t.members.iter().filter_map(AgentHome::of))
                .collect()
        })
        .unwrap_or_default()
}

fn collect(ctx: &App, teams: &[String], cache: &SessionCache) -> Vec<Event> {
    let state_dir = &ctx.host.state_dir;
    let mut all: Vec<Event> = teams
        .iter()
        .flat_map(|t| team_events(state_dir, t, &agents(ctx, t), cache))
        .collect();
    // Pending approvals need the team's model to be judged: the applied teams only.
    for t in teams {
        if let Ok(d) = ctx.applied_with_requests(Some(t)) {
            for team in &d.teams {
                all.extend(approval_events(state_dir, team));
            }
        }
    }
    all.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    all
}

/// The pending approvals of `t`'s members (`approvals::of_member`) as events: one each, at
/// its first refusal, saying its id and how to answer it (or why it cannot be approved).
fn approval_events(state_dir: &std::path::Path, t: &ateam::model::Team) -> Vec<Event> {
    let mut out = Vec::new();
    for m in t
        .members
        .iter()
        .filter(|m| matches!(m.access.network, ateam::model::Network::Allow(_)))
    {
        let log = ateam::servers::egress::log::read(&layout::egress_log_path(&layout::egress_dir(
            state_dir, &t.name, &m.name,
        )));
        for p in ateam::approvals::of_member(state_dir, t, m, &log) {
            let reason = match &p.not_approvable {
                None => format!(
                    "approval {} asks for {} in grant `{}`: ateam approvals allow|deny {} --once|--always",
                    p.id,
                    p.want.describe(),
                    p.grant,
                    p.id
                ),
                Some(why) => format!(
                    "approval {} asks for {} in grant `{}`, not approvable: {why}",
                    p.id,
                    p.want.describe(),
                    p.grant
                ),
            };
            let at =
                UNIX_EPOCH + Duration::from_secs_f64(p.first_seen.clamp(0.0, 253_402_300_799.0));
            let mut e = Event::at(at, &t.name, &m.name, EventKind::ApprovalPending, &reason);
            e.ts = p.first_seen;
            out.push(e.escaped());
        }
    }
    out
}

/// The same event read again: an event of ateam's by its exact time; a run of egress
/// refusals by when it began (its count and last time grow).
fn identity(e: &Event) -> String {
    let when = match e.kind {
        EventKind::EgressRefused => e.first_at.clone().unwrap_or_else(|| e.at.clone()),
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
        | EventKind::HelperGranted
        | EventKind::HelperRefused
        | EventKind::SessionStarted
        | EventKind::SessionStopped
        | EventKind::Promoted
        | EventKind::TaskGiven
        | EventKind::AgentDone
        | EventKind::TasksReturned
        | EventKind::BoardTask
        | EventKind::AgentFailed
        | EventKind::Refused
        | EventKind::ApprovalPending
        | EventKind::Deleted
        | EventKind::Stopped
        | EventKind::Suspended
        | EventKind::Resumed
        | EventKind::Forked => e.ts.to_bits().to_string(),
    };
    format!(
        "{}\0{}\0{}\0{when}\0{}",
        e.team,
        e.member,
        e.kind.name(),
        e.reason
    )
}

/// Size, change time and inode of every file `collect` reads: unchanged, nothing is new.
fn fingerprint(ctx: &App, teams: &[String]) -> Vec<(PathBuf, u64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let state_dir = &ctx.host.state_dir;
    let mut paths = Vec::new();
    let mut sessions = Vec::new();
    for t in teams {
        for a in agents(ctx, t) {
            for s in ateam::transcripts::sessions(&a)
                .into_iter()
                .take(ateam::events::AGENT_SESSIONS)
            {
                let at = s.modified.duration_since(UNIX_EPOCH).unwrap_or_default();
                let path = a.transcripts.join(&s.rel);
                sessions.push((
                    path,
                    s.len,
                    at.as_secs() as i64,
                    i64::from(at.subsec_nanos()),
                    0,
                ));
            }
        }
        let own = layout::team_events_path(state_dir, t);
        paths.push(ateam::servers::egress::log::rotated(&own));
        paths.push(own);
        let run_dir = layout::team_run_dir(state_dir, t);
        for m in std::fs::read_dir(layout::members_dir(&run_dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Some(member) = m.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let log = layout::egress_log_path(&layout::egress_dir_in(&run_dir, &member));
            let refused = ateam::servers::egress::log::refused(&log);
            paths.push(ateam::servers::egress::log::rotated(&log));
            paths.push(log);
            paths.push(ateam::servers::egress::log::rotated(&refused));
            paths.push(refused);
        }
    }
    paths
        .into_iter()
        .filter_map(|p| {
            let m = std::fs::symlink_metadata(&p).ok()?;
            Some((p, m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
        })
        .chain(sessions)
        .collect()
}

fn print_table(events: &[Event], wide: bool, header: bool) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let rows: Vec<[String; 6]> = events
        .iter()
        .map(|e| {
            let mut seen = age(now - e.ts);
            if e.count > 1 {
                let first = e
                    .first_at
                    .as_deref()
                    .and_then(|f| humantime::parse_rfc3339(f).ok());
                let over = first
                    .and_then(|f| f.duration_since(UNIX_EPOCH).ok())
                    .map(|f| age(e.ts - f.as_secs_f64()))
                    .unwrap_or_default();
                seen = format!("{seen} (x{} over {over})", e.count);
            }
            [
                seen,
                e.kind.severity().to_string(),
                e.team.clone(),
                e.member.clone(),
                e.kind.name().to_string(),
                e.reason.clone(),
            ]
        })
        .collect();
    let head = ["LAST SEEN", "TYPE", "TEAM", "MEMBER", "REASON", "MESSAGE"].map(String::from);
    let cols: Vec<usize> = (0..5)
        .map(|i| {
            rows.iter()
                .chain(std::iter::once(&head))
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[String; 6]| {
        let mut s = String::new();
        for (i, cell) in r.iter().enumerate().take(5) {
            if i == 2 && !wide {
                continue;
            }
            s.push_str(&format!("{cell:<w$}   ", w = cols[i]));
        }
        s.push_str(&r[5]);
        s
    };
    if header {
        outln!("{}", line(&head));
    }
    for r in &rows {
        outln!("{}", line(r));
    }
}

/// An age as kubectl shows one: `42s`, `5m`, `3h`, `2d` (`top` shows them so too).
pub(crate) fn age(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::age;

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let got: Vec<String> = [0.0, 119.9, 120.0, 7199.0, 7200.0, 200_000.0]
            .map(age)
            .to_vec();
        assert_eq!(got, ["0s", "119s", "2m", "119m", "2h", "2d"]);
    }
}
