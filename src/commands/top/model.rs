//! What the dashboard shows, as plain data: rows made from a status document (CPU shares from
//! two looks in a row), the selection, the detail view, the mode, and what a key asks for.
//! No terminal here, so every key's effect is a unit test.

use std::collections::BTreeMap;
use std::time::Instant;

use ateam::report::{MemberStatus, RowKind, StatusDocument};

/// One line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub team: String,
    pub name: String,
    pub kind: RowKind,
    pub state: String,
    pub drifted: bool,
    pub restarts: u64,
    /// Percent of one core since the last look; None on the first look or when not running.
    pub cpu_pct: Option<f64>,
    pub memory: Option<u64>,
    /// Its cgroup is not its own (rootless Podman on cgroup v1): no figure is its own.
    pub shared: bool,
    pub memory_limit: Option<u64>,
    pub pids: Option<u64>,
    /// Egress in the last minute: (allowed, refused), for proxied members.
    pub egress: Option<(u64, u64)>,
    pub transcript_bytes: u64,
    pub last_activity_secs: Option<u64>,
    pub container_id: Option<String>,
    /// A main session's terminal (tmux socket).
    pub terminal: Option<String>,
    pub detail: Option<String>,
    /// A writer's branch and its work (`report::workspace_summary`).
    pub workspace: Option<String>,
    /// An agent member's outcome (`report::AgentStatus`), and the line that says why.
    pub agent: Option<(ateam::core::transcript::Verdict, String)>,
    /// Its oldest pending approval that can be approved (else its oldest), and how many
    /// it has: what `p` answers.
    pub approval: Option<(ateam::approvals::Pending, usize)>,
}

/// Which part of the selected row's detail is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Output,
    Egress,
    Transcript,
}

impl View {
    pub fn next(self) -> View {
        match self {
            View::Output => View::Egress,
            View::Egress => View::Transcript,
            View::Transcript => View::Output,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            View::Output => "output",
            View::Egress => "egress decisions",
            View::Transcript => "newest transcript file",
        }
    }
}

/// What keys mean now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Normal,
    Help,
    /// Typing a label selector; the text so far.
    Filter(String),
    /// Asked whether to restart this member (team, name).
    ConfirmRestart(String, String),
    /// Asked how to answer this member's pending approval (team, name, id).
    Answer(String, String, String),
}

/// An answer to a pending approval, as `ateam approvals allow|deny ID --once|--always`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    AllowOnce,
    AllowAlways,
    DenyOnce,
    DenyAlways,
}

impl Answer {
    /// The key that gives it in `Mode::Answer`.
    fn of(key: Key) -> Option<Answer> {
        match key {
            Key::Char('o') => Some(Answer::AllowOnce),
            Key::Char('A') => Some(Answer::AllowAlways),
            Key::Char('n') => Some(Answer::DenyOnce),
            Key::Char('D') => Some(Answer::DenyAlways),
            Key::Up
            | Key::Down
            | Key::Tab
            | Key::Enter
            | Key::Esc
            | Key::Backspace
            | Key::Char(_) => None,
        }
    }

    pub fn words(self) -> &'static str {
        match self {
            Answer::AllowOnce => "allowed once",
            Answer::AllowAlways => "allowed always",
            Answer::DenyOnce => "dismissed",
            Answer::DenyAlways => "denied always",
        }
    }
}

/// A key, as the dashboard reads it (the terminal's events are mapped to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    Tab,
    Enter,
    Esc,
    Backspace,
    Char(char),
}

/// What a key asks of the world outside the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    None,
    Quit,
    /// Join this main session's terminal, or follow this member's console (team, name).
    Attach(String, String),
    /// A shell in this member's container (team, name).
    Shell(String, String),
    /// Give this member a new container through the gate (team, name).
    Restart(String, String),
    /// Look again with this label selector (empty: none).
    Filter(String),
    /// Answer this member's pending approval (team, name, id, how).
    Answer(String, String, String, Answer),
}

