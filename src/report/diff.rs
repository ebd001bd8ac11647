//! The plan in words: `diff`'s lines, and the phrase for each change, finding, drift and
//! start reason, which status, apply's log and the documents reuse (one wording everywhere).

use std::collections::BTreeMap;

use crate::plan::spec::DesiredSession;
use crate::plan::{
    Action, ContainerOp, Drift, Finding, HostOp, Op, Plan, Promotion, Removal, ServerOp, SessionOp,
    StartReason, TeamOp,
};

/// The plan, one line per change, grouped by team; then whether the machine differs from
/// the manifests (`Plan::drifted`), in words.
pub fn render_diff(plan: &Plan) -> String {
    let mut by_team: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in &plan.actions {
        let (team, _) = a.subject();
        let lines = by_team.entry(team.to_string()).or_default();
        lines.push(format!("  {}", action_text(a)));
        for line in agent_text(a) {
            lines.push(format!("      {line}"));
        }
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

/// For a member made with `agent:`: which build of the agent it runs, and from where; the
/// model host its `agent:` grants it, when its grant did not.
fn agent_text(a: &Action) -> Vec<String> {
    let Some(member) = a.made() else {
        return vec![];
    };
    let mut out = Vec::new();
    if let Some(c) = &member.agent_build {
        out.push(format!(
            "its agent: {} {}, from {} (read-only at {})",
            c.build.kind.name(),
            c.build.version,
            c.dir.display(),
            crate::core::agents::AGENT_DIR
        ));
    }
    if let Some(h) = &member.agent_model_host {
        out.push(format!(
            "its model host: {h}, allowed by its agent (the proxy injects its key or login)"
        ));
    }
    out
}

/// One change, as `diff` says it (`+` adds, `-` removes, `~` changes, `>` starts).
pub fn action_text(a: &Action) -> String {
    let member = &a.subject;
    match &a.op {
        Op::Container(op) => container_text(member, op),
        Op::Server(op) => server_text(member, op),
        Op::Session(op) => session_text(member, op),
        Op::Host(HostOp::MakeTranscriptDir { path }) => {
            format!("+ transcript folder of {member}: {}", path.display())
        }
        Op::Host(HostOp::ReturnTasks { why }) => {
            format!("~ {member}'s tasks on the board back to todo: {why}")
        }
        Op::Team(op) => team_text(&a.team, op),
    }
}

fn team_text(team: &str, op: &TeamOp) -> String {
    match op {
        TeamOp::RemoveNetwork { name } => format!("- network {name} of team {team}"),
        TeamOp::StopSessions { sockets } => {
            format!("- {} main session(s) of team {team}", sockets.len())
        }
        TeamOp::Purge { paths } => format!(
            "- {} transcript folder(s) and workspace(s) of team {team} (--purge)",
            paths.len()
        ),
        TeamOp::StopHelperServers => format!("- helper servers of team {team}"),
        TeamOp::ClearRunDir { path, all: true } => {
            format!("- state of team {team}: {}", path.display())
        }
        TeamOp::ClearRunDir { path, all: false } => format!(
            "- state of team {team} but its events, egress logs and board: {}",
            path.display()
        ),
    }
}

fn container_text(member: &str, op: &ContainerOp) -> String {
    match op {
        ContainerOp::Create { member } => {
            format!("+ create {} ({})", member.member, member.spec.name)
        }
        ContainerOp::Recreate { member, reason, .. } => {
            format!("~ recreate {}: {}", member.member, drift_text(reason))
        }
        ContainerOp::Start { reason, .. } => format!("> start {member}: {}", start_text(reason)),
        ContainerOp::Remove { container, removal } => match removal {
            Removal::Orphan { why } => format!(
                "- remove {member} ({}): {}",
                container.name,
                why.as_deref().unwrap_or("no manifest wants it")
            ),
            Removal::Duplicate => format!(
                "- remove duplicate of {member} ({} {})",
                container.name,
                short(&container.id)
            ),
            Removal::Stranger => format!(
                "- remove stranger {} {}: it carries the labels of {member} but ateam did not make it",
                container.name,
                short(&container.id)
            ),
            Removal::Suspended => format!(
                "- remove {member} ({}): suspended; its state is kept outside it",
                container.name
            ),
        },
        ContainerOp::FinishReplacement { name, .. } => {
            format!("~ finish replacing {member}: rename to {name}")
        }
        ContainerOp::RestoreName { container, name } => format!(
            "~ rename {member} back: {} was renamed, its name is {name}",
            container.name
        ),
        ContainerOp::Unpause { .. } => format!("> unpause {member}: someone paused it"),
        ContainerOp::Stop { container } => {
            format!(
                "- stop {member} ({}): its workspace is rolled back",
                container.name
            )
        }
    }
}

fn server_text(member: &str, op: &ServerOp) -> String {
    match op {
        ServerOp::StartEgress { .. } => format!("+ egress proxy of {member}"),
        ServerOp::UpdateEgress { policy } => {
            let uids: Vec<String> = (policy.applied_by.iter())
                .chain(&policy.host_listeners)
                .map(u32::to_string)
                .collect();
            let owners = match uids.as_slice() {
                [] => String::new(),
                u => format!(" (host listeners of uid {})", u.join(",")),
            };
            format!(
                "~ egress allow list of {member}: {}{owners}",
                policy.allow.join(",")
            )
        }
        ServerOp::StopEgress => format!("- egress proxy of {member}"),
        ServerOp::StartHelper => format!("+ helper server of {member}"),
        ServerOp::StopHelper => format!("- helper server of {member}"),
    }
}

fn session_text(name: &str, op: &SessionOp) -> String {
    match op {
        SessionOp::Start { session, resume } => start_session_text(session, resume.len()),
        SessionOp::Promote {
            session, journal, ..
        } => promote_text(session, journal.as_deref()),
        SessionOp::Stop { taken_over_by, .. } => stop_session_text(name, taken_over_by.as_deref()),
        SessionOp::RollBack { journal } => rollback_text(journal),
    }
}

/// Starting a main session's terminal; one that takes over another's members is handed a
/// resume file with `resumed` of them.
fn start_session_text(session: &DesiredSession, resumed: usize) -> String {
    format!(
        "+ start main session {} (tmux -S {}){}",
        session.name,
        session.socket.display(),
        match &session.takes_over {
            Some(old) => format!(", taking over {old}'s members ({resumed}) with a resume file"),
            None => String::new(),
        }
    )
}

/// A member becoming a main session, step by step; `journal`: a promotion interrupted,
/// taken up again after the step it recorded.
fn promote_text(session: &DesiredSession, journal: Option<&Promotion>) -> String {
    format!(
        "~ promote member {} to main session{}: stop it, move its transcript to {}, start the session",
        session.name,
        journal
            .map(|j| format!(" (interrupted after step `{}`: go on)", j.step.as_str()))
            .unwrap_or_default(),
        session.transcript_dir.display()
    )
}

/// Ending a main session's terminal: another session takes it over (`heir`), or no manifest
/// wants it.
fn stop_session_text(session: &str, heir: Option<&str>) -> String {
    match heir {
        Some(heir) => format!("- stop main session {session}: {heir} takes it over"),
        None => format!("- stop main session {session}: no manifest wants it"),
    }
}

/// Undoing a promotion the manifests no longer ask for.
fn rollback_text(journal: &Promotion) -> String {
    format!(
        "~ undo the interrupted promotion of {} (after step `{}`): the manifests no longer ask for it",
        journal.name,
        journal.step.as_str()
    )
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
        Finding::Suspended { member, since, .. } => {
            format!("= {member} suspended since {since}; `ateam resume {member}` brings it back")
        }
        Finding::Finished { .. } => return None,
    })
}

