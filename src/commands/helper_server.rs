//! The hidden `helper-server` that apply starts for each member of a team with
//! `helperRequests: true` (the server is `ateam::servers::helper::server`).

use anyhow::Context;

use crate::cli::Global;
use ateam::servers::helper::server;

use super::common::app;
use super::exit::Exit;

pub fn run(
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