pub struct Dashboard {
    pub rows: Vec<Row>,
    pub selected: usize,
    pub view: View,
    pub mode: Mode,
    /// The selector in force, as typed.
    pub filter: String,
    /// One line for the person: the last error, or what a key did.
    pub message: Option<String>,
    pub observed_at: String,
    pub controller: Option<String>,
    /// Each board's tasks and messages, in one line (`board: true` teams).
    pub boards: Option<String>,
    /// CPU seconds per container at the last look, for the shares.
    last_cpu: BTreeMap<String, (f64, Instant)>,
}

impl Dashboard {
    pub fn new() -> Dashboard {
        Dashboard {
            rows: vec![],
            selected: 0,
            view: View::Output,
            mode: Mode::Normal,
            filter: String::new(),
            message: None,
            observed_at: String::new(),
            controller: None,
            boards: None,
            last_cpu: BTreeMap::new(),
        }
    }

    /// Takes in a new look, at `now`; the selection stays on the same row if it is still there.
    pub fn update(&mut self, doc: &StatusDocument, now: Instant) {
        let keep = self
            .selected_row()
            .map(|r| (r.team.clone(), r.name.clone()));
        let mut cpu = BTreeMap::new();
        let mut rows = Vec::new();
        for t in &doc.teams {
            for m in &t.members {
                rows.push(self.row(&t.team, m, now, &mut cpu));
            }
        }
        self.last_cpu = cpu;
        self.rows = rows;
        self.observed_at = doc.observed_at.clone();
        let boards: Vec<String> = doc
            .teams
            .iter()
            .filter_map(|t| {
                let b = t.board?;
                Some(format!(
                    "{}: {} todo {} claimed {} started {} done {} msgs",
                    t.team, b.todo, b.claimed, b.in_progress, b.done, b.messages
                ))
            })
            .collect();
        self.boards = (!boards.is_empty()).then(|| format!("board {}", boards.join("; ")));
        self.controller = doc.controller.as_ref().map(|c| {
            if c.running {
                format!("controller pid {}", c.pid)
            } else {
                "no controller".to_string()
            }
        });
        self.selected = keep
            .and_then(|(t, n)| self.rows.iter().position(|r| r.team == t && r.name == n))
            .unwrap_or(self.selected)
            .min(self.rows.len().saturating_sub(1));
    }

    fn row(
        &self,
        team: &str,
        m: &MemberStatus,
        now: Instant,
        cpu: &mut BTreeMap<String, (f64, Instant)>,
    ) -> Row {
        let usage = m.usage.unwrap_or_default();
        let cpu_pct = match (&m.container_id, usage.cpu_seconds) {
            (Some(id), Some(secs)) => {
                cpu.insert(id.clone(), (secs, now));
                self.last_cpu.get(id).and_then(|(before, at)| {
                    let wall = now.duration_since(*at).as_secs_f64();
                    (wall > 0.0).then(|| ((secs - before).max(0.0) / wall) * 100.0)
                })
            }
            _ => None,
        };
        Row {
            team: team.to_string(),
            name: m.name.clone(),
            kind: m.kind,
            state: m.state.clone(),
            drifted: m.drifted,
            restarts: m.restarts,
            cpu_pct,
            memory: usage.memory_bytes,
            shared: usage.shared,
            memory_limit: usage.memory_limit_bytes,
            pids: usage.pids,
            egress: m
                .egress
                .as_ref()
                .map(|e| (e.last_minute.allowed, e.last_minute.refused)),
            transcript_bytes: m.transcript_bytes,
            last_activity_secs: m.last_activity_secs,
            container_id: m.container_id.clone(),
            terminal: m.terminal.as_ref().map(|p| p.display().to_string()),
            // As status says it: the caps it was given are not applied.
            detail: match (m.limits_unenforced, &m.detail) {
                (true, Some(d)) => Some(format!("limits not enforced; {d}")),
                (true, None) => Some(
                    "limits not enforced (this engine cannot apply its memory and pids caps)"
                        .into(),
                ),
                (false, d) => d.clone(),
            },
            workspace: m.workspace.as_ref().map(ateam::report::workspace_summary),
            agent: m.agent.as_ref().map(|a| {
                let line = format!("{} {}: {}", a.name, a.outcome.as_str(), a.reason);
                (a.outcome, line)
            }),
            approval: m.egress.as_ref().and_then(|e| {
                let first = e
                    .approvals
                    .iter()
                    .find(|p| p.not_approvable.is_none())
                    .or(e.approvals.first())?;
                Some((first.clone(), e.approvals.len()))
            }),
        }
    }

