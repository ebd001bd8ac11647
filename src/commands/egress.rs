//! `logs --egress` (what a member's proxy allowed and refused) and the hidden
//! `egress-proxy` that apply starts for each member with an allowlist.

use anyhow::{Context, bail};

use crate::cli::Global;
use ateam::servers::egress::{self, Paths, proxy};

use super::common::app;
use super::exit::Exit;

pub fn logs(
    global: &Global,
    team: Option<&str>,
    member: &str,
    tail: usize,
    since: Option<i64>,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    // A deleted team's log stays until `delete --purge`.
    let applied = ctx.applied_or_deleted(team)?;
    let (t, m) = super::member::member_of(&applied, member)?;
    if !matches!(m.access.network, ateam::model::Network::Allow(_)) {
        bail!("member `{member}` has no egress proxy: its grant's network is not an allow list");
    }
    let paths = Paths::new(&ctx.host.state_dir, &t.name, member);
    let mut events = egress::log::read(&paths.log);
    // `--since` before `--tail`, as for a member's output: the last N of the newer ones.
    if let Some(since) = since {
        events.retain(|e| e.ts >= since as f64);
    }
    for e in &events[events.len().saturating_sub(tail)..] {
        outln!("{}", e.line());
    }
    Ok(Exit::Ok)
}

/// `rotate-ca --team T`: a new CA for the team, and everything it signed issued again.
pub fn rotate_ca(global: &Global, team: &str) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let applied = ctx.applied_with_requests(Some(team))?;
    let Some(t) = applied.teams.iter().find(|t| t.name == team) else {
        bail!("no applied team `{team}`");
    };
    // apply issues leaves under the same lock: none is signed by the CA this replaces.
    let _lock = ctx
        .store
        .lock(false, |who| eprintln!("waiting for {who}"))?;
    let ca = egress::tls::TeamCa::rotate(&ctx.host.state_dir, team, ctx.owner)
        .context("making the team's new CA")?;
    let mut n = 0;
    for m in &t.members {
        let paths = Paths::new(&ctx.host.state_dir, team, &m.name);
        let ctl = ateam::core::layout::member_ctl_dir(&ctx.host.state_dir, team, &m.name);
        if egress::reissue(&paths, &ctl, &ca, ctx.owner)
            .with_context(|| format!("member `{}`", m.name))?
        {
            n += 1;
        }
    }
    outln!(
        "team {team}: new egress CA {} ; {n} member(s) with intercepted hosts given new certificates",
        &ca.fingerprint()[..16]
    );
    Ok(Exit::Ok)
}

pub fn proxy(cfg: proxy::Config, user: Option<&str>, detach: bool) -> anyhow::Result<Exit> {
    if detach {
        egress::launch_detached(&cfg, user).context("starting the egress proxy")?;
        return Ok(Exit::Ok);
    }
    ateam::detached::limit_self(proxy::MAX_DATA);
    proxy::run(cfg, user).context("egress proxy")?;
    Ok(Exit::Ok)
}
