//! Restart: a member gets a new container, the way a changed manifest gives it one
//! (`Drift::Asked`): the replacement is judged whole (secrets, image, folders, agent) and
//! verified at its gate before the old container goes, so a restart that cannot bring the
//! member back removes nothing. `ateam restart` and `top`'s `r` both come here.

use super::apply::{ApplyOptions, Outcome, carry_out, prepare};
use super::{App, AppError};
use crate::events::{Event, EventKind};
use crate::execute::Progress;
use crate::plan::PlanOptions;

/// Why a restart did not happen, or did not bring the member up.
#[derive(Debug, thiserror::Error)]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum RestartError {
    /// The team or engine could not be read, or the store's lock taken.
    #[error(transparent)]
    App(#[from] AppError),
    /// The applied team has no member of that name (a main session is not restarted here).
    #[error("team `{team}` has no member `{member}`{hint}")]
    NoSuchMember {
        team: String,
        /// The name asked for.
        member: String,
        /// What the name is, when it is something else.
        hint: &'static str,
    },
    /// Refused before anything changed: the old container still runs as it did.
    #[error("refused before anything changed (its container is as it was): {0}")]
    Refused(String),
    /// The new container failed at its gate or did not stay up.
    #[error("the restart failed: {0}")]
    NotUp(String),
}

/// Gives `member` of the applied team `team` a new container through the gate, under the
/// store's lock (waited for unless `no_wait`; `waiting` is told who holds it). A failure is
/// an event of the team; the new container's own events say the rest.
pub async fn restart(
    app: &App,
    team: &str,
    member: &str,
    no_wait: bool,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
) -> Result<(), RestartError> {
    let desired = app.applied(Some(team))?;
    let t = desired.teams.first().ok_or_else(|| AppError::NotApplied {
        team: team.to_string(),
        state_dir: app.host.state_dir.clone(),
    })?;
    if let Some(hint) = not_a_member(t, member) {
        return Err(RestartError::NoSuchMember {
            team: team.to_string(),
            member: member.to_string(),
            hint,
        });
    }
    let _lock = app.store.lock(no_wait, waiting).map_err(AppError::from)?;
    let opts = ApplyOptions {
        only: Some(member.to_string()),
        ..ApplyOptions::default()
    };
    let plan = PlanOptions {
        restart: Some((team.to_string(), member.to_string())),
        ..opts.plan_options()
    };
    let result = match prepare(app, &desired, plan, secret).await {
        Ok(look) => carry_out(app, &desired, look, &opts, secret, progress)
            .await
            .map_err(RestartError::from)
            .and_then(|r| match verdict(&r.outcome, team, member) {
                Verdict::Up => Ok(()),
                Verdict::Refused(why) => Err(RestartError::Refused(why)),
                Verdict::NotUp(why) => Err(RestartError::NotUp(why)),
            }),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = &result {
        let said = format!("restart: {e}");
        crate::events::record(
            &app.host.state_dir,
            app.owner,
            &Event::new(team, member, EventKind::Refused, &said),
        );
    }
    result
}

/// Why `member` is not a member of `t` that a person's command can act on, in words to
/// follow "no member `x`" (empty when it is no name at all); none when it is one.
pub(super) fn not_a_member(t: &crate::model::Team, member: &str) -> Option<&'static str> {
    if t.members.iter().any(|m| m.name == member) {
        None
    } else if t.sessions.iter().any(|s| s.name == member) {
        Some(": it is a main session (its terminal is the person's; `ateam attach` reaches it)")
    } else {
        Some("")
    }
}

/// What a converge for one member came to.
pub(super) enum Verdict {
    /// It is as asked (or another apply, a controller, made it so between the look and the
    /// lock).
    Up,
    /// Refused before anything changed.
    Refused(String),
    /// Carried out, but the member is not up: why.
    NotUp(String),
}

/// What the converge came to for `member` of `team`.
pub(super) fn verdict(outcome: &Outcome, team: &str, member: &str) -> Verdict {
    let mine = |t: &str, m: &str| t == team && m == member;
    match outcome {
        Outcome::NoChanges => Verdict::Up,
        Outcome::Refused(f) => Verdict::Refused(
            f.iter()
                .map(|x| x.error.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Outcome::Applied { failures, .. }
            if let Some(x) = failures.iter().find(|x| mine(&x.team, &x.member)) =>
        {
            Verdict::NotUp(x.error.to_string())
        }
        Outcome::Applied { not_running, .. }
            if let Some(n) = not_running.iter().find(|n| mine(&n.team, &n.member)) =>
        {
            Verdict::NotUp(n.why.clone())
        }
        Outcome::Applied { .. } => Verdict::Up,
    }
}
