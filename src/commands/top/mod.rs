//! `ateam top`: a live dashboard of every team in the state folder. A task looks once a
//! second through the library call `status` makes (`app::status::status`) and fetches the
//! selected row's detail; the terminal loop draws and reads keys. Nothing changes without a
//! key: attach and shell run `ateam attach` / `ateam exec` in the terminal (the dashboard
//! steps aside and comes back), restart asks first and then gives the member a new container
//! through the same converge an apply runs (the gate checks its start).

mod model;
mod view;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::cli::{BackendArg, Global};
use ateam::app::App;
use ateam::backend::Backend;
use ateam::core::selector::Selector;
use ateam::report::{RowKind, StatusDocument};
use model::{Dashboard, Effect, Key, View};
use view::{Detail, Theme};

use super::common::app;
use super::exit::Exit;

/// How often the dashboard looks again.
const EVERY: Duration = Duration::from_secs(1);
/// Lines of output and of egress decisions kept for the detail.
const DETAIL_LINES: usize = 40;

/// What the looking task shares with the terminal loop.
#[derive(Default)]
struct Shared {
    doc: Option<(StatusDocument, Instant)>,
    error: Option<String>,
    detail: Detail,
    /// What the loop wants looked at: the selector and the selected row's view.
    selector: Option<Selector>,
    want: Option<(String, String, View, Option<String>)>,
    /// Bumped by the loop to ask for a look at once (a key changed what to fetch).
    nudge: u64,
    /// Said by a restart when it ends.
    said: Option<String>,
}

pub fn run(
    global: &Global,
    rt: &tokio::runtime::Runtime,
    selector: Option<Selector>,
) -> anyhow::Result<Exit> {
    let ctx = Arc::new(app(global));
    let shared = Arc::new(Mutex::new(Shared {
        selector,
        ..Shared::default()
    }));
    rt.spawn(look_loop(ctx.clone(), shared.clone()));
    // Ctrl-C in an attached console ends that console, not the dashboard (in raw mode the
    // dashboard reads Ctrl-C as a key).
    rt.spawn(async { while tokio::signal::ctrl_c().await.is_ok() {} });
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
        || std::env::var("TERM").is_ok_and(|t| t == "dumb");
    let theme = Theme { color: !no_color };
    let mut terminal = ratatui::try_init().context("cannot take the terminal")?;
    crate::logging::hold(true);
    let result = ui_loop(&mut terminal, global, &ctx, &shared, rt, theme);
    crate::logging::hold(false);
    ratatui::try_restore().context("cannot give the terminal back")?;
    result
}

fn ui_loop(
    terminal: &mut ratatui::DefaultTerminal,
    global: &Global,
    ctx: &Arc<App>,
    shared: &Arc<Mutex<Shared>>,
    rt: &tokio::runtime::Runtime,
    theme: Theme,
) -> anyhow::Result<Exit> {
    let mut d = Dashboard::new();
    let mut seen: Option<Instant> = None;
    loop {
        let detail = take_news(&mut d, shared, &mut seen);
        terminal.draw(|f| view::draw(f, &d, &detail, theme))?;
        if !event::poll(Duration::from_millis(200))? {
            continue;
        }
        let Some(key) = read_key(event::read()?) else {
            continue;
        };
        let effect = d.key(key);
        match effect {
            Effect::None => {}
            Effect::Quit => return Ok(Exit::Ok),
            Effect::Filter(text) => match Selector::parse(&text) {
                Ok(sel) => {
                    let mut s = lock(shared);
                    s.selector = (!text.is_empty()).then_some(sel);
                    s.nudge += 1;
                    d.message = None;
                }
                Err(e) => d.message = Some(format!("not a selector: {e}")),
            },
            Effect::Attach(team, name) => {
                let args = ["attach", &name, "--team", &team];
                d.message = step_aside(terminal, global, &args)?;
            }
            Effect::Shell(team, name) => {
                let args = ["exec", &name, "--team", &team, "-it", "--", "sh"];
                d.message = step_aside(terminal, global, &args)?;
            }
            Effect::Restart(team, name) => {
                rt.spawn(restart(ctx.clone(), shared.clone(), team, name));
            }
            Effect::Answer(team, name, id, how) => {
                rt.spawn(answer(ctx.clone(), shared.clone(), team, name, id, how));
            }
        }
        let mut s = lock(shared);
        let want = d.selected_row().map(|r| {
            (
                r.team.clone(),
                r.name.clone(),
                d.view,
                r.container_id.clone(),
            )
        });
        if s.want != want {
            s.want = want;
            s.nudge += 1;
        }
    }
}

