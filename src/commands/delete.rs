use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::cli::{Files, Global, OptionalFiles};
use ateam::core::layout::{session_socket_path, team_run_dir};
use ateam::execute::Executor;
use ateam::model::Desired;
use ateam::observe::observe;
use ateam::plan::{PlanOptions, plan};

use super::common::Ctx;
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
    let ctx = Ctx::new(global);
    let desired = match (files.files.is_empty(), team) {
        // The manifests only say what to remove: not judged against the store (a team is
        // deleted even where admitting it again would be refused).
        (false, _) => super::validate::read(&Files {
            files: files.files.clone(),
        })?
        .validate(&ctx.host, &[])?,
        (true, Some(t)) => ctx.applied(Some(t))?,
        (true, None) => bail!("say what to delete: -f MANIFESTS or --team NAME"),
    };
    let _lock = ctx
        .store
        .lock(no_wait, |holder| {
            eprintln!("waiting for another ateam command to finish ({holder})...")
        })
        .context("locking the state folder")?;
    let (backend, info) = ctx.connect(&desired.teams).await?;
    // Nothing wanted: every container of these teams is an orphan, and prune removes them.
    let mut empty = Desired {
        teams: desired.teams.clone(),
    };
    for t in &mut empty.teams {
        t.members.clear();
        t.sessions.clear();
    }
    let ds = ctx.desired_state(&empty);
    let observed = observe(backend.as_ref(), &info, &ds).await?;
    let p = plan(&ds, &observed, PlanOptions { prune: true });
    let rt = ctx.runtime(backend, info, ds.store.clone());
    let display = Display::new();
    let secret = |_: &str| None;
    let failures = Executor {
        rt: &rt,
        concurrency: ateam::execute::default_concurrency(),
        secret: &secret,
        progress: &display,
    }
    .run(&p, &[])
    .await;
    for f in &failures {
        eprintln!("error: {}", f.error);
    }
    if !failures.is_empty() {
        return Ok(ExitCode::from(super::EXIT_ERROR));
    }
    for t in &desired.teams {
        let members = t.session_dir.join("members");
        // Main sessions ateam started for the team end with it (their transcripts stay).
        for sess in &t.sessions {
            let socket = session_socket_path(&ctx.host.state_dir, &t.name, &sess.name);
            if socket.exists() {
                let _ = std::process::Command::new("tmux")
                    .arg("-S")
                    .arg(&socket)
                    .arg("kill-server")
                    .output();
            }
        }
        if purge {
            // Every transcript folder of the team: its members', and those kept from members
            // removed earlier (which the empty plan reports as retained).
            let mut dirs: std::collections::BTreeSet<std::path::PathBuf> =
                t.members.iter().map(|m| m.transcript_dir.clone()).collect();
            for f in &p.findings {
                if let ateam::plan::Finding::RetainedTranscript { path, team, .. } = f
                    && *team == t.name
                {
                    dirs.insert(path.clone());
                }
            }
            for d in dirs.iter().filter(|d| d.exists()) {
                std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
            }
            println!("team {}: containers removed, transcripts deleted", t.name);
        } else {
            println!(
                "team {}: containers removed; transcripts kept in {}",
                t.name,
                members.display()
            );
        }
        let run = team_run_dir(&ctx.host.state_dir, &t.name);
        if run.exists() {
            std::fs::remove_dir_all(&run).with_context(|| format!("removing {}", run.display()))?;
        }
        ctx.store.forget_team(&t.name)?;
    }
    Ok(ExitCode::SUCCESS)
}
