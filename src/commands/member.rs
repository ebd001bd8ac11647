//! `logs` and `exec`: looking inside one member, through the engine.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::bail;

use crate::cli::Global;
use ateam::core::container::{container_name, is_replacement, labels};
use ateam::core::layout::{member_record_path, store_id, team_run_dir};
use ateam::store::Record;

use super::common::app;
use super::exit::Exit;

async fn find(
    ctx: &ateam::app::App,
    team: Option<&str>,
    member: &str,
) -> anyhow::Result<(std::sync::Arc<dyn ateam::backend::Backend>, String)> {
    let applied = ctx.applied(team)?;
    let teams: Vec<_> = applied
        .teams
        .iter()
        .filter(|t| t.members.iter().any(|m| m.name == member))
        .collect();
    let t = match teams[..] {
        [one] => one.clone(),
        [] => bail!("no applied team has a member `{member}`"),
        _ => bail!("several teams have a member `{member}`; say which with --team"),
    };
    let (backend, _) = ctx.connect(std::slice::from_ref(&t)).await?;
    let filter = BTreeMap::from([
        (labels::STORE.to_string(), store_id(&ctx.host.state_dir)),
        (labels::TEAM.to_string(), t.name.clone()),
        (labels::MEMBER.to_string(), member.to_string()),
    ]);
    let found = backend.list(&filter).await?;
    // Only a container ateam made (in its record), never one that merely carries the labels.
    let run = team_run_dir(&ctx.host.state_dir, &t.name);
    let record = Record::load(&member_record_path(&run, member));
    let name = container_name(&t.name, member);
    let Some(c) = found
        .iter()
        .filter(|c| record.ids.contains(&c.id))
        .find(|c| !is_replacement(&name, &c.name, &c.labels))
    else {
        bail!(
            "member `{member}` of team `{}` has no container; run ateam apply",
            t.name
        );
    };
    let id = c.id.clone();
    Ok((backend, id))
}

pub async fn logs(
    global: &Global,
    team: Option<&str>,
    member: &str,
    tail: usize,
    follow: bool,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let (backend, id) = find(&ctx, team, member).await?;
    let mut out = std::io::stdout();
    backend
        .logs(&id, tail, follow, &mut |chunk| {
            // Written as it comes, so that -f shows lines as the member prints them.
            let _ = out.write_all(chunk).and_then(|()| out.flush());
        })
        .await?;
    Ok(Exit::Ok)
}

pub async fn exec(
    global: &Global,
    team: Option<&str>,
    member: &str,
    command: &[String],
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let (backend, id) = find(&ctx, team, member).await?;
    let out = backend.exec(&id, command).await?;
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    Ok(Exit::Command(u8::try_from(out.code).unwrap_or(1)))
}
