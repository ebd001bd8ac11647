//! `ateam task`: an agent's next task, in its own session, in the same container, through
//! the same gate.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use ateam::app::App;
use ateam::core::container::{ContainerState, container_name, is_replacement};
use ateam::events::{Event, EventKind};
use ateam::plan::spec::DesiredMember;

use super::common::app;
use super::exit::Exit;
use super::member::member_of;
use crate::cli::Global;

/// How often a wait looks at the container again.
const POLL: Duration = Duration::from_millis(500);

/// Gives `member`'s agent its next task: the agent's own resume of its newest session
/// (`model::Agent::next_task`), run by the same container at its next start, which ateam
/// makes now, with the same checks as any start. A running agent finishes its current task
/// first: this waits for it. With `wait`, also waits for the task to end and passes on its
/// exit code.
pub async fn task(
    global: &Global,
    team: Option<&str>,
    member: &str,
    text: &str,
    wait: bool,
) -> anyhow::Result<Exit> {
    let ctx = Arc::new(app(global));
    let applied = ctx.applied(team)?;
    let (t, m) = member_of(&applied, member)?;
    let Some(agent) = &m.agent else {
        bail!(
            "member `{member}` has no `agent:`; ateam task gives an agent (claude or codex) its next task"
        );
    };
    if agent.interactive {
        bail!(
            "member `{member}` runs its agent's terminal UI: give it its next task there (ateam attach {member})"
        );
    }
    if text.trim().is_empty() {
        bail!("the task is empty: say what the agent is to do next");
    }
    let next = agent
        .next_task(text, &m.transcript_dir, &m.cwd)
        .with_context(|| format!("`{}` is not an agent ateam knows", agent.name))?;
    let team_name = t.name.clone();
    let desired = ctx.applied(Some(&team_name))?;
    let mut said_waiting = false;
    let id = loop {
        let c = ctx.clone();
        let lock = tokio::task::spawn_blocking(move || c.store.lock(false, |_| {}))
            .await
            .context("the store's lock")??;
        let look = ctx
            .look(&desired, ateam::plan::PlanOptions::default())
            .await?;
        let name = container_name(&team_name, member);
        let Some(c) = look.observed.containers.iter().find(|c| {
            c.name == name
                && !is_replacement(&name, &c.name, &c.labels)
                && look.observed.recorded.contains(&c.id)
        }) else {
            bail!("member `{member}` of team `{team_name}` has no container; run ateam apply");
        };
        if c.state.is_live() || c.state == ContainerState::Removing {
            drop(lock);
            if !said_waiting {
                eprintln!(
                    "ateam: `{member}` is still on its current task; waiting for it to end (Ctrl-C gives up, nothing changed)"
                );
                said_waiting = true;
            }
            tokio::time::sleep(POLL).await;
            continue;
        }
        let Some(dm) = look.desired.members.iter().find(|d| d.member == member) else {
            bail!("member `{member}` is not in team `{team_name}` as applied");
        };
        start_task(&ctx, &look, dm, &c.id, &next.command).await?;
        drop(lock);
        break c.id.clone();
    };
    ateam::events::record(
        &ctx.host.state_dir,
        ctx.owner,
        &Event::new(&team_name, member, EventKind::TaskGiven, &first_line(text)).container(&id),
    );
    let short = &id[..id.len().min(12)];
    eprintln!(
        "ateam: `{member}` took its next task in its own session, in container {short}; follow it with ateam transcript -f {member}"
    );
    if !wait {
        return Ok(Exit::Ok);
    }
    let code = wait_for_exit(&ctx, &team_name, member).await?;
    Ok(Exit::Command(u8::try_from(code).unwrap_or(1)))
}

/// Writes the task for container `id`, then starts it again through its gate.
async fn start_task(
    ctx: &App,
    look: &ateam::app::Look,
    dm: &DesiredMember,
    id: &str,
    command: &[String],
) -> anyhow::Result<()> {
    let rt = ctx.runtime(look);
    let owner = rt
        .member_owner(dm)
        .with_context(|| format!("member `{}`'s user", dm.member))?;
    ateam::runtime::gate::set_task(&dm.ctl_dir, id, command, owner)
        .with_context(|| format!("cannot write into {}", dm.ctl_dir.display()))?;
    rt.restart(dm, id)
        .await
        .with_context(|| format!("cannot start `{}` again", dm.member))
}

/// The exit code of the member's task, once its container stopped.
async fn wait_for_exit(ctx: &Arc<App>, team: &str, member: &str) -> anyhow::Result<i64> {
    let desired = ctx.applied(Some(team))?;
    let name = container_name(team, member);
    loop {
        let look = ctx
            .look(&desired, ateam::plan::PlanOptions::default())
            .await?;
        let state = look
            .observed
            .containers
            .iter()
            .find(|c| c.name == name && look.observed.recorded.contains(&c.id))
            .map(|c| c.state);
        match state {
            Some(ContainerState::Exited { code }) => return Ok(code),
            None | Some(ContainerState::Dead) => bail!("`{member}`'s container is gone"),
            Some(
                ContainerState::Created
                | ContainerState::Running
                | ContainerState::Paused
                | ContainerState::Restarting
                | ContainerState::Removing,
            ) => tokio::time::sleep(POLL).await,
        }
    }
}

/// A task's first line, shortened, for the event's reason.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(120).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    out
}
