//! `export --team NAME`: the team as it now stands, as manifests; and the hidden
//! `helper-server` that apply starts for each member of a team with `helperRequests: true`.

use std::path::Path;

use anyhow::Context;

use crate::cli::Global;
use ateam::app::helper_server as server;
use ateam::manifest::export::{team_objects, to_yaml};

use super::common::app;
use super::exit::Exit;

pub fn run(global: &Global, team: &str, output: Option<&Path>) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let merged = ctx.applied_with_requests(Some(team))?;
    let mut text = format!(
        "# team `{team}` as it stood when exported with `ateam export` (helpers members asked\n\
         # for are written as Members with an AccessGrant each, annotated with who asked)\n"
    );
    for t in &merged.teams {
        text.push_str(&to_yaml(&team_objects(t)).context("writing the manifests")?);
    }
    match output {
        Some(path) => {
            // Atomic writes need the folder: a bare file name is in the current one.
            let path = std::env::current_dir()
                .context("the current folder")?
                .join(path);
            ateam::files::write_atomic(&path, text.as_bytes(), 0o600, ctx.owner)
                .with_context(|| format!("writing {}", path.display()))?
        }
        None => out!("{text}"),
    }
    Ok(Exit::Ok)
}

pub fn helper_server(
    global: &Global,
    team: String,
    member: String,
    socket_owner: &str,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let owner: ateam::model::UserId = socket_owner
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))
        .context("--socket-owner")?;
    ateam::detached::limit_self(ateam::requests::servers::MAX_DATA);
    server::run(server::Config {
        state_dir: ctx.host.state_dir.clone(),
        team,
        member,
        socket_owner: ateam::files::Owner {
            uid: owner.uid,
            gid: owner.gid,
        },
    })
    .context("helper server")?;
    Ok(Exit::Ok)
}
