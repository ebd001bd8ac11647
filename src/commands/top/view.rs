//! Drawing the dashboard: a header, the table of rows, the selected row's detail, a line of
//! keys. Pure over the model, so it is tested on ratatui's `TestBackend` at 80x24.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Paragraph, Row as TableRow, Table, TableState,
};

use super::model::{Dashboard, Mode, Row, bytes};
use ateam::core::transcript::Verdict;
use ateam::report::RowKind;

/// The selected row's detail, as fetched for its view (already quoted as data).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Detail {
    /// (team, name) it was fetched for.
    pub of: Option<(String, String)>,
    pub lines: Vec<String>,
}

/// Colours, or none (`NO_COLOR`, a dumb terminal): then drift and the selection are told by
/// text and reverse video alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
}

pub const KEYS: &[(&str, &str)] = &[
    ("up/down j/k", "select a row"),
    ("tab v", "next detail: output, egress, transcript"),
    (
        "a enter",
        "attach: a session's terminal, a member's console",
    ),
    ("s e", "a shell in the member (as its user)"),
    (
        "r",
        "restart the member (asks first; a new container through the gate)",
    ),
    (
        "p",
        "answer the member's pending approval: o allow once, A allow always, n deny once, D deny always",
    ),
    (
        "/ l",
        "filter by label selector (role=review,tier!=x); empty: all",
    ),
    ("?", "these keys"),
    ("q esc", "quit"),
];

pub fn draw(f: &mut Frame, d: &Dashboard, detail: &Detail, theme: Theme) {
    let [head, table, info, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Percentage(50),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(header(d)), head);
    draw_table(f, d, table, theme);
    draw_detail(f, d, detail, info);
    f.render_widget(Paragraph::new(footer(d)), foot);
    if d.mode == Mode::Help {
        draw_help(f, f.area());
    }
}

fn header(d: &Dashboard) -> String {
    let members = d.rows.iter().filter(|r| r.kind == RowKind::Member).count();
    let drifted = d.rows.iter().filter(|r| r.drifted).count();
    let teams: std::collections::BTreeSet<&str> = d.rows.iter().map(|r| r.team.as_str()).collect();
    let mut s = format!(
        "ateam top  {} team(s) {members} member(s) {drifted} drifted  {}",
        teams.len(),
        d.observed_at
    );
    if let Some(c) = &d.controller {
        s.push_str(&format!("  {c}"));
    }
    if let Some(b) = &d.boards {
        s.push_str(&format!("  {b}"));
    }
    if !d.filter.is_empty() {
        s.push_str(&format!("  -l {}", d.filter));
    }
    s
}

fn footer(d: &Dashboard) -> String {
    match &d.mode {
        Mode::Filter(text) => format!("label selector: {text}_  (enter: apply, esc: cancel)"),
        Mode::ConfirmRestart(t, n) => {
            format!("restart {t}/{n}? a new container, its transcript stays. y/n")
        }
        Mode::Answer(t, n, id) => format!(
            "approval {id} of {t}/{n}: o allow once  A allow always  n deny once  D deny always  (any other key: not now)"
        ),
        Mode::Normal | Mode::Help => match &d.message {
            Some(m) => m.clone(),
            None => "q quit  ? keys  tab detail  a attach  s shell  r restart  p approve  / filter"
                .into(),
        },
    }
}

fn cells(r: &Row) -> [String; 9] {
    let name = format!("{}/{}", r.team, r.name);
    // A main session is a terminal on the host, not a container.
    let state = match (r.kind, &r.agent) {
        (RowKind::MainSession, _) => format!("{} (tty)", r.state),
        // An agent's outcome beside its state: `exited 0 failed` is not a success.
        (RowKind::Member, Some((v, _))) if *v != Verdict::Running => {
            format!("{} {}", r.state, v.as_str())
        }
        (RowKind::Member | RowKind::Transcript, _) => r.state.clone(),
    };
    let mem = match (r.memory, r.memory_limit) {
        _ if r.shared => "shared".into(),
        (Some(m), Some(l)) => format!("{}/{}", bytes(m), bytes(l)),
        (Some(m), None) => bytes(m),
        (None, _) => "-".into(),
    };
    [
        name,
        state,
        r.restarts.to_string(),
        r.cpu_pct.map_or("-".into(), |c| format!("{c:.1}")),
        mem,
        r.pids.map_or("-".into(), |p| p.to_string()),
        r.egress.map_or("-".into(), |(ok, no)| format!("{ok}/{no}")),
        bytes(r.transcript_bytes),
        r.last_activity_secs
            .map_or("-".into(), |s| crate::commands::events::age(s as f64)),
    ]
}

