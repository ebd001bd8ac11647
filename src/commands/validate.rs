use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{Files, Global};
use ateam::app::Manifests;

pub fn run(global: &Global, files: &Files, show: bool) -> anyhow::Result<ExitCode> {
    let app = super::common::app(global);
    // As apply would judge them: against the teams in the store (reading it changes nothing).
    let applied = app.store.teams().context("reading the applied state")?;
    match Manifests::read(&files.files).and_then(|m| m.validate(&app.host, &applied)) {
        Ok(desired) => {
            if show {
                print!(
                    "{}",
                    serde_saphyr::to_string(&desired).context("rendering the model")?
                );
            } else {
                let count = |f: fn(&ateam::model::Team) -> usize| {
                    desired.teams.iter().map(f).sum::<usize>()
                };
                println!(
                    "valid: {} team(s), {} main session(s), {} member(s), {} grant(s)",
                    desired.teams.len(),
                    count(|t| t.sessions.len()),
                    count(|t| t.members.len()),
                    count(|t| t.grants.len()),
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::from(super::EXIT_ERROR))
        }
    }
}
