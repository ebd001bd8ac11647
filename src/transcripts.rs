//! Agents' own transcripts in a member's transcript folder: Claude Code's sessions
//! (`<state>/projects/<cwd>/<session>.jsonl`) and Codex CLI's rollouts
//! (`<state>/sessions/YYYY/MM/DD/rollout-*.jsonl`), `<state>` being the agent's state folder
//! that `agent:` puts in the transcript folder (`core::agents`). Found and read as every
//! file of a member's folder is (`files::Dir`): the folder opened without following a link,
//! everything below reached beneath it with no symlink on the way, regular files only (a FIFO
//! never blocks a reader), bounded walks and bounded reads. What they say is
//! `core::transcript`'s, a pure function of the bytes read here.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::core::agents::AgentKind;
use crate::core::transcript::{self, TaskSummary};
use crate::files::{Bounds, Dir};

/// How much of a session's end is read to judge its latest task (status, events): a task
/// that began before it is judged on what it holds.
pub(crate) const JUDGE_WINDOW: u64 = 1 << 20;

/// Sessions looked at, newest first, at most.
pub(crate) const MAX_SESSIONS: usize = 50;

/// An agent member's state folder, as ateam lays it out: which agent, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHome {
    /// The member's name.
    pub member: String,
    /// Which agent.
    pub kind: AgentKind,
    /// The member's transcript folder (the member's own).
    pub transcripts: PathBuf,
    /// The agent's state folder inside it, relative to it (`claude`, `codex`).
    pub home: PathBuf,
}

impl AgentHome {
    /// The state folder of `member`'s agent, if it has one ateam knows.
    pub fn of(member: &crate::model::Member) -> Option<AgentHome> {
        let a = member.agent.as_ref()?;
        let kind = AgentKind::parse(&a.name)?;
        let home = a.home.strip_prefix(&member.transcript_dir).ok()?;
        Some(AgentHome {
            member: member.name.clone(),
            kind,
            transcripts: member.transcript_dir.clone(),
            home: home.to_path_buf(),
        })
    }

    /// Where its sessions are, inside the transcript folder, and the depth of their files.
    fn sessions_dir(&self) -> (PathBuf, usize) {
        match self.kind {
            AgentKind::Claude => (self.home.join("projects"), 2),
            AgentKind::Codex => (self.home.join("sessions"), 4),
        }
    }

    /// Whether `rel` (inside the sessions folder) is a session file of this agent.
    fn is_session(&self, rel: &Path) -> bool {
        let (_, depth) = self.sessions_dir();
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
        rel.components().count() == depth
            && name.ends_with(".jsonl")
            && match self.kind {
                AgentKind::Claude => true,
                AgentKind::Codex => name.starts_with("rollout-"),
            }
    }
}

/// One session file of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Its path inside the member's transcript folder.
    pub rel: PathBuf,
    /// Its id, as its file name says (Claude Code's session id, Codex's rollout name).
    pub id: String,
    /// When it last changed.
    pub modified: SystemTime,
    /// Its size.
    pub len: u64,
}

/// The agent's sessions, newest first (at most `MAX_SESSIONS`); none when its folder is not
/// there or not a folder.
pub fn sessions(a: &AgentHome) -> Vec<Session> {
    let (dir, depth) = a.sessions_dir();
    let Ok(d) = Dir::open(&a.transcripts).and_then(|t| t.open_dir(&dir)) else {
        return vec![];
    };
    let bounds = Bounds {
        depth,
        entries: 5_000,
    };
    d.newest_files(bounds, MAX_SESSIONS, |rel| a.is_session(rel))
        .into_iter()
        .filter_map(|e| {
            let id = e.rel.file_stem()?.to_string_lossy().into_owned();
            Some(Session {
                rel: dir.join(&e.rel),
                id,
                modified: e.modified?,
                len: e.len,
            })
        })
        .collect()
}

/// Why a session could not be picked.
#[derive(Debug, thiserror::Error)]
pub enum PickError {
    /// More than one session's id holds what was asked.
    #[error("{} sessions match `{id}`: {}", .matches.len(), .matches.join(", "))]
    Ambiguous {
        /// What was asked.
        id: String,
        /// The ids that hold it (escaped: the agent named its files).
        matches: Vec<String>,
    },
}

/// The session whose id is `id`, else the one whose id holds it, else none; without `id`,
/// the newest.
pub fn pick(all: &[Session], id: Option<&str>) -> Result<Option<Session>, PickError> {
    let Some(id) = id else {
        return Ok(all.first().cloned());
    };
    if let Some(s) = all.iter().find(|s| s.id == id) {
        return Ok(Some(s.clone()));
    }
    let hits: Vec<&Session> = all.iter().filter(|s| s.id.contains(id)).collect();
    match hits.as_slice() {
        [one] => Ok(Some((*one).clone())),
        [] => Ok(None),
        many => Err(PickError::Ambiguous {
            id: crate::core::untrusted::shown(id).into_owned(),
            matches: many
                .iter()
                .map(|s| crate::core::untrusted::shown(&s.id).into_owned())
                .collect(),
        }),
    }
}

/// The end of a session, whole lines only, at most `max` bytes, and the offset it begins at.
pub fn read_tail(a: &AgentHome, s: &Session, max: u64) -> std::io::Result<(Vec<u8>, u64)> {
    Dir::open(&a.transcripts)?.read_tail(&s.rel, max)
}