/// Takes in what the looking task found since `seen`; returns the detail to draw.
fn take_news(d: &mut Dashboard, shared: &Arc<Mutex<Shared>>, seen: &mut Option<Instant>) -> Detail {
    let mut s = lock(shared);
    if let Some((doc, at)) = &s.doc
        && *seen != Some(*at)
    {
        d.update(doc, *at);
        *seen = Some(*at);
    }
    if let Some(e) = s.error.take() {
        d.message = Some(e);
    }
    // A log line a key's action wrote on its way is older than that action's outcome: the
    // outcome is shown last, so it is what stays on the message line.
    if let Some(l) = crate::logging::take_held() {
        d.message = Some(l);
    }
    if let Some(m) = s.said.take() {
        d.message = Some(m);
    }
    if s.want.is_none()
        && let Some(r) = d.selected_row()
    {
        s.want = Some((
            r.team.clone(),
            r.name.clone(),
            d.view,
            r.container_id.clone(),
        ));
        s.nudge += 1;
    }
    s.detail.clone()
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The terminal's event as a key of the dashboard's (Ctrl-C is `q`).
#[allow(clippy::wildcard_enum_match_arm, reason = "crossterm's key codes grow")]
fn read_key(ev: Event) -> Option<Key> {
    let Event::Key(k) = ev else { return None };
    if k.kind != KeyEventKind::Press {
        return None;
    }
    if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
        return Some(Key::Char('q'));
    }
    Some(match k.code {
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Tab => Key::Tab,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Char(c) => Key::Char(c),
        // crossterm's other keys (function, media, modifier keys...) do nothing here.
        _ => return None,
    })
}

/// Gives the terminal to `ateam ARGS` until it ends, then takes it back; what to tell the
/// person when it failed.
fn step_aside(
    terminal: &mut ratatui::DefaultTerminal,
    global: &Global,
    args: &[&str],
) -> anyhow::Result<Option<String>> {
    ratatui::try_restore()?;
    crate::logging::hold(false);
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    if let Some(dir) = &global.state_dir {
        cmd.arg("--state-dir").arg(dir);
    }
    if let Some(b) = global.backend {
        cmd.arg("--backend").arg(match b {
            BackendArg::Auto => "auto",
            BackendArg::Docker => "docker",
            BackendArg::Podman => "podman",
        });
    }
    let status = cmd.args(args).status();
    *terminal = ratatui::try_init()?;
    crate::logging::hold(true);
    terminal.clear()?;
    Ok(match status {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("ateam {} ended: {s}", args.join(" "))),
        Err(e) => Some(format!("cannot run ateam {}: {e}", args[0])),
    })
}