    pub fn selected_row(&self) -> Option<&Row> {
        self.rows.get(self.selected)
    }

    /// What `key` does; the model changes here, the world through the returned effect.
    pub fn key(&mut self, key: Key) -> Effect {
        match std::mem::replace(&mut self.mode, Mode::Normal) {
            Mode::Normal => self.normal_key(key),
            Mode::Help => Effect::None,
            Mode::Filter(text) => self.filter_key(text, key),
            Mode::Answer(team, name, id) => match Answer::of(key) {
                Some(a) => {
                    self.message = Some(format!("answering {id} of {team}/{name}..."));
                    Effect::Answer(team, name, id, a)
                }
                None => {
                    self.message = Some("not answered".into());
                    Effect::None
                }
            },
            Mode::ConfirmRestart(team, name) => match key {
                Key::Char('y') | Key::Char('Y') => {
                    self.message = Some(format!("restarting {team}/{name}..."));
                    Effect::Restart(team, name)
                }
                Key::Up
                | Key::Down
                | Key::Tab
                | Key::Enter
                | Key::Esc
                | Key::Backspace
                | Key::Char(_) => {
                    self.message = Some("restart cancelled".into());
                    Effect::None
                }
            },
        }
    }

    fn normal_key(&mut self, key: Key) -> Effect {
        let subject = self
            .selected_row()
            .map(|r| (r.team.clone(), r.name.clone()));
        let kind = self.selected_row().map(|r| r.kind);
        match key {
            Key::Char('q') | Key::Esc => Effect::Quit,
            Key::Up | Key::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                Effect::None
            }
            Key::Down | Key::Char('j') => {
                self.selected = (self.selected + 1).min(self.rows.len().saturating_sub(1));
                Effect::None
            }
            Key::Tab | Key::Char('v') => {
                self.view = self.view.next();
                Effect::None
            }
            Key::Char('?') => {
                self.mode = Mode::Help;
                Effect::None
            }
            Key::Char('/') | Key::Char('l') => {
                self.mode = Mode::Filter(self.filter.clone());
                Effect::None
            }
            Key::Char('a') | Key::Enter => match (subject, kind) {
                (Some((t, n)), Some(RowKind::MainSession | RowKind::Member)) => {
                    Effect::Attach(t, n)
                }
                _ => self.refuse("nothing to attach to on this row"),
            },
            Key::Char('s') | Key::Char('e') => match (subject, kind) {
                (Some((t, n)), Some(RowKind::Member)) => Effect::Shell(t, n),
                _ => self.refuse("a shell needs a member's row"),
            },
            Key::Char('r') => match (subject, kind) {
                (Some((t, n)), Some(RowKind::Member)) => {
                    self.mode = Mode::ConfirmRestart(t, n);
                    Effect::None
                }
                _ => self.refuse("only a member's row can be restarted"),
            },
            Key::Char('p') => {
                let pending = self
                    .selected_row()
                    .and_then(|r| r.approval.as_ref().map(|(p, _)| p.id.clone()));
                match (subject, pending) {
                    (Some((t, n)), Some(id)) => {
                        self.mode = Mode::Answer(t, n, id);
                        Effect::None
                    }
                    _ => self.refuse("no pending approval on this row"),
                }
            }
            Key::Backspace | Key::Char(_) => Effect::None,
        }
    }

    fn refuse(&mut self, why: &str) -> Effect {
        self.message = Some(why.to_string());
        Effect::None
    }

    fn filter_key(&mut self, mut text: String, key: Key) -> Effect {
        match key {
            Key::Enter => {
                self.filter = text.trim().to_string();
                Effect::Filter(self.filter.clone())
            }
            Key::Esc => Effect::None,
            Key::Backspace => {
                text.pop();
                self.mode = Mode::Filter(text);
                Effect::None
            }
            // A selector is short, printable text.
            Key::Char(c) if !c.is_control() && text.chars().count() < 200 => {
                text.push(c);
                self.mode = Mode::Filter(text);
                Effect::None
            }
            Key::Char(_) | Key::Up | Key::Down | Key::Tab => {
                self.mode = Mode::Filter(text);
                Effect::None
            }
        }
    }
}

