//! `changes`, `collect`, `snapshots`, `rollback` and `reset`: the person's side of a writer's
//! workspace (docs/workspaces.md). Everything a member wrote is shown escaped.

use anyhow::{Context, bail};

use crate::cli::Global;
use ateam::core::untrusted::shown;
use ateam::files::Owner;
use ateam::workspace::copy::CopyPlace;
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
        // JSON escapes only C0 controls: bidi overrides, line separators and C1 controls a
        // member wrote are escaped here as in the text.
        let mut c = c;
        let esc = |v: &mut String| *v = shown(v).into_owned();
        esc(&mut c.branch);
        c.commits.iter_mut().for_each(esc);
        c.uncommitted.iter_mut().for_each(esc);
        if let Some(d) = c.diff.as_mut() {
            *d = d.lines().map(|l| shown(l).into_owned() + "\n").collect();
        }
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

/// The member's workspace (if it has one and it is made) and its copy snapshots (if it takes
/// them); at least one, else an error that says what to add.
fn kinds(
    global: &Global,
    team: Option<&str>,
    member: &str,
) -> anyhow::Result<(Option<Place>, Option<CopyPlace>)> {
    let ctx = app(global);
    let applied = ctx.applied_with_requests(team)?;
    let (t, m) = member_of(&applied, member)?;
    let ws = ctx.workspace_place(t, m).filter(Place::exists);
    let copies = ctx.copy_place(t, m);
    if ws.is_none() && copies.is_none() {
        bail!(
            "member `{member}` of team `{}` has no snapshots: give it a workspace or snapshotWrites (docs/workspaces.md)",
            t.name
        );
    }
    Ok((ws, copies))
}

/// `ateam snapshots MEMBER`: its workspace's snapshots, then the copies of its write grants.
pub async fn snapshots(global: &Global, team: Option<&str>, member: &str) -> anyhow::Result<Exit> {
    let (ws, copies) = kinds(global, team, member)?;
    let show = |kind: &str, s: &workspace::Snapshot| {
        let at = ateam::core::container::rfc3339_epoch(s.at as i64).unwrap_or_default();
        println!("{}  {at}  {kind}  {}", s.id, shown(&s.reason));
    };
    if let Some(p) = &ws {
        for s in workspace::snapshots(p).await? {
            show("workspace", &s);
        }
    }
    if let Some(c) = &copies {
        for s in workspace::copy::list(c) {
            show("copy", &s);
        }
    }
    Ok(Exit::Ok)
}

/// `ateam rollback MEMBER [--to ID]` (`reset`: the workspace to its base). The member's
/// container is stopped first; `apply` or the controller starts it again, after a snapshot.
/// Without `--to`, the workspace and the copied folders each go back to their newest.
pub async fn rollback(
    global: &Global,
    team: Option<&str>,
    member: &str,
    to: Option<&str>,
    reset: bool,
) -> anyhow::Result<Exit> {
    let (ws, copies) = kinds(global, team, member)?;
    // `--to` names one kind's snapshot: a copy's id is all digits, a workspace's hex.
    let copy_id = to.is_some_and(|id| {
        copies
            .as_ref()
            .is_some_and(|c| workspace::copy::list(c).iter().any(|s| s.id == id))
    });
    if to.is_some() && !copy_id && ws.is_none() {
        bail!(
            "member `{member}` has no snapshot `{}`",
            shown(to.unwrap_or_default())
        );
    }
    let stopped = super::member::stop_member(global, team, member).await?;
    let undo = |saved: &workspace::Snapshot| {
        format!(
            "what was there is snapshot {0} (`ateam rollback {member} --to {0}` undoes this)",
            saved.id
        )
    };
    if let Some(p) = ws.as_ref().filter(|_| !copy_id) {
        if reset {
            let saved = workspace::reset(p).await?;
            println!(
                "{member}: its workspace is back at its base; {}",
                undo(&saved)
            );
        } else {
            let (saved, restored) = workspace::rollback(p, to).await?;
            println!(
                "{member}: its workspace is as snapshot {} ({}) had it; {}",
                restored.id,
                shown(&restored.reason),
                undo(&saved)
            );
        }
    }
    if let Some(c) = copies.filter(|_| !reset && (copy_id || to.is_none())) {
        let to = to.map(str::to_string);
        let (saved, restored) =
            tokio::task::spawn_blocking(move || workspace::copy::restore(&c, to.as_deref()))
                .await??;
        println!(
            "{member}: its write grants are as copy {} ({}) had them; {}",
            restored.id,
            shown(&restored.reason),
            undo(&saved)
        );
    }
    if stopped {
        println!("{member} was stopped for it: `ateam apply` (or the controller) starts it again");
    }
    Ok(Exit::Ok)
}
