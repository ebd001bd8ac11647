//! `logs`, `exec` and `attach`: looking inside one member (through the engine) or joining a
//! main session's terminal.

use std::collections::BTreeMap;

use anyhow::{Context, bail};

use crate::cli::Global;
use ateam::backend::LogOptions;
use ateam::core::container::{ContainerRuntime, ContainerState};
use ateam::core::container::{EngineKind, container_name, is_replacement, labels};
use ateam::core::layout::{
    gate_dir, member_ctl_dir, member_record_path, session_socket_path, store_id, team_run_dir,
};
use ateam::core::selector::Selector;
use ateam::policy::GATE_EXEC;
use ateam::runtime::gate::is_released;
use ateam::store::Record;

use super::common::{app, waiting};
use super::exit::Exit;

/// The one applied team with a member `member`, and that member.
pub fn member_of<'a>(
    applied: &'a ateam::model::Model,
    member: &str,
) -> anyhow::Result<(&'a ateam::model::Team, &'a ateam::model::Member)> {
    let mut found = applied
        .teams
        .iter()
        .filter_map(|t| t.members.iter().find(|m| m.name == member).map(|m| (t, m)));
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(one),
        (None, _) => bail!("no applied team has a member `{member}`"),
        (Some(_), Some(_)) => {
            bail!("several teams have a member `{member}`; say which with --team")
        }
    }
}

/// A member's container, found: its engine, its id, its team.
struct Found {
    backend: std::sync::Arc<dyn ateam::backend::Backend>,
    id: String,
    team: String,
    /// The OCI runtime the engine runs it under, as it names it.
    runtime: String,
}

/// What a command wants of a member's container: whatever the engine keeps of it (its output),
/// or a process in it (which needs a start ateam checked and released).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Output,
    Process,
}

/// The member's recorded container, if what `reach` wants of it is safe now: a running start
/// that ateam did not release (restarted by hand or by the engine, its folders unchecked) is
/// refused for both. An exited container's output is let through: on a start that was never
/// released, only the gate ran, and its output is the gate's own line.
async fn find(
    ctx: &ateam::app::App,
    team: Option<&str>,
    member: &str,
    reach: Reach,
) -> anyhow::Result<Found> {
    let (t, (backend, _), found) = recorded(ctx, team, member).await?;
    let name = container_name(&t.name, member);
    let Some(c) = found
        .iter()
        .find(|c| !is_replacement(&name, &c.name, &c.labels))
    else {
        bail!(
            "member `{member}` of team `{}` has no container; run ateam apply",
            t.name
        );
    };
    let id = c.id.clone();
    let seen = backend.inspect(&id).await?;
    let state = seen.summary.state;
    let ctl = member_ctl_dir(&ctx.host.state_dir, &t.name, member);
    if state.is_live() && !is_released(&ctl, &id, seen.pid) {
        bail!(
            "member `{member}` of team `{}` is held at its gate: this start of its container was not checked by ateam (restarted behind its back?); run ateam apply, which checks and releases it",
            t.name
        );
    }
    match reach {
        Reach::Output => {}
        Reach::Process if state == ContainerState::Running => {}
        // Finished: apply leaves it so (its restart policy); only a restart runs it again.
        Reach::Process if matches!(state, ContainerState::Exited { .. }) => bail!(
            "member `{member}` of team `{}` is not running ({}): ateam restart {member} runs it again in a new container (an agent member takes its next task with ateam task {member} \"...\"); ateam logs {member} shows its output",
            t.name,
            describe(state)
        ),
        Reach::Process => bail!(
            "member `{member}` of team `{}` is not running ({}); run ateam apply to start it, or see its output with ateam logs {member}",
            t.name,
            describe(state)
        ),
    }
    Ok(Found {
        backend,
        id,
        team: t.name,
        runtime: seen.effective.runtime,
    })
}

/// `ateam restart`: a new container for the member (`app::restart`), its progress shown.
pub async fn restart(
    global: &Global,
    team: Option<&str>,
    member: &str,
    no_wait: bool,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    // A main session's name, or none: the library says which.
    let team = team_of(&ctx.applied(team)?, team, member)?;
    let secret = |n: &str| std::env::var(n).ok();
    let display = super::progress::Display::new();
    ateam::app::restart::restart(&ctx, &team, member, no_wait, &secret, &display, waiting)
        .await
        .with_context(|| format!("{team}/{member} not restarted"))?;
    outln!("{team}/{member} restarted");
    Ok(Exit::Ok)
}