/// `1.5G`, `512M`, `12K`, `800B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (size, unit) in UNITS {
        if n >= size {
            let v = n as f64 / size as f64;
            return if v < 10.0 {
                format!("{v:.1}{unit}")
            } else {
                format!("{v:.0}{unit}")
            };
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ateam::report::{TeamStatus, Usage};

    fn doc(cpu: f64) -> StatusDocument {
        let mut row = MemberStatus {
            name: "writer".into(),
            kind: RowKind::Member,
            parent: Some("lead".into()),
            state: "running".into(),
            detail: None,
            drifted: false,
            container: Some("ateam_t_writer".into()),
            container_id: Some("c1".into()),
            created_at: None,
            age_secs: Some(3),
            restarts: 2,
            next_restart: None,
            last_exit: None,
            transcript: None,
            transcript_bytes: 10,
            last_activity_at: None,
            last_activity_secs: Some(1),
            grants: None,
            limits_unenforced: false,
            egress: None,
            terminal: None,
            origin: None,
            usage: None,
            workspace: None,
            agent: None,
        };
        row.usage = Some(Usage {
            cpu_seconds: Some(cpu),
            memory_bytes: Some(3 << 20),
            memory_limit_bytes: Some(64 << 20),
            pids: Some(4),
            pids_limit: Some(64),
            shared: false,
        });
        let mut lead = row.clone();
        lead.name = "lead".into();
        lead.kind = RowKind::MainSession;
        lead.container_id = None;
        lead.usage = None;
        StatusDocument::new(
            vec![TeamStatus {
                team: "t".into(),
                engine: "docker".into(),
                members: vec![lead, row],
                drifted: false,
                board: None,
            }],
            None,
            std::time::SystemTime::now(),
        )
    }

    #[test]
    fn cpu_is_the_share_between_two_looks() {
        let mut d = Dashboard::new();
        let t0 = Instant::now();
        d.update(&doc(1.0), t0);
        assert_eq!(d.rows[1].cpu_pct, None, "one look gives no share");
        d.update(&doc(1.5), t0 + std::time::Duration::from_secs(2));
        let pct = d.rows[1].cpu_pct.unwrap();
        assert!((pct - 25.0).abs() < 1e-6, "{pct}");
        assert_eq!(d.rows[1].memory_limit, Some(64 << 20));
    }

    #[test]
    fn keys_move_select_and_ask_before_a_restart() {
        let mut d = Dashboard::new();
        d.update(&doc(1.0), Instant::now());
        assert_eq!(d.key(Key::Char('r')), Effect::None);
        assert!(d.message.is_some(), "a session's row cannot be restarted");
        d.key(Key::Down);
        assert_eq!(d.selected_row().unwrap().name, "writer");
        assert_eq!(d.key(Key::Char('r')), Effect::None);
        assert_eq!(d.mode, Mode::ConfirmRestart("t".into(), "writer".into()));
        assert_eq!(
            d.key(Key::Char('n')),
            Effect::None,
            "anything but y cancels"
        );
        d.key(Key::Char('r'));
        assert_eq!(
            d.key(Key::Char('y')),
            Effect::Restart("t".into(), "writer".into())
        );
        assert_eq!(
            d.key(Key::Char('s')),
            Effect::Shell("t".into(), "writer".into())
        );
        d.key(Key::Up);
        assert_eq!(d.key(Key::Char('s')), Effect::None, "no shell in a session");
        assert_eq!(d.key(Key::Enter), Effect::Attach("t".into(), "lead".into()));
        assert_eq!(d.key(Key::Char('q')), Effect::Quit);
    }

    #[test]
    fn a_filter_is_typed_then_applied_and_help_closes_on_any_key() {
        let mut d = Dashboard::new();
        d.key(Key::Char('/'));
        for c in "role=x".chars() {
            d.key(Key::Char(c));
        }
        d.key(Key::Backspace);
        d.key(Key::Char('\u{1b}'));
        assert_eq!(d.key(Key::Char('y')), Effect::None);
        assert_eq!(d.key(Key::Enter), Effect::Filter("role=y".into()));
        d.key(Key::Char('?'));
        assert_eq!(d.mode, Mode::Help);
        assert_eq!(
            d.key(Key::Char('q')),
            Effect::None,
            "q closes the help first"
        );
        assert_eq!(d.mode, Mode::Normal);
    }

    #[test]
    fn sizes_read_short() {
        assert_eq!(bytes(800), "800B");
        assert_eq!(bytes(3 << 20), "3.0M");
        assert_eq!(bytes(512 << 20), "512M");
    }
}

