//! `changes`, `collect`, `snapshots`, `rollback` and `reset`: the person's side of a writer's
//! workspace (docs/workspaces.md). Everything a member wrote is shown escaped.

use anyhow::{Context, bail};

use crate::cli::Global;
use ateam::core::untrusted::shown;
use ateam::files::Owner;
use ateam::workspace::{self, Place};

use super::common::app;
use super::exit::Exit;
use super::member::member_of;

/// The workspace of `member`, as the applied manifests have it.
fn place(global: &Global, team: Option<&str>, member: &str) -> anyhow::Result<(Place, Owner)> {
    let ctx = app(global);
    let applied = ctx.applied_with_requests(team)?;
    let (t, m) = member_of(&applied, member)?;
    let Some(place) = ctx.workspace_place(t, m) else {
        bail!(
            "member `{member}` of team `{}` has no workspace (Member spec.workspace)",
            t.name
        );
    };
    let ws = &place.ws;
    if !place.exists() {
        bail!("member `{member}` has no workspace yet: ateam makes it at the member's first start");
    }
    // The person's repository is written as whoever owns it.
    let meta = std::fs::metadata(&ws.git_dir).with_context(|| ws.git_dir.display().to_string())?;
    let person = Owner {
        uid: std::os::unix::fs::MetadataExt::uid(&meta),
        gid: std::os::unix::fs::MetadataExt::gid(&meta),
    };
    Ok((place, person))
}

/// `ateam changes MEMBER`: commits ahead of the base, uncommitted files, with `--diff` the diff.
pub async fn changes(
    global: &Global,
    team: Option<&str>,
    member: &str,
    diff: bool,
    json: bool,
) -> anyhow::Result<Exit> {
    let (p, _) = place(global, team, member)?;
    let c = workspace::changes(&p, diff).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&c)?);
        return Ok(Exit::Ok);
    }
    println!(
        "{member}: branch {} at {}, base {}; {} commit(s) ahead, {} behind, {} uncollected",
        shown(&c.branch),
        c.tip
            .as_deref()
            .map(|t| &t[..12.min(t.len())])
            .unwrap_or("(deleted)"),
        &c.base[..12.min(c.base.len())],
        c.ahead,
        c.behind,
        c.uncollected
    );
    for l in &c.commits {
        println!("  {}", shown(l));
    }
    if c.uncommitted.is_empty() {
        println!("nothing uncommitted");
    } else {
        println!("uncommitted:");
        for l in &c.uncommitted {
            println!("  {}", shown(l));
        }
    }
    if let Some(d) = &c.diff {
        for line in d.lines() {
            println!("{}", shown(line));
        }
    }
    Ok(Exit::Ok)
}

/// `ateam collect MEMBER [--into BRANCH]`.
pub async fn collect(
    global: &Global,
    team: Option<&str>,
    member: &str,
    into: Option<&str>,
) -> anyhow::Result<Exit> {
    let (p, person) = place(global, team, member)?;
    let got = workspace::collect(&p, person, into).await?;
    println!(
        "collected {member}'s branch {} ({}) into {} as {}{}",
        shown(&p.ws.branch),
        &got.commit[..12.min(got.commit.len())],
        p.ws.repo.display(),
        got.ref_name,
        got.into
            .as_deref()
            .map(|b| format!(" and branch {b}"))
            .unwrap_or_default()
    );
    Ok(Exit::Ok)
}

/// `ateam snapshots MEMBER`.
pub async fn snapshots(global: &Global, team: Option<&str>, member: &str) -> anyhow::Result<Exit> {
    let (p, _) = place(global, team, member)?;
    for s in workspace::snapshots(&p).await? {
        let at = ateam::core::container::rfc3339_epoch(s.at as i64).unwrap_or_default();
        println!("{}  {at}  {}", s.id, shown(&s.reason));
    }
    Ok(Exit::Ok)
}

/// `ateam rollback MEMBER [--to ID]` (`reset`: to the base). The member's container is
/// stopped first; `apply` or the controller starts it again, after a snapshot.
pub async fn rollback(
    global: &Global,
    team: Option<&str>,
    member: &str,
    to: Option<&str>,
    reset: bool,
) -> anyhow::Result<Exit> {
    let (p, _) = place(global, team, member)?;
    let stopped = super::member::stop_member(global, team, member).await?;
    if reset {
        let saved = workspace::reset(&p).await?;
        println!(
            "{member}: back at its base; what was there is snapshot {} (`ateam rollback {member} --to {}` undoes this)",
            saved.id, saved.id
        );
    } else {
        let (saved, restored) = workspace::rollback(&p, to).await?;
        println!(
            "{member}: restored snapshot {} ({}); what was there is snapshot {} (`ateam rollback {member} --to {}` undoes this)",
            restored.id,
            shown(&restored.reason),
            saved.id,
            saved.id
        );
    }
    if stopped {
        println!("{member} was stopped for it: `ateam apply` (or the controller) starts it again");
    }
    Ok(Exit::Ok)
}