/// The team of `member` among the applied teams (`team` narrows them): the one whose
/// manifests name it, else the only (or named) team, for the library to say what it is.
fn team_of(
    applied: &ateam::model::Model,
    team: Option<&str>,
    member: &str,
) -> anyhow::Result<String> {
    match member_of(applied, member) {
        Ok((t, _)) => Ok(t.name.clone()),
        Err(_) if team.is_some() || applied.teams.len() == 1 => Ok(applied.teams[0].name.clone()),
        Err(e) => Err(e),
    }
}

/// `ateam suspend`: the member down with its state kept (`app::suspend`).
pub async fn suspend(global: &Global, a: crate::cli::SuspendArgs) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let team = team_of(
        &ctx.applied_with_requests(a.team.as_deref())?,
        a.team.as_deref(),
        &a.member,
    )?;
    let opts = ateam::app::suspend::SuspendOptions {
        no_wait: a.no_wait,
        discard_home: a.discard_home,
    };
    let secret = |n: &str| std::env::var(n).ok();
    let display = super::progress::Display::new();
    let member = a.member.as_str();
    let done =
        ateam::app::suspend::suspend(&ctx, (&team, member), opts, &secret, &display, waiting)
            .await
            .with_context(|| format!("{team}/{member} not suspended"))?;
    let s = &done.suspension;
    let home = match (&s.home, done.was_running) {
        (Some(h), _) => format!("its HOME kept in {}", h.display()),
        (None, true) => "its HOME let go (--discard-home)".to_string(),
        (None, false) => "it was not running (no HOME to keep)".to_string(),
    };
    let freed = s
        .freed_bytes
        .map(|b| format!(", {} freed", ateam::core::quantity::human_bytes(b)))
        .unwrap_or_default();
    outln!("{team}/{member} suspended: {home}{freed}; `ateam resume {member}` brings it back");
    Ok(Exit::Ok)
}

/// `ateam resume`: a suspended member brought back through its gate (`app::suspend`).
pub async fn resume(global: &Global, a: crate::cli::ResumeArgs) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let team = team_of(
        &ctx.applied_with_requests(a.team.as_deref())?,
        a.team.as_deref(),
        &a.member,
    )?;
    let secret = |n: &str| std::env::var(n).ok();
    let display = super::progress::Display::new();
    let member = a.member.as_str();
    let s =
        ateam::app::suspend::resume(&ctx, (&team, member), a.no_wait, &secret, &display, waiting)
            .await
            .with_context(|| format!("{team}/{member} not resumed"))?;
    outln!("{team}/{member} resumed (suspended since {})", s.since);
    Ok(Exit::Ok)
}

/// `ateam fork`: a second member from a running one (`app::fork`), or `--drop` of one.
pub async fn fork(global: &Global, a: crate::cli::ForkArgs) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let display = super::progress::Display::new();
    if let Some(name) = &a.drop {
        let team = team_of(
            &ctx.applied_with_requests(a.team.as_deref())?,
            a.team.as_deref(),
            name,
        )?;
        ateam::app::fork::drop_fork(&ctx, &team, name, a.no_wait, &display, waiting)
            .await
            .with_context(|| format!("{team}/{name} not dropped"))?;
        outln!("{team}/{name} dropped (its copies and transcript are kept)");
        return Ok(Exit::Ok);
    }
    let (Some(from), Some(new)) = (a.member.as_deref(), a.new.as_deref()) else {
        anyhow::bail!("ateam fork MEMBER --as NEW, or ateam fork --drop NAME");
    };
    let max_bytes = ateam::core::quantity::parse_memory(&a.max_copy)
        .map_err(|e| anyhow::anyhow!("--max-copy: {e}"))?;
    let team = team_of(
        &ctx.applied_with_requests(a.team.as_deref())?,
        a.team.as_deref(),
        from,
    )?;
    let opts = ateam::app::fork::ForkOptions {
        no_wait: a.no_wait,
        max_bytes,
    };
    let secret = |n: &str| std::env::var(n).ok();
    let f = ateam::app::fork::fork(&ctx, (&team, from), new, opts, &secret, &display, waiting)
        .await
        .with_context(|| format!("{team}/{from} not forked"))?;
    let home = if f.home { ", its HOME" } else { "" };
    outln!(
        "{team}/{new} forked from {from}: copies of {} write grant(s), its transcript{home}; running",
        f.copies.len()
    );
    Ok(Exit::Ok)
}

