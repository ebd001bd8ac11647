//! `ateam transcript MEMBER [-f]`: what an agent member did, from the agent's own transcript
//! in its transcript folder (`ateam::transcripts`), rendered by `core::transcript::render`:
//! its tasks, what it said, each tool call and what came back, its errors, how each task
//! ended. Everything the member wrote is shown escaped. The newest session by default;
//! `--list` names them, `--session` picks one. `-f` follows the file as the agent writes it
//! (polled: the folder is the member's, so a watch on it would be the member's to flood),
//! and moves on to a newer session when one begins.

use std::time::Duration;

use anyhow::bail;

use crate::cli::Global;
use ateam::core::transcript::render::Renderer;
use ateam::core::transcript::{Item, Parser, parse};
use ateam::core::untrusted::shown;
use ateam::transcripts::{self, AgentHome, Session};

use super::common::app;
use super::exit::Exit;
use super::member::member_of;

/// How much of a session's end is shown at most: a person reads the end of a long session,
/// and a member cannot make this command read more.
const SHOW_WINDOW: u64 = 32 << 20;
/// How often `-f` looks at the file, and how much it reads at a time.
const POLL: Duration = Duration::from_millis(250);
const CHUNK: u64 = 1 << 20;
/// `-f` looks for a newer session every this many polls.
const NEWER_EVERY: u32 = 8;

/// What the person asked for.
#[derive(Debug, Clone)]
pub struct Opts {
    pub follow: bool,
    pub session: Option<String>,
    pub list: bool,
    pub json: bool,
}

pub fn run(global: &Global, team: Option<&str>, member: &str, o: Opts) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let applied = ctx.applied_with_requests(team)?;
    let session = |t: &ateam::model::Team| t.sessions.iter().any(|s| s.name == member);
    if applied.teams.iter().any(session)
        && !applied
            .teams
            .iter()
            .any(|t| t.members.iter().any(|m| m.name == member))
    {
        bail!(
            "`{member}` is a main session (your own terminal: ateam attach {member}), not an agent member"
        );
    }
    let (t, m) = member_of(&applied, member)?;
    let Some(home) = AgentHome::of(m) else {
        bail!(
            "member `{member}` of team `{}` is not an agent member (its manifest has no `agent:`), so ateam knows no transcript of its own to read; its output: ateam logs {member}; its transcript folder: {}",
            t.name,
            m.transcript_dir.display()
        );
    };
    let all = transcripts::sessions(&home);
    if o.list {
        list(&home, &all, o.json)?;
        return Ok(Exit::Ok);
    }
    let picked = transcripts::pick(&all, o.session.as_deref())?;
    let session = match (picked, &o.session) {
        (Some(s), _) => s,
        (None, Some(id)) => bail!(
            "no session of {member} matches `{id}` (ateam transcript {member} --list names them)"
        ),
        (None, None) if o.follow => {
            eprintln!("{member}: no session yet; waiting for the agent to begin one...");
            wait_for_session(&home)
        }
        (None, None) => bail!(
            "{member} has written no session yet (in {})",
            home.transcripts.join(&home.home).display()
        ),
    };
    let who = format!("{}/{member}", t.name);
    if o.follow {
        follow(&home, session, o.session.is_none(), o.json, &who)
    } else {
        once(&home, &session, o.json, &who)?;
        Ok(Exit::Ok)
    }
}

fn agent_name(home: &AgentHome) -> &'static str {
    match home.kind {
        ateam::core::agents::AgentKind::Claude => "claude",
        ateam::core::agents::AgentKind::Codex => "codex",
    }
}