fn draw_table(f: &mut Frame, d: &Dashboard, area: Rect, theme: Theme) {
    let head = TableRow::new(
        [
            "NAME", "STATE", "RST", "CPU%", "MEM", "PIDS", "NET1m", "TRANS", "ACTIVE",
        ]
        .map(Cell::from),
    )
    .style(Style::default().add_modifier(Modifier::BOLD));
    let rows = d.rows.iter().map(|r| {
        let failed = r.agent.as_ref().is_some_and(|(v, _)| *v == Verdict::Failed);
        let style = if r.drifted || failed {
            theme.fg(Color::Red)
        } else if r.state == "running" {
            theme.fg(Color::Green)
        } else {
            theme.fg(Color::Yellow)
        };
        let mut c = cells(r);
        if r.drifted && !theme.color {
            // Without colour, drift is said in the text.
            c[1] = format!("!{}", c[1]);
        }
        TableRow::new(c.map(Cell::from)).style(style)
    });
    // NAME and STATE as wide as their widest cell (within bounds), not the screen's rest.
    let widest = |i: usize, min: usize, max: usize| {
        let w = d.rows.iter().map(|r| cells(r)[i].chars().count()).max();
        w.unwrap_or(0).clamp(min, max) as u16
    };
    let widths = [
        Constraint::Length(widest(0, 14, 48)),
        Constraint::Length(widest(1, 8, 28)),
        Constraint::Length(3),
        Constraint::Length(5),
        Constraint::Length(11),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(6),
    ];
    let table = Table::new(rows, widths)
        .header(head)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .block(Block::default().borders(Borders::BOTTOM));
    let mut state = TableState::default().with_selected(Some(d.selected));
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_detail(f: &mut Frame, d: &Dashboard, detail: &Detail, area: Rect) {
    let Some(r) = d.selected_row() else {
        f.render_widget(
            Paragraph::new("no rows (nothing applied, or the filter leaves none)"),
            area,
        );
        return;
    };
    let mut lines: Vec<Line> = Vec::new();
    let mut about = format!("{}/{}: {} of {}", r.team, r.name, d.view.title(), r.state);
    if let Some(t) = &r.terminal {
        about = format!("{}/{}: terminal tmux -S {t} attach", r.team, r.name);
    }
    lines.push(Line::from(Span::styled(
        about,
        Style::default().add_modifier(Modifier::BOLD),
    )));
    if let Some(why) = &r.detail {
        lines.push(Line::from(why.clone()));
    }
    if let Some(w) = &r.workspace {
        lines.push(Line::from(w.clone()));
    }
    if let Some((v, why)) = &r.agent
        && *v != Verdict::Running
    {
        lines.push(Line::from(why.clone()));
    }
    if let Some((p, n)) = &r.approval {
        let more = match n {
            1 => String::new(),
            n => format!(" (and {} more: ateam approvals)", n - 1),
        };
        let now = ateam::servers::egress::log::Event::now();
        lines.push(Line::from(format!(
            "pending approval (p answers): {}{more}",
            ateam::approvals::line(p, now)
        )));
    }
    let fresh = detail.of.as_ref() == Some(&(r.team.clone(), r.name.clone()));
    let room = area.height.saturating_sub(lines.len() as u16) as usize;
    if fresh {
        let from = detail.lines.len().saturating_sub(room);
        lines.extend(detail.lines[from..].iter().map(|l| Line::from(l.clone())));
    } else {
        lines.push(Line::from("..."));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// The keys in a box as wide as its longest line, or the screen: a line too long for it
/// wraps (never cut), and the box is as tall as that takes.
fn draw_help(f: &mut Frame, area: Rect) {
    let texts: Vec<String> = KEYS
        .iter()
        .map(|(k, what)| format!("{k:<12} {what}"))
        .collect();
    let longest = texts.iter().map(|t| t.chars().count()).max().unwrap_or(0) as u16;
    let w = (longest + 2).min(area.width);
    let inner = w.saturating_sub(2).max(1) as usize;
    let rows: usize = texts
        .iter()
        .map(|t| t.chars().count().div_ceil(inner).max(1))
        .sum();
    let h = (rows as u16 + 2).min(area.height.saturating_sub(1));
    let r = Rect::new(area.x + (area.width - w) / 2, area.y + 1, w, h);
    let lines: Vec<Line> = texts.into_iter().map(Line::from).collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(ratatui::widgets::Wrap { trim: false })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" keys (any key closes) "),
            ),
        r,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn row(name: &str, state: &str, drifted: bool) -> Row {
        Row {
            team: "t".into(),
            name: name.into(),
            kind: RowKind::Member,
            state: state.into(),
            drifted,
            restarts: 1,
            cpu_pct: Some(12.5),
            memory: Some(3 << 20),
            shared: false,
            memory_limit: Some(64 << 20),
            pids: Some(4),
            egress: Some((7, 2)),
            transcript_bytes: 2048,
            last_activity_secs: Some(5),
            container_id: Some("c".into()),
            terminal: None,
            detail: None,
            workspace: None,
            agent: None,
            approval: None,
        }
    }

    fn screen(d: &Dashboard, detail: &Detail, color: bool) -> String {
        screen_of(d, detail, color, 80, 24)
    }

    fn screen_of(d: &Dashboard, detail: &Detail, color: bool, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, d, detail, Theme { color })).unwrap();
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
            .collect()
    }

    /// On a wide screen the NAME column is as wide as its names, not the screen's rest; the
    /// keys' box fits a narrow screen by wrapping, never cutting.
    #[test]
    fn columns_fit_their_content_and_the_keys_fit_the_screen() {
        let mut d = Dashboard::new();
        d.rows = vec![row("writer", "running", false)];
        let s = screen_of(&d, &Detail::default(), false, 200, 24);
        let line = s.lines().find(|l| l.contains("t/writer")).unwrap();
        let state = line.find("running").unwrap();
        assert!(state < 20, "NAME takes {state} columns: {line}");
        d.mode = Mode::Help;
        for width in [60, 80, 100] {
            let s = screen_of(&d, &Detail::default(), false, width, 24);
            let all: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
            for (_, what) in KEYS {
                let last = what.split_whitespace().last().unwrap();
                assert!(all.contains(last), "{width}: {what:?} cut:\n{s}");
            }
        }
    }

    #[test]
    fn the_table_and_the_detail_fit_80_by_24() {
        let mut d = Dashboard::new();
        d.rows = vec![
            row("writer", "running", false),
            row("tester", "exited 1", true),
        ];
        d.rows[1].workspace = Some("branch ateam/t/tester, 2 ahead".into());
        d.rows[1].agent = Some((
            Verdict::Failed,
            "claude failed: task 2 failed: the tools that failed: Write (EACCES)".into(),
        ));
        d.selected = 1;
        let detail = Detail {
            of: Some(("t".into(), "tester".into())),
            lines: vec!["hello from tester".into()],
        };
        let s = screen(&d, &detail, true);
        assert!(s.contains("t/writer"), "{s}");
        assert!(s.contains("3.0M/64M"), "{s}");
        assert!(s.contains("7/2"), "{s}");
        assert!(s.contains("hello from tester"), "{s}");
        assert!(s.contains("branch ateam/t/tester, 2 ahead"), "{s}");
        assert!(s.contains("exited 1 failed"), "{s}");
        assert!(s.contains("the tools that failed: Write (EACCES)"), "{s}");
        assert!(s.contains("q quit"), "{s}");
        let plain = screen(&d, &detail, false);
        assert!(
            plain.contains("!exited 1"),
            "drift said without colour: {plain}"
        );
    }

    #[test]
    fn help_lists_every_key() {
        let mut d = Dashboard::new();
        d.mode = Mode::Help;
        let s = screen(&d, &Detail::default(), false);
        for (k, _) in KEYS {
            assert!(s.contains(k), "{k}: {s}");
        }
    }
}
