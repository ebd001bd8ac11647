use anyhow::Context;

use crate::cli::{Files, Global};
use ateam::app::Manifests;

use super::exit::Exit;

/// 0 valid; invalid manifests are an error that `exit::classify` maps to 3.
pub fn run(global: &Global, files: &Files, show: bool) -> anyhow::Result<Exit> {
    let app = super::common::app(global);
    // As apply would judge them: against the teams in the store (reading it changes nothing).
    let applied = app.store.teams().context("reading the applied state")?;
    let desired = Manifests::read(&files.files).and_then(|m| m.validate(&app.host, &applied))?;
    if show {
        out!(
            "{}",
            serde_saphyr::to_string(&desired).context("rendering the model")?
        );
    } else {
        let count =
            |f: fn(&ateam::model::Team) -> usize| desired.teams.iter().map(f).sum::<usize>();
        outln!(
            "valid: {} team(s), {} main session(s), {} member(s), {} grant(s)",
            desired.teams.len(),
            count(|t| t.sessions.len()),
            count(|t| t.members.len()),
            count(|t| t.grants.len()),
        );
    }
    Ok(Exit::Ok)
}