#[cfg(test)]
mod approval_keys {
    use super::*;

    fn pending(id: &str, approvable: bool) -> ateam::approvals::Pending {
        ateam::approvals::Pending {
            id: id.into(),
            team: "t".into(),
            member: "writer".into(),
            grant: "g".into(),
            want: ateam::approvals::Want::Host {
                entry: "pypi.org".into(),
            },
            count: 1,
            first_seen: 1.0,
            last_seen: 1.0,
            reason: "not listed".into(),
            not_approvable: (!approvable).then(|| "a loopback address".to_string()),
            helper: None,
        }
    }

    fn dashboard(approvals: Vec<ateam::approvals::Pending>) -> Dashboard {
        let mut d = Dashboard::new();
        d.rows = vec![Row {
            team: "t".into(),
            name: "writer".into(),
            kind: RowKind::Member,
            state: "running".into(),
            drifted: false,
            restarts: 0,
            cpu_pct: None,
            memory: None,
            shared: false,
            memory_limit: None,
            pids: None,
            egress: None,
            transcript_bytes: 0,
            last_activity_secs: None,
            container_id: None,
            terminal: None,
            detail: None,
            workspace: None,
            agent: None,
            approval: approvals.first().cloned().map(|p| (p, approvals.len())),
        }];
        d
    }

    #[test]
    fn p_asks_how_to_answer_the_selected_members_approval() {
        let mut d = dashboard(vec![]);
        assert_eq!(d.key(Key::Char('p')), Effect::None);
        assert_eq!(d.mode, Mode::Normal, "nothing pending: nothing asked");
        assert!(
            d.message
                .as_deref()
                .unwrap()
                .contains("no pending approval")
        );
        let mut d = dashboard(vec![pending("ab12cd34", true)]);
        for (key, answer) in [
            ('o', Answer::AllowOnce),
            ('A', Answer::AllowAlways),
            ('n', Answer::DenyOnce),
            ('D', Answer::DenyAlways),
        ] {
            assert_eq!(d.key(Key::Char('p')), Effect::None);
            assert_eq!(
                d.mode,
                Mode::Answer("t".into(), "writer".into(), "ab12cd34".into())
            );
            assert_eq!(
                d.key(Key::Char(key)),
                Effect::Answer("t".into(), "writer".into(), "ab12cd34".into(), answer)
            );
            assert_eq!(d.mode, Mode::Normal);
        }
        d.key(Key::Char('p'));
        assert_eq!(
            d.key(Key::Char('y')),
            Effect::None,
            "any other key: not now"
        );
        assert_eq!(d.message.as_deref(), Some("not answered"));
    }
}
