use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{Files, Global};
use ateam::files::Owner;
use ateam::host::Host;
use ateam::manifest::{self, ManifestError, Problem, Source};
use ateam::model::{Desired, Team};
use ateam::store::Store;

/// Manifests as read, with the problems of reading them (reported with the rules' problems).
pub struct Manifests {
    sources: Vec<Source>,
    unreadable: Vec<Problem>,
}

/// Reads the manifests `files` names (stdin once, for `-`).
pub fn read(files: &Files) -> Result<Manifests, ManifestError> {
    let (sources, unreadable) = manifest::read_sources(&files.files, &mut std::io::stdin());
    if sources.is_empty() && unreadable.is_empty() {
        return Err(ManifestError::Empty(files.files.clone()));
    }
    Ok(Manifests {
        sources,
        unreadable,
    })
}

impl Manifests {
    /// Every rule, judged on this host and against the teams `applied` before.
    pub fn validate(&self, host: &Host, applied: &[Team]) -> Result<Desired, ManifestError> {
        let mut problems = self.unreadable.clone();
        match manifest::validate(&self.sources, host, applied) {
            Ok(d) if problems.is_empty() => Ok(d),
            Ok(_) => Err(ManifestError::Invalid(problems)),
            Err(mut more) => {
                problems.append(&mut more);
                Err(ManifestError::Invalid(problems))
            }
        }
    }
}

pub fn run(global: &Global, files: &Files, show: bool) -> anyhow::Result<ExitCode> {
    let host = Host::detect(global.state_dir.clone());
    // As apply would judge them: against the teams in the store (reading it changes nothing).
    let store = Store::new(
        host.state_dir.clone(),
        Owner {
            uid: host.uid,
            gid: host.gid,
        },
    );
    let applied = store.teams().context("reading the applied state")?;
    match read(files).and_then(|m| m.validate(&host, &applied)) {
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
