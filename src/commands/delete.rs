use std::process::ExitCode;

use anyhow::bail;

use crate::cli::{Global, OptionalFiles};
use ateam::app::Manifests;
use ateam::app::delete::{DeleteReport, delete, team_to_delete};

use super::common::{app, waiting};
use super::progress::Display;

/// Removes the teams' containers (all that this store made for them), then their private
/// state. Transcripts stay unless `purge`; the user is told where they are.
pub async fn run(
    global: &Global,
    files: &OptionalFiles,
    team: Option<&str>,
    purge: bool,
    no_wait: bool,
) -> anyhow::Result<ExitCode> {
    let app = app(global);
    let desired = match (files.files.is_empty(), team) {
        // The manifests only say what to remove: not judged against the store (a team is
        // deleted even where admitting it again would be refused).
        (false, _) => Manifests::read(&files.files)?.validate(&app.host, &[])?,
        (true, Some(t)) => team_to_delete(&app, t)?,
        (true, None) => bail!("say what to delete: -f MANIFESTS or --team NAME"),
    };
    match delete(&app, &desired, purge, no_wait, &Display::new(), waiting).await? {
        DeleteReport::Failed(failures) => {
            for f in &failures {
                eprintln!("error: {}", f.error);
            }
            Ok(ExitCode::from(super::EXIT_ERROR))
        }
        DeleteReport::Deleted(teams) => {
            for t in teams {
                if t.purged {
                    println!("team {}: containers removed, transcripts deleted", t.team);
                } else {
                    println!(
                        "team {}: containers removed; transcripts kept in {}",
                        t.team,
                        t.transcripts.display()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