fn list(home: &AgentHome, all: &[Session], json: bool) -> anyhow::Result<()> {
    if json {
        let doc: Vec<serde_json::Value> = all
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": shown(&s.id),
                    "file": shown(&home.transcripts.join(&s.rel).display().to_string()),
                    "modifiedAt": ateam::core::container::rfc3339(s.modified),
                    "bytes": s.len,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if all.is_empty() {
        outln!("No sessions.");
    }
    for s in all {
        outln!(
            "{}  {}  {}",
            ateam::core::container::rfc3339(s.modified),
            human(s.len),
            shown(&s.id)
        );
    }
    Ok(())
}

/// The header of a session: which agent, which session, where.
fn header(home: &AgentHome, s: &Session, who: &str) -> String {
    format!(
        "{} session {} of {who} ({})",
        agent_name(home),
        shown(&s.id),
        shown(&home.transcripts.join(&s.rel).display().to_string())
    )
}

/// The session as it is now.
fn once(home: &AgentHome, s: &Session, json: bool, who: &str) -> anyhow::Result<()> {
    let (bytes, from) = transcripts::read_tail(home, s, SHOW_WINDOW)?;
    let items = parse(home.kind, &bytes);
    if json {
        let tasks = ateam::core::transcript::tasks(&items);
        let doc = serde_json::json!({
            "member": shown(who),
            "agent": agent_name(home),
            "session": shown(&s.id),
            "file": shown(&home.transcripts.join(&s.rel).display().to_string()),
            "leftOutBytes": from,
            "tasks": tasks.into_iter().map(|t| t.shown()).collect::<Vec<_>>(),
            "items": items.into_iter().map(Item::shown).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    outln!("{}", header(home, s, who));
    if from > 0 {
        outln!("  (the first {} of the session are left out)", human(from));
    }
    let mut r = Renderer::new(home.kind);
    for i in &items {
        for l in r.item(i) {
            outln!("{l}");
        }
    }
    if let Some(l) = r.unfinished() {
        outln!("{l}");
    }
    Ok(())
}

/// Polls until the agent has a session.
fn wait_for_session(home: &AgentHome) -> Session {
    loop {
        if let Some(s) = transcripts::sessions(home).into_iter().next() {
            return s;
        }
        std::thread::sleep(POLL);
    }
}

/// One session followed: its reader and where it is.
struct Followed {
    session: Session,
    parser: Parser,
    renderer: Renderer,
    offset: u64,
}

impl Followed {
    fn new(home: &AgentHome, session: Session) -> Followed {
        Followed {
            session,
            parser: Parser::new(home.kind),
            renderer: Renderer::new(home.kind),
            offset: 0,
        }
    }

    /// Prints what the agent added since the last look.
    fn poll(&mut self, home: &AgentHome, json: bool) -> anyhow::Result<()> {
        loop {
            let Ok((bytes, len)) = transcripts::read_from(home, &self.session, self.offset, CHUNK)
            else {
                return Ok(());
            };
            if len < self.offset {
                if !json {
                    outln!("  (the session file shrank: reading it from its start)");
                }
                self.parser = Parser::new(home.kind);
                self.offset = 0;
                continue;
            }
            if bytes.is_empty() {
                return Ok(());
            }
            self.offset += bytes.len() as u64;
            for i in self.parser.feed(&bytes) {
                if json {
                    outln!("{}", serde_json::to_string(&i.shown())?);
                } else {
                    for l in self.renderer.item(&i) {
                        outln!("{l}");
                    }
                }
            }
        }
    }
}

/// Prints the session from its start (or its last `SHOW_WINDOW`), then what the agent adds,
/// until interrupted; with `newest`, a newer session when one begins.
fn follow(
    home: &AgentHome,
    session: Session,
    newest: bool,
    json: bool,
    who: &str,
) -> anyhow::Result<Exit> {
    let begin = |s: &Session| -> anyhow::Result<Followed> {
        if json {
            let head = serde_json::json!({
                "kind": "session",
                "member": shown(who),
                "agent": agent_name(home),
                "session": shown(&s.id),
                "file": shown(&home.transcripts.join(&s.rel).display().to_string()),
            });
            outln!("{}", serde_json::to_string(&head)?);
        } else {
            outln!("{}", header(home, s, who));
        }
        let mut f = Followed::new(home, s.clone());
        f.offset = s.len.saturating_sub(SHOW_WINDOW);
        if f.offset > 0 {
            // From the start of a line: what comes before it is left out.
            let (_, from) = transcripts::read_tail(home, s, SHOW_WINDOW)?;
            f.offset = from;
            if !json {
                outln!("  (the first {} of the session are left out)", human(from));
            }
        }
        Ok(f)
    };
    let mut f = begin(&session)?;
    let mut polls = 0u32;
    loop {
        f.poll(home, json)?;
        std::thread::sleep(POLL);
        polls += 1;
        if newest
            && polls.is_multiple_of(NEWER_EVERY)
            && let Some(s) = transcripts::sessions(home).into_iter().next()
            && s.rel != f.session.rel
        {
            f.poll(home, json)?;
            if !json {
                outln!("");
            }
            f = begin(&s)?;
        }
    }
}

fn human(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1_048_576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", b as f64 / 1_048_576.0),
    }
}