/// Looks once a second (or at once when nudged), and fetches the wanted detail.
async fn look_loop(ctx: Arc<App>, shared: Arc<Mutex<Shared>>) {
    let mut backend: Option<Arc<dyn Backend>> = None;
    let mut nudged = 0;
    loop {
        let selector = lock(&shared).selector.clone();
        let looked = match ctx.applied(None) {
            Ok(desired) => {
                if backend.is_none() && !desired.teams.is_empty() {
                    backend = ctx.connect(&desired.teams).await.ok().map(|(b, _)| b);
                }
                ateam::app::status::status(&ctx, &desired, selector.as_ref()).await
            }
            Err(e) => Err(e),
        };
        let want = lock(&shared).want.clone();
        let detail = match &want {
            Some(w) => fetch_detail(&ctx, backend.as_deref(), w, looked.as_ref().ok()).await,
            None => Detail::default(),
        };
        {
            let mut s = lock(&shared);
            match looked {
                Ok(doc) => {
                    s.doc = Some((doc, Instant::now()));
                    s.error = None;
                }
                Err(e) => s.error = Some(format!("cannot look: {e}")),
            }
            s.detail = detail;
            nudged = s.nudge.max(nudged);
        }
        let deadline = Instant::now() + EVERY;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if lock(&shared).nudge != nudged {
                break;
            }
        }
    }
}

/// The selected row's output, egress decisions or transcript tail, quoted as data.
async fn fetch_detail(
    ctx: &App,
    backend: Option<&dyn Backend>,
    (team, name, view, container): &(String, String, View, Option<String>),
    doc: Option<&StatusDocument>,
) -> Detail {
    let row = doc.and_then(|d| {
        d.teams
            .iter()
            .filter(|t| &t.team == team)
            .flat_map(|t| t.members.iter())
            .find(|m| &m.name == name)
    });
    let lines = match view {
        View::Output => match (backend, container) {
            (Some(b), Some(id)) => match ateam::backend::logs_text(b, id, DETAIL_LINES).await {
                Ok(text) => text
                    .lines()
                    .map(|l| ateam::core::untrusted::shown(l).into_owned())
                    .collect(),
                Err(e) => vec![format!("cannot read its output: {e}")],
            },
            _ => vec!["no container: no output".into()],
        },
        View::Egress => {
            let paths = ateam::servers::egress::Paths::new(&ctx.host.state_dir, team, name);
            let events = ateam::servers::egress::log::read(&paths.log);
            let from = events.len().saturating_sub(DETAIL_LINES);
            if events.is_empty() {
                vec!["no egress decisions (no proxy, or nothing asked yet)".into()]
            } else {
                events[from..].iter().map(decision_line).collect()
            }
        }
        View::Transcript if row.is_some_and(|r| r.agent.is_some()) => {
            agent_transcript(ctx, team, name)
        }
        View::Transcript => match row.and_then(|r| r.transcript.as_deref()) {
            Some(dir) => match ateam::sessions::transcript_tail(dir) {
                Some((file, _, text)) => std::iter::once(format!("{file}:"))
                    .chain(text.lines().map(|l| format!("  {l}")))
                    .collect(),
                None => vec!["no transcript file yet".into()],
            },
            None => vec!["no transcript folder".into()],
        },
    };
    let lines = match row.map(|r| r.kind) {
        Some(RowKind::MainSession) if *view == View::Output => {
            vec!["a main session: attach (a) to see its terminal".into()]
        }
        Some(RowKind::MainSession | RowKind::Member | RowKind::Transcript) | None => lines,
    };
    Detail {
        of: Some((team.clone(), name.clone())),
        lines,
    }
}

/// How much of an agent's newest session the detail renders: its last lines are shown.
const AGENT_TAIL: u64 = 256 << 10;

