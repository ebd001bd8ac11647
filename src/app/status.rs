//! `status` as a library call: one look at the machine, the facts beside it
//! (`observe::status_facts`: restarts, last exits, sessions, the controller's record, egress
//! decisions, what each member uses now) and the pure `report::team_status` over them.
//! `ateam status`, `status -w`, `ateam top` and the controller's metrics all read the same
//! document.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::core::selector::Selector;
use crate::model::Model;
use crate::observe::{EarlyFacts, controller_status, status_facts};
use crate::plan::PlanOptions;
use crate::report::{RowKind, StatusDocument, TeamStatus, WorkspaceStatus, team_status};

use super::{App, AppError, EarlyList};

/// The status of the teams in `desired` (already narrowed to those asked for), their rows
/// narrowed to `selector`'s.
pub async fn status(
    app: &App,
    desired: &Model,
    selector: Option<&Selector>,
) -> Result<StatusDocument, AppError> {
    status_from(app, desired, selector, None).await
}

/// `status`, with the engine's list asked ahead (`App::begin_look`) while the caller read
/// the teams: `ateam status` at 200 members waits 35 ms on Docker's list and little else.
pub async fn status_from(
    app: &App,
    desired: &Model,
    selector: Option<&Selector>,
    early_list: Option<EarlyList>,
) -> Result<StatusDocument, AppError> {
    let now = SystemTime::now();
    if desired.teams.is_empty() {
        let controller = controller_status(&app.host.state_dir);
        return Ok(StatusDocument::new(vec![], controller, now));
    }
    // What needs no engine is read while the look waits for it.
    let early = {
        let (host, desired) = (app.host.clone(), desired.clone());
        let walks = app.transcripts.clone();
        tokio::task::spawn_blocking(move || EarlyFacts::read(&host, &desired, now, &walks))
    };
    let look = app
        .look_from(desired, PlanOptions::default(), early_list)
        .await?;
    // Read again below, what the early read missed (a task that panicked reads nothing).
    let early = early.await.unwrap_or_default();
    // With the helpers members asked for: they are rows too.
    let model = look.model;
    let (observed, walks) = (&look.observed, &app.transcripts);
    let facts = status_facts(&app.host, &model, observed, now, early, walks);
    let engine = look.info.kind.to_string();
    let mut teams: Vec<_> = model
        .teams
        .iter()
        .map(|t| team_status(t, &engine, &look.observed, &look.plan, &facts))
        .collect();
    fill_workspaces(app, &model, &mut teams).await;
    if let Some(sel) = selector {
        select(&mut teams, &model, sel);
    }
    Ok(StatusDocument::new(teams, facts.controller, now))
}

/// How long a writer's figures are kept: `status -w`, `top` and the metrics read status every
/// second or so, and each reading scans the writer's work tree.
const WORKSPACE_TTL: Duration = Duration::from_secs(5);

type Cached = HashMap<PathBuf, (Instant, WorkspaceStatus)>;

/// Each writer's row gets its workspace's figures (`workspace::changes`), at most
/// `WORKSPACE_TTL` old.
async fn fill_workspaces(app: &App, model: &Model, teams: &mut [TeamStatus]) {
    static CACHE: OnceLock<Mutex<Cached>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    for (t, status) in model.teams.iter().zip(teams.iter_mut()) {
        for m in &t.members {
            let Some(place) = app.workspace_place(t, m) else {
                continue;
            };
            let Some(row) = status
                .members
                .iter_mut()
                .find(|r| r.name == m.name && r.kind == RowKind::Member)
            else {
                continue;
            };
            let key = place.ws.path.clone();
            let fresh = cache
                .lock()
                .ok()
                .and_then(|c| c.get(&key).cloned())
                .filter(|(at, _)| at.elapsed() < WORKSPACE_TTL);
            let figures = match fresh {
                Some((_, w)) => w,
                None => {
                    let w = workspace_status(&place).await;
                    if let Ok(mut c) = cache.lock() {
                        c.insert(key, (Instant::now(), w.clone()));
                    }
                    w
                }
            };
            row.workspace = Some(figures);
        }
    }
}

async fn workspace_status(place: &crate::workspace::Place) -> WorkspaceStatus {
    let mut w = WorkspaceStatus {
        path: place.ws.path.clone(),
        branch: place.ws.branch.clone(),
        ahead: 0,
        behind: 0,
        uncommitted: 0,
        uncollected: 0,
        error: None,
    };
    if !place.exists() {
        w.error = Some("not made yet (at the member's first start)".into());
        return w;
    }
    match crate::workspace::changes(place, false).await {
        Ok(c) => {
            w.ahead = c.ahead;
            w.behind = c.behind;
            w.uncommitted = c.uncommitted.len() as u64;
            w.uncollected = c.uncollected;
        }
        Err(e) => w.error = Some(e.to_string()),
    }
    w
}

/// Keeps the rows of main sessions and members whose labels match (rows nothing describes,
/// an orphan or a kept transcript, have no labels), and the teams left with any; each team's
/// verdict is then its selected rows'.
fn select(teams: &mut Vec<TeamStatus>, desired: &Model, sel: &Selector) {
    for t in teams.iter_mut() {
        let Some(model) = desired.teams.iter().find(|m| m.name == t.team) else {
            continue;
        };
        let chosen = |kind: RowKind, name: &str| match kind {
            RowKind::MainSession => model
                .sessions
                .iter()
                .any(|s| s.name == name && sel.matches(&s.labels)),
            RowKind::Member => model
                .members
                .iter()
                .any(|m| m.name == name && sel.matches(&m.labels)),
            RowKind::Transcript => false,
        };
        t.members.retain(|r| chosen(r.kind, &r.name));
        t.drifted = t.members.iter().any(|r| r.drifted);
    }
    teams.retain(|t| !t.members.is_empty());
}