pub(super) fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Why a container is replaced, in words.
pub fn drift_text(d: &Drift) -> String {
    match d {
        Drift::Spec { changes } => changes
            .iter()
            .map(change_text)
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
        Drift::Asked => "a restart was asked for".into(),
    }
}

/// One field's change, short: a list says what it gained and lost (a mount by its target),
/// a long value is cut, so that a replacement's reason stays a line a person reads.
fn change_text(c: &crate::plan::FieldChange) -> String {
    use serde_json::Value;
    match (&c.from, &c.to) {
        (Value::Array(old), Value::Array(new)) => {
            let added: Vec<String> = new
                .iter()
                .filter(|x| !old.contains(x))
                .map(compact)
                .collect();
            let removed: Vec<String> = old
                .iter()
                .filter(|x| !new.contains(x))
                .map(compact)
                .collect();
            let mut parts = Vec::new();
            if !added.is_empty() {
                parts.push(format!("added {}", added.join(", ")));
            }
            if !removed.is_empty() {
                parts.push(format!("removed {}", removed.join(", ")));
            }
            if parts.is_empty() {
                parts.push("reordered".into());
            }
            format!("{}: {}", c.field, parts.join(", "))
        }
        (from, to) => format!(
            "{} changed from {} to {}",
            c.field,
            compact(from),
            compact(to)
        ),
    }
}

/// Longest value a change shows whole.
const SHOWN_VALUE: usize = 60;

/// `v` in a few words: a mount (or anything with a target, name or host) by that, any other
/// value as JSON cut at `SHOWN_VALUE` characters.
fn compact(v: &serde_json::Value) -> String {
    if let Some(key) = ["target", "name", "host"]
        .iter()
        .find_map(|k| v.get(*k).and_then(serde_json::Value::as_str))
    {
        return key.to_string();
    }
    let text = v.to_string();
    if text.chars().count() <= SHOWN_VALUE {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_VALUE - 3).collect();
    format!("{cut}...")
}

/// Why a container is started, in words.
pub fn start_text(r: &StartReason) -> String {
    match r {
        StartReason::NeverStarted => "created but never started".into(),
        StartReason::NotReleased => {
            "held at its gate: started since ateam last checked it (a restart, or an interrupted apply)".into()
        }
        StartReason::Restart { code, policy } => {
            format!("exited {code}, restart policy {policy:?}")
        }
        StartReason::Board {
            messages, tasks, ..
        } => format!(
            "its agent ended, and the team's board has news for it ({messages} message(s), {tasks} task(s)): woken to read it"
        ),
    }
}
