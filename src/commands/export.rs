//! `export --team NAME`: the team as it now stands, as manifests.

use std::path::Path;

use anyhow::Context;

use crate::cli::Global;
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
