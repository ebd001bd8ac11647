//! `ateam tasks`, `ateam messages` and `ateam mcp`: the team's board for the person, and its
//! tools for a main session's agent (docs/teams.md). What sessions wrote is shown escaped.

use anyhow::{Context, bail};

use ateam::board::store::{Board, Listed};
use ateam::board::{Actor, Roster, Task, TaskOp};
use ateam::core::untrusted::shown;
use ateam::model::Team;

use super::common::app;
use super::exit::Exit;
use crate::cli::{Global, MessagesAction, TasksAction};

/// The applied team `name`, or the only one with a board.
fn board_team(global: &Global, name: Option<&str>) -> anyhow::Result<(Team, Board)> {
    let ctx = app(global);
    let desired = ctx.applied_with_requests(name)?;
    let mut teams: Vec<Team> = desired.teams.into_iter().filter(|t| t.board).collect();
    let team = match (teams.len(), name) {
        (1, _) => teams.remove(0),
        (0, Some(n)) => bail!("team `{n}` has no board: its Team sets no `board: true`"),
        (0, None) => bail!("no applied team has a board (a Team with `board: true`)"),
        _ => bail!("several teams have a board: name one with --team"),
    };
    let board = Board::new(&ctx.host.state_dir, &team.name, ctx.owner);
    Ok((team, board))
}

fn roster(t: &Team) -> Roster {
    Roster {
        members: t.members.iter().map(|m| m.name.clone()).collect(),
        mains: t.sessions.iter().map(|s| s.name.clone()).collect(),
    }
}

/// `ateam tasks`.
pub fn tasks(
    global: &Global,
    team: Option<&str>,
    action: Option<TasksAction>,
    json: bool,
) -> anyhow::Result<Exit> {
    let (t, board) = board_team(global, team)?;
    let op = match action {
        None => {
            let tasks = board.tasks()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tasks.tasks)?);
            } else {
                print_tasks(&tasks.tasks);
            }
            return Ok(Exit::Ok);
        }
        Some(TasksAction::Show { id }) => {
            let tasks = board.tasks()?;
            let task = tasks.get(id)?;
            if json {
                println!("{}", serde_json::to_string_pretty(task)?);
            } else {
                print_task(task);
            }
            return Ok(Exit::Ok);
        }
        Some(TasksAction::Add {
            title,
            body,
            owner,
            after,
        }) => TaskOp::Create {
            title,
            body,
            owner,
            depends_on: after,
        },
        Some(TasksAction::Done { id, note }) => TaskOp::Complete { id, note },
        Some(TasksAction::Release { id, note }) => TaskOp::Release { id, note },
        Some(TasksAction::Reopen { id, note }) => TaskOp::Reopen { id, note },
    };
    let task = board
        .task(op, &Actor::Person, &roster(&t))?
        .context("the board refused")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&task)?);
    } else {
        print_task(&task);
    }
    Ok(Exit::Ok)
}

fn owner(t: &Task) -> String {
    t.owner
        .as_ref()
        .map_or_else(|| "-".to_string(), ToString::to_string)
}

fn print_tasks(tasks: &[Task]) {
    if tasks.is_empty() {
        println!("no tasks");
        return;
    }
    println!("{:<5} {:<11} {:<24} TITLE", "ID", "STATE", "OWNER");
    for t in tasks {
        println!(
            "{:<5} {:<11} {:<24} {}",
            t.id,
            t.state.name(),
            owner(t),
            shown(&t.title)
        );
    }
}

fn print_task(t: &Task) {
    println!("task {}: {}", t.id, shown(&t.title));
    println!("state: {}   owner: {}", t.state.name(), owner(t));
    println!("made by: {}", t.created_by);
    if !t.depends_on.is_empty() {
        let deps: Vec<String> = t.depends_on.iter().map(u64::to_string).collect();
        println!("after: {}", deps.join(", "));
    }
    if !t.body.is_empty() {
        println!("\n{}\n", shown(&t.body));
    }
    println!("history:");
    for c in &t.history {
        let note = c
            .note
            .as_deref()
            .map(|n| format!(": {}", shown(n)))
            .unwrap_or_default();
        println!("  {} {} by {}{note}", when(c.at), c.what, c.by);
    }
}

fn when(secs: u64) -> String {
    ateam::core::container::rfc3339_epoch(secs as i64).unwrap_or_else(|| secs.to_string())
}

/// `ateam messages`.
pub fn messages(
    global: &Global,
    team: Option<&str>,
    action: Option<MessagesAction>,
    json: bool,
    last: usize,
) -> anyhow::Result<Exit> {
    let (t, board) = board_team(global, team)?;
    match action {
        Some(MessagesAction::Send { body, to }) => {
            let m = board
                .send(&Actor::Person, to, body, &roster(&t))?
                .context("the board refused")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
            } else {
                println!("sent message {}", m.id);
            }
        }
        None => {
            let mut listed = board.messages()?;
            let skip = listed.messages.len().saturating_sub(last);
            listed.messages.drain(..skip);
            if json {
                println!("{}", serde_json::to_string_pretty(&listed.messages)?);
            } else {
                print_messages(&listed);
            }
        }
    }
    Ok(Exit::Ok)
}

fn print_messages(l: &Listed) {
    if l.dropped > 0 {
        println!(
            "({} older messages were dropped: the board keeps about 2 MiB)",
            l.dropped
        );
    }
    if l.messages.is_empty() {
        println!("no messages");
    }
    for m in &l.messages {
        let to = if m.to.is_empty() {
            "everyone".to_string()
        } else {
            m.to.iter()
                .map(|n| shown(n).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("#{} {} {} to {to}:", m.id, when(m.at), m.from);
        for line in m.body.lines() {
            println!("    {}", shown(line));
        }
    }
}

/// `ateam mcp`: the team's tools on standard input and output, as main session `session`.
pub fn mcp(global: &Global, team: Option<&str>, session: &str) -> anyhow::Result<Exit> {
    use rmcp::ServiceExt;
    let (t, _) = board_team(global, team)?;
    if !t.sessions.iter().any(|s| s.name == session) {
        bail!("team `{}` has no main session `{session}`", t.name);
    }
    let ctx = app(global);
    let tools = ateam::app::team_tools::TeamTools::new(
        &ctx.host.state_dir,
        &t.name,
        Actor::Main(session.to_string()),
        ctx.owner,
        std::sync::Arc::default(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let running = tools.serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
        anyhow::Ok(())
    })?;
    Ok(Exit::Ok)
}
