//! A request judged and, accepted, granted: judged without the store's lock, judged again
//! under it, recorded, and its member brought up by apply's own `converge` (which is why the
//! server is of `app`'s layer), the record undone when it could not start.

use serde_json::json;

use super::{Answer, Config, refused};
use crate::app::apply::{ApplyOptions, ApplyReport, Outcome, converge};
use crate::app::{App, AppError};
use crate::core::container::rfc3339;
use crate::execute::{Failure, Quiet};
use crate::model::{Member, Model, Team};
use crate::requests::{self, Refusal, Request};

/// Judges `req` once without the store's lock, so that a refusal (the common case for a
/// hostile member, in a loop) never holds up an apply (`apply --no-wait` fails while the
/// lock is held); then, accepted, judges it again under the lock (another apply may have
/// changed the team meanwhile), records it and brings its member up.
pub(super) fn grant(cfg: &Config, req: &Request) -> Answer {
    let app = App::new(Some(cfg.state_dir.clone()), None);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return (500, json!({"refused": e.to_string()})),
    };
    if let Err(answer) = judged(&app, &rt, cfg, req, true) {
        return answer;
    }
    let _lock = match app.store.lock(false, |_| {}) {
        Ok(l) => l,
        Err(e) => return (503, json!({"refused": format!("the state folder: {e}")})),
    };
    // The engine was asked a moment ago: what an apply may have changed since is in the
    // store (a member of the name it made is in its team now).
    let (team, member) = match judged(&app, &rt, cfg, req, false) {
        Ok(x) => x,
        Err(answer) => return answer,
    };
    if let Err(e) = requests::save(&cfg.state_dir, &cfg.team, &member, app.owner) {
        return (500, json!({"refused": e.to_string()}));
    }
    tracing::info!(team = %cfg.team, by = %cfg.member, member = %member.name, "helper requested");
    let report = rt.block_on(bring_up(&app, cfg, team, &member.name));
    answer(cfg, &member, report)
}

/// Brings the new member `name` of `team` up as apply would, and nothing else: a request
/// is no occasion to change the others, and never a main session (the person's, on the
/// host).
async fn bring_up(
    app: &App,
    cfg: &Config,
    team: Team,
    name: &str,
) -> Result<ApplyReport, AppError> {
    let desired = Model { teams: vec![team] };
    // No value of apply's environment is here: an injected secret's value comes from the
    // requester's own proxy, which injects it for the same host.
    let held = crate::servers::egress::held_secrets(&crate::servers::egress::Paths::new(
        &cfg.state_dir,
        &cfg.team,
        &cfg.member,
    ));
    let lookup = |n: &str| held.get(n).cloned();
    // Only the new member is touched: a request is no occasion to change the others, and
    // never a main session (the person's, on the host).
    let only = ApplyOptions {
        only: Some(name.to_string()),
        ..ApplyOptions::default()
    };
    converge(app, &desired, only, &lookup, &Quiet).await
}

/// The answer once converge is done: 201 with the member's state, or, when it could not
/// start, its record forgotten (as if never asked for) and why.
fn answer(cfg: &Config, member: &Member, report: Result<ApplyReport, AppError>) -> Answer {
    let name = &member.name;
    let undo = |why: String, status: u16| {
        let _ = requests::forget(&cfg.state_dir, &cfg.team, name);
        (
            status,
            json!({"refused": why, "rule": "could-not-start", "member": name}),
        )
    };
    let state: String = match report {
        Err(e) => return undo(format!("{e}"), 502),
        Ok(r) => match r.outcome {
            Outcome::Refused(f) => return undo(said(&f), 422),
            Outcome::Applied { failures, .. } if failures.iter().any(|f| f.member == *name) => {
                return undo(said(&failures), 502);
            }
            Outcome::Applied {
                not_running,
                finished,
                ..
            } => {
                if let Some(n) = not_running.iter().find(|n| n.member == *name) {
                    format!("not running: {}", n.why)
                } else if finished.iter().any(|(_, m)| m == name) {
                    "finished".into()
                } else {
                    "running".into()
                }
            }
            Outcome::NoChanges => "running".into(),
        },
    };
    (
        201,
        json!({"created": name, "team": cfg.team, "requestedBy": cfg.member, "image": member.image, "state": state}),
    )
}