/// At most `max` bytes of a session from `offset` on, and the file's size now.
pub fn read_from(
    a: &AgentHome,
    s: &Session,
    offset: u64,
    max: u64,
) -> std::io::Result<(Vec<u8>, u64)> {
    Dir::open(&a.transcripts)?.read_range(&s.rel, offset, max)
}

/// What status knows of an agent member from its transcript: its newest session and the
/// tasks read in its end (`JUDGE_WINDOW`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentFacts {
    /// The newest session, inside the transcript folder.
    pub session: Option<PathBuf>,
    /// The tasks read of it, the latest last.
    pub tasks: Vec<TaskSummary>,
}

impl AgentFacts {
    /// Its latest task.
    pub fn latest(&self) -> Option<&TaskSummary> {
        self.tasks.last()
    }
}

/// `a`'s newest session, judged.
pub(crate) fn agent_facts(a: &AgentHome) -> AgentFacts {
    let Some(s) = sessions(a).into_iter().next() else {
        return AgentFacts::default();
    };
    let tasks = judge(a, &s);
    AgentFacts {
        session: Some(s.rel),
        tasks,
    }
}

/// The tasks of session `s` that its last `JUDGE_WINDOW` bytes hold (none if unreadable).
pub fn judge(a: &AgentHome, s: &Session) -> Vec<TaskSummary> {
    match read_tail(a, s, JUDGE_WINDOW) {
        Ok((bytes, _)) => transcript::tasks(&transcript::parse(a.kind, &bytes)),
        Err(_) => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(dir: &Path, kind: AgentKind) -> AgentHome {
        AgentHome {
            member: "m".into(),
            kind,
            transcripts: dir.to_path_buf(),
            home: PathBuf::from(match kind {
                AgentKind::Claude => "claude",
                AgentKind::Codex => "codex",
            }),
        }
    }

    const CLAUDE: &[u8] =
        include_bytes!("../tests/fixtures/transcripts/claude-2.1.332-three-tasks.jsonl");

    /// The newest session of each agent's layout; files elsewhere, links and FIFOs are not
    /// sessions; a state folder that is a link is not read at all.
    #[test]
    fn sessions_are_the_agents_own_files_newest_first_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let p = d.join("claude/projects/-w-repo");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("old.jsonl"), "{}\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(p.join("new.jsonl"), CLAUDE).unwrap();
        std::fs::write(d.join("claude/.claude.json"), "{}").unwrap();
        std::fs::create_dir_all(p.join("new/subagents")).unwrap();
        std::fs::write(p.join("new/subagents/agent-1.jsonl"), "{}\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("zz.jsonl")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p.join("fifo.jsonl"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let a = home(d, AgentKind::Claude);
        let s = sessions(&a);
        let ids: Vec<&str> = s.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["new", "old"]);
        assert_eq!(s[0].rel, PathBuf::from("claude/projects/-w-repo/new.jsonl"));
        let f = agent_facts(&a);
        assert_eq!(f.tasks.len(), 3);
        assert_eq!(
            f.latest().and_then(TaskSummary::verdict),
            Some(transcript::Verdict::Done)
        );
        assert_eq!(pick(&s, Some("ol")).unwrap().unwrap().id, "old");
        assert_eq!(pick(&s, Some("nope")).unwrap(), None);
        assert!(matches!(
            pick(&s, Some("")),
            Err(PickError::Ambiguous { .. })
        ));

        // The state folder swapped for a link to another folder: nothing is read.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(other.path().join("projects/x")).unwrap();
        std::fs::write(other.path().join("projects/x/s.jsonl"), CLAUDE).unwrap();
        let e = d.join("evil");
        std::fs::create_dir(&e).unwrap();
        std::os::unix::fs::symlink(other.path(), e.join("claude")).unwrap();
        assert!(sessions(&home(&e, AgentKind::Claude)).is_empty());
        assert_eq!(
            agent_facts(&home(&e, AgentKind::Claude)),
            AgentFacts::default()
        );
    }

    #[test]
    fn codex_rollouts_are_found_by_their_dated_folders() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("codex/sessions/2026/12/06");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("rollout-2026-12-06T07-50-35-x.jsonl"), "{}\n").unwrap();
        std::fs::write(p.join("notes.jsonl"), "{}\n").unwrap();
        let s = sessions(&home(t.path(), AgentKind::Codex));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].id, "rollout-2026-12-06T07-50-35-x");
    }

    /// A session's end is read whole lines only, a bounded amount; from an offset, what was
    /// added since.
    #[test]
    fn a_session_is_read_within_bounds() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("claude/projects/w");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("s.jsonl"), "aaaa\nbbbb\ncccc\n").unwrap();
        let a = home(t.path(), AgentKind::Claude);
        let s = sessions(&a).remove(0);
        assert_eq!(read_tail(&a, &s, 7).unwrap(), (b"cccc\n".to_vec(), 10));
        assert_eq!(
            read_from(&a, &s, 10, 100).unwrap(),
            (b"cccc\n".to_vec(), 15)
        );
        assert_eq!(read_from(&a, &s, 20, 100).unwrap(), (vec![], 15));
    }
}
