//! `logs` and `exec`: looking inside one member, through the engine.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;

use crate::cli::Global;
use ateam::plan::spec::{labels, store_id};

use super::common::Ctx;

async fn find(
    ctx: &Ctx,
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
    let Some(c) = found
        .iter()
        .find(|c| !ateam::plan::spec::is_replacement(&c.name, &c.labels))
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
) -> anyhow::Result<ExitCode> {
    let ctx = Ctx::new(global);
    let (backend, id) = find(&ctx, team, member).await?;
    let mut out = std::io::stdout();
    backend
        .logs(&id, tail, follow, &mut |chunk| {
            // Written as it comes, so that -f shows lines as the member prints them.
            let _ = out.write_all(chunk).and_then(|()| out.flush());
        })
        .await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn exec(
    global: &Global,
    team: Option<&str>,
    member: &str,
    command: &[String],
) -> anyhow::Result<ExitCode> {
    let ctx = Ctx::new(global);
    let (backend, id) = find(&ctx, team, member).await?;
    let out = backend.exec(&id, command).await?;
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    Ok(ExitCode::from(u8::try_from(out.code).unwrap_or(1)))
}
