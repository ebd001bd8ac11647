//! `ateam apply -f FILES`: make the machine match the manifests (`app::apply`), showing each
//! step and waiting for members to come up unless `--no-wait`. The library decides; this only
//! renders the outcome and picks its exit code (`--dry-run` is `diff`, so the two never differ).

use std::collections::BTreeSet;

use crate::cli::{Files, Global, Output};
use ateam::app::Manifests;
use ateam::app::apply::{ApplyOptions, Outcome, apply};
use ateam::report::finding_text;

use super::common::{app, waiting};
use super::exit::Exit;
use super::progress::Display;

pub struct Opts {
    pub prune: bool,
    pub dry_run: bool,
    pub concurrency: Option<usize>,
    pub no_wait: bool,
    /// A learning run of this length after the apply.
    pub learn: Option<std::time::Duration>,
}

/// 0: the machine matches the manifests; 1: it does not (a member is not running, or what
/// apply leaves alone is drift: an orphan without --prune, a stranger, a conflict); 4: refused
/// before any change; other errors as `exit::classify`.
pub async fn run(global: &Global, files: &Files, o: Opts) -> anyhow::Result<Exit> {
    if o.dry_run {
        return super::diff::run(global, files, o.prune, Output::Text).await;
    }
    learn_bounded(o.learn)?;
    let app = app(global);
    let manifests = Manifests::read(&files.files)?;
    let secret = |name: &str| std::env::var(name).ok();
    let display = Display::new();
    let opts = ApplyOptions {
        prune: o.prune,
        concurrency: o.concurrency,
        no_wait: o.no_wait,
        only: None,
    };
    // Judged once, by apply: its warnings are said before any change.
    let warn = |desired: &ateam::model::Model| host_service_warnings(&app, desired);
    let report = apply(&app, &manifests, opts, &secret, &display, waiting, warn).await?;
    // What apply leaves alone, in the same words as diff.
    for line in report.left_alone.iter().filter_map(finding_text) {
        eprintln!("{line}");
    }
    let members = report.members;
    let drift_left = report.left_alone.iter().filter(|f| f.is_drift()).count();
    let exit = match &report.outcome {
        Outcome::NoChanges => {
            outln!(
                "no changes: {members} member(s) as the manifests say ({})",
                report.engine
            );
            Exit::verdict(drift_left > 0)
        }
        Outcome::Refused(refused) => {
            for f in refused {
                eprintln!("error: {}", f.error);
            }
            let members: BTreeSet<(&str, &str)> = refused
                .iter()
                .map(|f| (f.team.as_str(), f.member.as_str()))
                .collect();
            eprintln!("{} member(s) refused; nothing was changed", members.len());
            Exit::Refused
        }
        Outcome::Applied {
            failures,
            not_running,
            finished,
        } => {
            for f in failures {
                eprintln!("error: {}", f.error);
            }
            for (team, member) in finished {
                outln!("{team}/{member} finished (exit 0)");
            }
            for n in not_running {
                eprintln!("error: {}/{} {}", n.team, n.member, n.why);
            }
            // Members, not errors: one member may fail more than one action.
            let failed = failures
                .iter()
                .map(|f| (f.team.as_str(), f.member.as_str()))
                .chain(
                    not_running
                        .iter()
                        .map(|n| (n.team.as_str(), n.member.as_str())),
                )
                .collect::<BTreeSet<_>>()
                .len();
            if failed == 0 {
                // Members done as their policy allows are not running: counted apart.
                let done = match finished.len() {
                    0 => String::new(),
                    n => format!(", {n} finished"),
                };
                let running = members.saturating_sub(finished.len());
                outln!(
                    "applied: {running} member(s) running{done} ({})",
                    report.engine
                );
            } else {
                eprintln!("{failed} of {members} member(s) not running");
            }
            Exit::verdict(failed > 0 || drift_left > 0)
        }
    };
    if drift_left > 0 && !matches!(report.outcome, Outcome::Refused(_)) {
        eprintln!("{drift_left} left as they are differ from the manifests (see above)");
    }
    if let Some(d) = o.learn
        && !matches!(report.outcome, Outcome::Refused(_))
    {
        start_learning(&app, &manifests, d)?;
    }
    Ok(exit)
}

/// A learning run lasts at most `app::approvals::MAX_LEARN`: refused before any change.
fn learn_bounded(learn: Option<std::time::Duration>) -> anyhow::Result<()> {
    match learn {
        Some(d) if d > ateam::app::approvals::MAX_LEARN => anyhow::bail!(
            "--learn {}: a learning run lasts at most {}",
            humantime::format_duration(d),
            humantime::format_duration(ateam::app::approvals::MAX_LEARN)
        ),
        Some(_) | None => Ok(()),
    }
}

/// `--learn`: a learning run of `d` for the members of `manifests` (`app::approvals::learn`).
fn start_learning(
    app: &ateam::app::App,
    manifests: &Manifests,
    d: std::time::Duration,
) -> anyhow::Result<()> {
    let desired = app.judge(manifests)?;
    let until = std::time::SystemTime::now() + d;
    let secs = until
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let n = ateam::app::approvals::learn(app, &desired, secs)?;
    outln!(
        "learning until {}: {n} member(s) get past their allow lists for what you could approve; then `ateam approvals --proposal`",
        humantime::format_rfc3339_seconds(until)
    );
    Ok(())
}

/// Warns of a host service a grant names that another uid's listener holds now (the proxy
/// would refuse it).
fn host_service_warnings(app: &ateam::app::App, desired: &ateam::model::Model) {
    for line in ateam::servers::egress::listeners::held_by_others(desired, &app.host) {
        eprintln!("{line}");
    }
}