pub async fn logs(
    global: &Global,
    team: Option<&str>,
    member: &str,
    opts: LogOptions,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let Found { backend, id, .. } = find(&ctx, team, member, Reach::Output).await?;
    backend
        .logs(&id, opts, &mut |chunk| {
            // Written as it comes, so that -f shows lines as the member prints them.
            super::output::write_stdout_bytes(chunk)
        })
        .await?;
    Ok(Exit::Ok)
}

/// The member's team, its engine, and the containers of it ateam made (in its record), never
/// one that merely carries the labels.
async fn recorded(
    ctx: &ateam::app::App,
    team: Option<&str>,
    member: &str,
) -> anyhow::Result<(
    ateam::model::Team,
    (
        std::sync::Arc<dyn ateam::backend::Backend>,
        ateam::backend::EngineInfo,
    ),
    Vec<ateam::backend::Summary>,
)> {
    let applied = ctx.applied_with_requests(team)?;
    let (t, _) = member_of(&applied, member)?;
    let t = t.clone();
    let (backend, info) = ctx.connect(std::slice::from_ref(&t)).await?;
    let filter = BTreeMap::from([
        (labels::STORE.to_string(), store_id(&ctx.host.state_dir)),
        (labels::TEAM.to_string(), t.name.clone()),
        (labels::MEMBER.to_string(), member.to_string()),
    ]);
    let run = team_run_dir(&ctx.host.state_dir, &t.name);
    let record = Record::load(&member_record_path(&run, member));
    let found = backend
        .list(&filter)
        .await?
        .into_iter()
        .filter(|c| record.ids.contains(&c.id))
        .collect();
    Ok((t, (backend, info), found))
}

/// Stops every live container of `member` (for a rollback of its workspace); whether one was.
pub async fn stop_member(
    global: &Global,
    team: Option<&str>,
    member: &str,
) -> anyhow::Result<bool> {
    let ctx = app(global);
    let (t, engine, found) = recorded(&ctx, team, member).await?;
    let stopped = found.iter().any(|c| c.state.is_live());
    if let Some(f) = ctx.stop_member(&t, member, engine, &found).await.pop() {
        return Err(f.error.into());
    }
    Ok(stopped)
}

/// A container's state in words, for a refusal.
fn describe(state: ContainerState) -> String {
    match state {
        ContainerState::Created => "created, never started".into(),
        ContainerState::Running => "running".into(),
        ContainerState::Paused => "paused".into(),
        ContainerState::Restarting => "restarting".into(),
        ContainerState::Exited { code } => format!("exited {code}"),
        ContainerState::Removing => "being removed".into(),
        ContainerState::Dead => "dead".into(),
    }
}

/// `exec -i`/`-t`.
#[derive(Debug, Clone, Copy)]
pub struct ExecMode {
    pub interactive: bool,
    pub tty: bool,
}

