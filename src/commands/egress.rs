//! `logs --egress` (what a member's proxy allowed and refused) and the hidden
//! `egress-proxy` that apply starts for each member with an allowlist.

use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::cli::Global;
use ateam::egress::{self, Paths, proxy};

use super::common::app;

pub fn logs(
    global: &Global,
    team: Option<&str>,
    member: &str,
    tail: usize,
) -> anyhow::Result<ExitCode> {
    let ctx = app(global);
    let applied = ctx.applied(team)?;
    let teams: Vec<_> = applied
        .teams
        .iter()
        .filter(|t| t.members.iter().any(|m| m.name == member))
        .collect();
    let t = match teams[..] {
        [one] => one,
        [] => bail!("no applied team has a member `{member}`"),
        _ => bail!("several teams have a member `{member}`; say which with --team"),
    };
    let m = t
        .members
        .iter()
        .find(|m| m.name == member)
        .expect("filtered above");
    if !matches!(m.access.network, ateam::model::Network::Allow(_)) {
        bail!("member `{member}` has no egress proxy: its grant's network is not an allow list");
    }
    let paths = Paths::new(&ctx.host.state_dir, &t.name, member);
    let events = egress::log::read(&paths.log);
    for e in &events[events.len().saturating_sub(tail)..] {
        println!("{}", e.line());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn proxy(cfg: proxy::Config, user: Option<&str>, detach: bool) -> anyhow::Result<ExitCode> {
    if detach {
        egress::launch_detached(&cfg, user).context("starting the egress proxy")?;
        return Ok(ExitCode::SUCCESS);
    }
    proxy::run(cfg, user).context("egress proxy")?;
    Ok(ExitCode::SUCCESS)
}
