use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{Files, Global};
use ateam::host::Host;
use ateam::manifest::{self, ManifestError};
use ateam::model::Desired;

/// Reads and validates manifests, for every command that takes `-f`.
pub fn load(global: &Global, files: &Files) -> Result<Desired, ManifestError> {
    load_with(&Host::detect(global.state_dir.clone()), files)
}

pub fn load_with(host: &Host, files: &Files) -> Result<Desired, ManifestError> {
    let (sources, mut problems) = manifest::read_sources(&files.files, &mut std::io::stdin());
    if sources.is_empty() && problems.is_empty() {
        return Err(ManifestError::Empty(files.files.clone()));
    }
    match manifest::validate(&sources, host) {
        Ok(d) if problems.is_empty() => Ok(d),
        Ok(_) => Err(ManifestError::Invalid(problems)),
        Err(mut more) => {
            problems.append(&mut more);
            Err(ManifestError::Invalid(problems))
        }
    }
}

pub fn run(global: &Global, files: &Files, show: bool) -> anyhow::Result<ExitCode> {
    match load(global, files) {
        Ok(desired) => {
            if show {
                print!(
                    "{}",
                    serde_yaml::to_string(&desired).context("rendering the model")?
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