pub async fn exec(
    global: &Global,
    team: Option<&str>,
    member: &str,
    how: ExecMode,
    command: &[String],
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let found = find(&ctx, team, member, Reach::Process).await?;
    // Podman 4's conmon asks the runtime for an exec's terminal with `--tty`, which runsc does
    // not take: said here, not as runsc's usage text.
    if how.tty
        && matches!(found.backend.kind(), EngineKind::Podman { .. })
        && ContainerRuntime::Gvisor.reported_as(&found.runtime)
    {
        bail!(
            "member `{member}` runs under gVisor on Podman, which cannot give an exec a terminal (Podman 4 asks runsc for one with a flag runsc does not take): run `ateam exec` without -t, or use Docker"
        );
    }
    let (backend, id) = (found.backend, found.id);
    // A member created by an older ateam may hold a gate without `--exec`: give it this one's
    // (its command already runs; the file is only read by the next exec or start).
    let ctl = member_ctl_dir(&ctx.host.state_dir, &found.team, member);
    ateam::runtime::gate::install(&ctl, &gate_dir(&ctx.host.state_dir), ctx.owner)
        .with_context(|| format!("cannot refresh the gate in {}", ctl.display()))?;
    // The gate ends the command when this client goes (killed, its terminal closed): the
    // engines would leave it running in the member. Held until the command is done.
    let lease = ateam::runtime::gate::ExecLease::start(&ctl, ctx.owner)
        .with_context(|| format!("cannot write into {}", ctl.display()))?;
    // Through the gate, which checks inside the container, as the command starts, that this
    // start was released: a restart after the look above cannot slip a command into it. It
    // also gives the command the member's secrets, as the member's own command has them.
    let [gate, exec, dashes] = GATE_EXEC;
    let command: Vec<String> = [gate, exec, "--alive", &lease.in_container(), dashes]
        .iter()
        .map(|s| s.to_string())
        .chain(command.iter().cloned())
        .collect();
    let command = &command[..];
    if how.interactive || how.tty {
        // A terminal and stdin through the engine's own CLI, which does that well; the
        // container is the one ateam found in its record, never a look-alike. No `--user`,
        // no `--privileged`: the command runs as the member, with the member's limits.
        let (cli, flag) = match backend.kind() {
            EngineKind::Docker => ("docker", "-H"),
            EngineKind::Podman { .. } => ("podman", "--url"),
        };
        let mut c = std::process::Command::new(cli);
        c.arg(flag).arg(backend.endpoint()).arg("exec");
        if how.interactive {
            c.arg("-i");
        }
        if how.tty {
            c.arg("-t");
        }
        let status =
            c.arg(&id).args(command).status().with_context(|| {
                format!("cannot run `{cli}` (exec -i/-t needs the engine's CLI)")
            })?;
        return Ok(exit_code(status));
    }
    let out = backend.exec(&id, command).await?;
    out!("{}", out.stdout);
    eprint!("{}", out.stderr);
    Ok(Exit::Command(u8::try_from(out.code).unwrap_or(1)))
}

/// The engine CLI's or tmux's own exit code, passed on.
fn exit_code(status: std::process::ExitStatus) -> Exit {
    Exit::Command(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    )
}

/// A main session's terminal (tmux attach on its socket), else a member's console (its output
/// as it comes). The way out is said first, on stderr.
pub async fn attach(global: &Global, team: Option<&str>, name: &str) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let applied = ctx.applied_with_requests(team)?;
    let sessions: Vec<_> = applied
        .teams
        .iter()
        .filter(|t| t.sessions.iter().any(|s| s.name == name))
        .collect();
    let t = match sessions[..] {
        [one] => one,
        [] if is_interactive(&applied, team, name) => {
            return attach_terminal(global, team, name).await;
        }
        [] => {
            eprintln!(
                "ateam: the console of member `{name}`: its output as it comes (read-only: members have no stdin); Ctrl-C leaves"
            );
            let opts = LogOptions {
                follow: true,
                ..LogOptions::tail(100)
            };
            return logs(global, team, name, opts).await;
        }
        _ => bail!("several teams have a main session `{name}`; say which with --team"),
    };
    let socket = session_socket_path(&ctx.host.state_dir, &t.name, name);
    if std::os::unix::net::UnixStream::connect(&socket).is_err() {
        bail!(
            "main session `{name}` of team `{}` is not running; run ateam apply",
            t.name
        );
    }
    // Inside tmux already, the outer tmux takes the first Ctrl-b.
    let detach = if std::env::var_os("TMUX").is_some() {
        "Ctrl-b Ctrl-b d"
    } else {
        "Ctrl-b d"
    };
    eprintln!(
        "ateam: attaching to main session `{name}` of team `{}`; detach with {detach} (it keeps running)",
        t.name
    );
    // Its own tmux server (own socket): nesting it in the person's tmux is intended.
    let status = std::process::Command::new("tmux")
        .env_remove("TMUX")
        .arg("-S")
        .arg(&socket)
        .args([
            "attach-session",
            "-t",
            name,
            ";",
            "display-message",
            "-d",
            "5000",
        ])
        // Said again in tmux's status line: attaching takes the screen.
        .arg(format!(
            "ateam: detach with {detach} (the session keeps running)"
        ))
        .status()
        .context("cannot run tmux; install tmux")?;
    Ok(exit_code(status))
}

/// The key that leaves an agent's terminal (the engines' `--detach-keys`), and how it reads.
const DETACH_KEYS: (&str, &str) = ("ctrl-]", "Ctrl-]");