/// An agent member's own transcript, rendered as `ateam transcript` renders it: the end of
/// its newest session.
fn agent_transcript(ctx: &App, team: &str, name: &str) -> Vec<String> {
    use ateam::core::transcript::{parse, render::Renderer};
    use ateam::transcripts::{self, AgentHome};
    let home = ctx.applied_with_requests(Some(team)).ok().and_then(|d| {
        let t = d.teams.into_iter().next()?;
        t.members
            .iter()
            .find(|m| m.name == name)
            .and_then(AgentHome::of)
    });
    let Some(home) = home else {
        return vec!["no agent transcript".into()];
    };
    let Some(s) = transcripts::sessions(&home).into_iter().next() else {
        return vec!["no session yet".into()];
    };
    let Ok((bytes, _)) = transcripts::read_tail(&home, &s, AGENT_TAIL) else {
        return vec!["its session cannot be read".into()];
    };
    let mut r = Renderer::new(home.kind);
    let mut lines: Vec<String> = parse(home.kind, &bytes)
        .iter()
        .flat_map(|i| r.item(i))
        .collect();
    lines.extend(r.unfinished());
    let from = lines.len().saturating_sub(DETAIL_LINES);
    std::iter::once(format!(
        "session {} (ateam transcript {name}):",
        ateam::core::untrusted::shown(&s.id)
    ))
    .chain(lines.drain(from..))
    .collect()
}

/// One egress decision on a line (its fields were made safe to show when read).
fn decision_line(e: &ateam::servers::egress::log::Event) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_secs_f64(e.ts.max(0.0));
    let when = humantime::format_rfc3339_seconds(at).to_string();
    let verdict = match e.verdict {
        ateam::servers::egress::log::Verdict::Allowed => "allowed",
        ateam::servers::egress::log::Verdict::Refused => "REFUSED",
        ateam::servers::egress::log::Verdict::Failed => "failed",
    };
    let mut l = format!(
        "{} {verdict} {} {}:{}",
        when.get(11..19).unwrap_or(&when),
        e.method,
        e.host,
        e.port
    );
    if let Some(p) = &e.path {
        l.push_str(p);
    }
    if let Some(r) = &e.reason {
        l.push_str(&format!(" ({r})"));
    }
    l
}

/// An answer to a member's pending approval, as `ateam approvals allow|deny ID --once|
/// --always` gives it (`app::approvals`): the person's own, from their terminal.
async fn answer(
    ctx: Arc<App>,
    shared: Arc<Mutex<Shared>>,
    team: String,
    name: String,
    id: String,
    how: model::Answer,
) {
    use ateam::app::approvals::{self, Always};
    use model::Answer;
    let secret = |n: &str| std::env::var(n).ok();
    let quiet = &ateam::execute::Quiet;
    let approvable = matches!(how, Answer::AllowOnce | Answer::AllowAlways);
    let done = match approvals::find(&ctx, Some(&team), &id, approvable) {
        Err(e) => Err(e),
        Ok(f) => match how {
            Answer::AllowOnce => approvals::allow_once(&ctx, &f, &|_| {}),
            Answer::DenyOnce => approvals::deny_once(&ctx, &f, &|_| {}),
            Answer::AllowAlways => {
                approvals::always(&ctx, &f, Always::Allow, &secret, quiet, &|_| {})
                    .await
                    .map(|_| ())
            }
            Answer::DenyAlways => {
                approvals::always(&ctx, &f, Always::Deny, &secret, quiet, &|_| {})
                    .await
                    .map(|_| ())
            }
        },
    };
    let said = match done {
        Ok(()) => format!("{id} of {team}/{name}: {}", how.words()),
        Err(e) => format!("{id} of {team}/{name} not answered: {e}"),
    };
    let mut s = lock(&shared);
    s.said = Some(said);
    s.nudge += 1;
}

/// The member's restart (`app::restart`, as `ateam restart`): judged whole and checked at
/// its gate before its old container goes, so one that cannot happen changes nothing.
async fn restart(ctx: Arc<App>, shared: Arc<Mutex<Shared>>, team: String, name: String) {
    let secret = |n: &str| std::env::var(n).ok();
    let done = ateam::app::restart::restart(
        &ctx,
        &team,
        &name,
        false,
        &secret,
        &ateam::execute::Quiet,
        |_| {},
    )
    .await;
    let said = match done {
        Ok(()) => format!("{team}/{name} restarted"),
        Err(e) => format!("{team}/{name} not restarted: {e}"),
    };
    let mut s = lock(&shared);
    s.said = Some(said);
    s.nudge += 1;
}
