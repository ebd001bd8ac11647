//! `ateam delete`: remove teams named by manifests, `--team` or a selector (`app::delete`):
//! their containers, then their private state; transcripts stay unless `--purge`, and the
//! person is told where they are, since they are the work and ateam cannot make them again.

use anyhow::bail;

use crate::cli::{Global, OptionalFiles};
use ateam::app::Manifests;
use ateam::app::delete::{DeleteReport, delete, team_to_delete};
use ateam::core::selector::Selector;

use super::common::{app, waiting};
use super::exit::Exit;
use super::progress::Display;

/// Which applied teams `delete` names, without manifests.
pub struct Which<'a> {
    pub team: Option<&'a str>,
    /// Every applied team whose Team labels match.
    pub selector: Option<&'a Selector>,
}

/// Removes the teams' containers (all that this store made for them), then their private
/// state. Transcripts stay unless `purge`; the user is told where they are.
pub async fn run(
    global: &Global,
    files: &OptionalFiles,
    which: Which<'_>,
    purge: bool,
    no_wait: bool,
) -> anyhow::Result<Exit> {
    let app = app(global);
    let desired = match (files.files.is_empty(), which.team, which.selector) {
        // The manifests only say what to remove: not judged against the store (a team is
        // deleted even where admitting it again would be refused).
        (false, _, _) => Manifests::read(&files.files)?.validate(&app.host, &[])?,
        (true, Some(t), _) => team_to_delete(&app, t)?,
        (true, None, Some(sel)) => {
            let mut all = app.applied(None)?;
            all.teams.retain(|t| sel.matches(&t.labels));
            if all.teams.is_empty() {
                bail!("no applied team has labels that match");
            }
            all
        }
        (true, None, None) => bail!("say what to delete: -f MANIFESTS, --team NAME or -l LABELS"),
    };
    match delete(&app, &desired, purge, no_wait, &Display::new(), waiting).await? {
        DeleteReport::Failed(failures) => {
            for f in &failures {
                eprintln!("error: {}", f.error);
            }
            // Containers remain that the manifests no longer want here.
            Ok(Exit::Differs)
        }
        DeleteReport::Deleted(teams) => {
            for t in teams {
                if t.purged {
                    outln!("team {}: containers removed, transcripts deleted", t.team);
                } else {
                    outln!(
                        "team {}: containers removed; transcripts kept in {}",
                        t.team,
                        t.transcripts.display()
                    );
                }
                for (member, path, left) in &t.workspaces {
                    let left = match left {
                        Some(0) => "all collected".to_string(),
                        Some(n) => format!(
                            "{n} commit(s) not collected: apply the team again to collect them"
                        ),
                        None => "its commits could not be counted".to_string(),
                    };
                    outln!(
                        "  workspace of {member} kept in {} ({left}); --purge removes it",
                        path.display()
                    );
                }
            }
            let state_dir = &app.host.state_dir;
            if ateam::store::controller::running(state_dir)
                && let Some(c) = ateam::store::controller::read(state_dir)
            {
                outln!(
                    "a controller runs for this state folder (pid {}): it leaves the team(s) deleted until you apply them again",
                    c.pid
                );
            }
            Ok(Exit::Ok)
        }
    }
}