/// Whether `name` is a member that runs its agent's terminal UI.
fn is_interactive(applied: &ateam::model::Model, team: Option<&str>, name: &str) -> bool {
    applied
        .teams
        .iter()
        .filter(|t| team.is_none_or(|x| x == t.name))
        .flat_map(|t| &t.members)
        .any(|m| m.name == name && m.agent.as_ref().is_some_and(|a| a.interactive))
}

/// Joins an interactive agent's terminal, which the engine keeps, through the engine's own
/// CLI (it does raw mode, resizes and detaching well): the person types and reads; the
/// detach key leaves it running. Only a start ateam released is joined.
async fn attach_terminal(global: &Global, team: Option<&str>, name: &str) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let found = find(&ctx, team, name, Reach::Process).await?;
    let (cli, flag) = match found.backend.kind() {
        EngineKind::Docker => ("docker", "-H"),
        EngineKind::Podman { .. } => ("podman", "--url"),
    };
    let (keys, said) = DETACH_KEYS;
    eprintln!(
        "ateam: attaching to the terminal of `{name}` (team `{}`); detach with {said} (it keeps running)",
        found.team
    );
    let mut child = std::process::Command::new(cli)
        .arg(flag)
        .arg(found.backend.endpoint())
        .args(["attach", "--detach-keys", keys])
        .arg(&found.id)
        .spawn()
        .with_context(|| format!("cannot run `{cli}` (attach needs the engine's CLI)"))?;
    let nudges = tokio::spawn(redraw(found.backend.clone(), found.id.clone()));
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .context("waiting for the engine's CLI")?
        .context("waiting for the engine's CLI")?;
    nudges.abort();
    // Detaching is how a person leaves: the engines say so with a non-zero code.
    if !status.success()
        && let Ok(s) = found.backend.inspect(&found.id).await
        && s.summary.state == ContainerState::Running
    {
        eprintln!(
            "ateam: detached from `{name}`; it keeps running (ateam attach {name} to come back)"
        );
        return Ok(Exit::Ok);
    }
    Ok(exit_code(status))
}

/// Makes the agent draw its screen again once the engine's CLI is attached (a UI draws only
/// what changed, so a person joining sees nothing until then): its terminal one column
/// narrower, then as wide as the person's again. Again a little later, and later still: an
/// agent still starting when the person joined (a loaded machine) can be resized in the
/// middle of its first frames and leave half a screen until the next one.
async fn redraw(backend: std::sync::Arc<dyn ateam::backend::Backend>, id: String) {
    let Ok(size) = rustix::termios::tcgetwinsize(std::io::stdin()) else {
        return;
    };
    if size.ws_row == 0 || size.ws_col < 2 {
        return;
    }
    for wait in REDRAW_AFTER {
        tokio::time::sleep(wait).await;
        let _ = backend
            .resize_terminal(&id, size.ws_row, size.ws_col - 1)
            .await;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let _ = backend.resize_terminal(&id, size.ws_row, size.ws_col).await;
    }
}

/// When `redraw` nudges the agent's terminal, each after the one before.
const REDRAW_AFTER: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(400),
    std::time::Duration::from_secs(2),
    std::time::Duration::from_secs(5),
];

/// The output of every member (of `team`, else of every applied team) whose labels match,
/// one member after another, each line prefixed with `[member]` (`[team/member]` across
/// teams), as `kubectl logs -l --prefix`.
pub async fn logs_selected(
    global: &Global,
    team: Option<&str>,
    selector: &Selector,
    opts: LogOptions,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let applied = ctx.applied_with_requests(team)?;
    let across = applied.teams.len() > 1;
    let mut any = false;
    for t in &applied.teams {
        for m in t.members.iter().filter(|m| selector.matches(&m.labels)) {
            any = true;
            let prefix = if across {
                format!("[{}/{}]", t.name, m.name)
            } else {
                format!("[{}]", m.name)
            };
            let Found { backend, id, .. } =
                match find(&ctx, Some(&t.name), &m.name, Reach::Output).await {
                    Ok(found) => found,
                    Err(e) => {
                        eprintln!("{prefix} {e:#}");
                        continue;
                    }
                };
            let mut bytes = Vec::new();
            backend
                .logs(&id, opts, &mut |chunk| bytes.extend_from_slice(chunk))
                .await?;
            for line in String::from_utf8_lossy(&bytes).lines() {
                outln!("{prefix} {line}");
            }
        }
    }
    if !any {
        bail!("no applied member has labels that match");
    }
    Ok(Exit::Ok)
}