/// What the failures said, in one line.
fn said(failures: &[Failure]) -> String {
    failures
        .iter()
        .map(|f| f.error.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The team as stored and the member `req` would make, or the answer refusing it: the
/// rules of manifests (`requests::judge`), then the names the store remembers
/// (`requests::remembered`), then, with `engine`, the engine: a container of the helper's name
/// that ateam did not make for it (an orphan a person kept, a stranger) would be replaced by
/// its converge.
fn judged(
    app: &App,
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    req: &Request,
    engine: bool,
) -> Result<(Team, Member), Answer> {
    let state =
        |e: &dyn std::fmt::Display| (503, json!({"refused": format!("the state folder: {e}")}));
    let stored = app.store.teams().map_err(|e| state(&e))?;
    let Some(team) = stored.iter().find(|t| t.name == cfg.team).cloned() else {
        return Err((
            403,
            json!({"refused": format!("team `{}` is no longer applied", cfg.team)}),
        ));
    };
    let merged: Vec<_> = requests::merge(&Model { teams: stored }, &cfg.state_dir)
        .0
        .teams;
    let Some(this) = merged.iter().find(|t| t.name == cfg.team) else {
        return Err((500, json!({"refused": "the team went away"})));
    };
    let at = rfc3339(std::time::SystemTime::now());
    let member = requests::judge(req, &cfg.member, this, &merged, &app.host, &at)
        .and_then(|m| requests::remembered(&cfg.state_dir, this, &m.name).map(|()| m))
        .map_err(|r| (r.status, asked(cfg, this, req, &r)))?;
    if engine {
        rt.block_on(on_engine(app, &team, &member.name))
            .map_err(|r| (r.status, refused(&r)))?;
    }
    Ok((team, member))
}

/// The refusal, as the member reads it; when the request was wider than its requester by
/// hosts the person could grant it, each is an ask of the requester's grant
/// (`approvals::asks`), and the answer names them with their approval ids.
fn asked(cfg: &Config, team: &Team, req: &Request, r: &Refusal) -> serde_json::Value {
    let mut body = refused(r);
    let by_folder = r
        .field
        .as_deref()
        .is_some_and(|f| f.starts_with("read") || f.starts_with("write"));
    // A name no manifest may give is refused for it once the host is allowed: no ask.
    if r.rule != "narrower-than-requester"
        || by_folder
        || !crate::manifest::validate::is_name(&req.name)
    {
        return body;
    }
    let Some(requester) = team.members.iter().find(|m| m.name == cfg.member) else {
        return body;
    };
    let wanted = requests::hosts_wanted(req, requester);
    let (false, Some(owner)) = (wanted.is_empty(), super::store_owner(cfg)) else {
        return body;
    };
    let path = crate::core::layout::member_helper_asks_path(&cfg.state_dir, &cfg.team, &cfg.member);
    let name: String = req.name.chars().take(64).collect();
    let now = crate::servers::egress::log::Event::now();
    if let Err(e) = crate::approvals::asks::record(&path, &wanted, &name, now, owner) {
        tracing::warn!(error = %e, "a helper request's asks were not recorded");
        return body;
    }
    let ids: Vec<serde_json::Value> = wanted
        .iter()
        .map(|entry| {
            let want = crate::approvals::Want::Host {
                entry: entry.clone(),
            };
            json!({"id": crate::approvals::id(&cfg.team, &cfg.member, &want), "entry": entry})
        })
        .collect();
    // First, so that a reason phrase cut at its length (busybox shows no body) still has it.
    let named: Vec<&str> = ids.iter().filter_map(|v| v["id"].as_str()).collect();
    body["refused"] = json!(format!(
        "[asked the person: approval {}] {}",
        named.join(", "),
        r.message
    ));
    body["asked"] = serde_json::Value::Array(ids);
    body["hint"] = json!(
        "the person is asked to let your own grant reach these (ateam approvals on the host); ask again once they have"
    );
    body
}

/// Refuses a name that a container on the engine holds already: `ateam_<team>_<name>` (or
/// its replacement's `_next`), or one labelled as this team's member of that name (any
/// store's). A new helper has no
/// container yet, so any such is someone else's.
async fn on_engine(app: &App, team: &Team, name: &str) -> Result<(), Refusal> {
    use crate::core::container::{container_name, labels, replacement_name};
    let engine = |e: &dyn std::fmt::Display| {
        Refusal::new(
            503,
            "engine",
            None,
            format!("the engine could not be asked about `{name}`: {e}"),
        )
    };
    let (backend, _) = app
        .connect(std::slice::from_ref(team))
        .await
        .map_err(|e| engine(&e))?;
    let container = container_name(&team.name, name);
    let mut by_name = None;
    for n in [replacement_name(&container), container] {
        if let Some(c) = backend.find_by_name(&n).await.map_err(|e| engine(&e))? {
            by_name = Some(c);
        }
    }
    let wanted = [
        (labels::TEAM.to_string(), team.name.clone()),
        (labels::MEMBER.to_string(), name.to_string()),
    ];
    let by_labels = backend
        .list(&wanted.into_iter().collect())
        .await
        .map_err(|e| engine(&e))?;
    match by_name.or(by_labels.into_iter().next()) {
        None => Ok(()),
        Some(c) => Err(Refusal::new(
            409,
            "container-name",
            Some("name"),
            format!(
                "container `{}` ({}) holds the name `{name}` in team `{}` already; ateam did not make it for this helper and will not replace it; choose another name",
                c.name,
                &c.id[..c.id.len().min(12)],
                team.name
            ),
        )),
    }
}
