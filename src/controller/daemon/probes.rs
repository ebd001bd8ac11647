//! What wakes a reconcile besides the engine's own events: a periodic resync of every team,
//! a team's board that changed, an egress proxy that went silent, and the engine's event
//! stream itself.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{Key, Reconciler, member_key};
use crate::core::container::labels;
use crate::core::layout::store_id;
use crate::model::Team;

/// Every team, and the manifests, again and again: what events missed is caught here.
pub(super) async fn resync(r: Arc<Reconciler>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(r.opts.resync);
    tick.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {
                let _ = r.handle.schedule(Key::Manifests);
                for t in r.all_teams() {
                    let _ = r.handle.schedule(Key::Team(t));
                }
            }
        }
    }
}

/// How often the controller looks whether a team's board changed.
const BOARD_PROBE: Duration = Duration::from_secs(1);

/// A board changes by its sessions' calls, which send the engine no event: the times of each
/// board-team's task and message files are looked at every `BOARD_PROBE`, and a team whose
/// board changed is reconciled (its plan wakes an ended agent the board has news for, or
/// returns tasks).
pub(super) async fn board_probe(r: Arc<Reconciler>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(BOARD_PROBE);
    let mut seen: BTreeMap<String, Vec<Option<std::time::SystemTime>>> = BTreeMap::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {
                let teams: Vec<String> = {
                    let st = r.state();
                    st.teams.values().filter(|t| t.board).map(|t| t.name.clone()).collect()
                };
                for team in teams {
                    let dir = crate::core::layout::team_run_dir(&r.app.host.state_dir, &team)
                        .join("board");
                    let times: Vec<Option<std::time::SystemTime>> = ["tasks.json", "messages.json"]
                        .iter()
                        .map(|f| std::fs::metadata(dir.join(f)).and_then(|m| m.modified()).ok())
                        .collect();
                    let changed = seen.get(&team).is_some_and(|was| *was != times);
                    seen.insert(team.clone(), times);
                    if changed {
                        let _ = r.handle.schedule(Key::Team(team));
                    }
                }
            }
        }
    }
}

/// How often the controller looks whether each egress proxy answers.
const EGRESS_PROBE: Duration = Duration::from_secs(2);

/// Egress proxies are not the engine's: a dead one sends no event. Their sockets are probed
/// every `EGRESS_PROBE`, and the team of a silent one reconciled: its plan starts the proxy.
pub(super) async fn egress_probe(r: Arc<Reconciler>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(EGRESS_PROBE);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {
                // The sockets alone, not the teams: a clone of a team of 200 every 2 s was a
                // seventh of the controller's idle CPU.
                let sockets: Vec<(String, PathBuf)> = {
                    let st = r.state();
                    st.teams
                        .values()
                        .flat_map(|t| {
                            t.members
                                .iter()
                                .filter(|m| matches!(m.access.network, crate::model::Network::Allow(_)))
                                .map(|m| {
                                    let socket = crate::core::layout::egress_socket_path(
                                        &r.app.host.state_dir,
                                        &t.name,
                                        &m.name,
                                    );
                                    (t.name.clone(), socket)
                                })
                        })
                        .collect()
                };
                let mut silent: Vec<&str> = sockets
                    .iter()
                    .filter(|(_, socket)| !crate::servers::egress::answers(socket))
                    .map(|(team, _)| team.as_str())
                    .collect();
                silent.dedup();
                for team in silent {
                    debug!(team, "an egress proxy does not answer");
                    let _ = r.handle.schedule(Key::Team(team.to_string()));
                }
            }
        }
    }
}

/// The engine's events for this store's containers: each names a container; its team's
/// labels say which team to look at again. When the stream ends (the engine went away),
/// wait and connect again, growing the wait up to 30 s; on return, look at every team.
pub(super) async fn engine_events(r: Arc<Reconciler>, shutdown: CancellationToken) {
    let ours = BTreeMap::from([
        (labels::MANAGED_BY.to_string(), "ateam".to_string()),
        (labels::STORE.to_string(), store_id(&r.app.host.state_dir)),
    ]);
    let mut wait = Duration::from_secs(1);
    loop {
        let teams: Vec<Team> = {
            let st = r.state();
            st.teams.values().cloned().collect()
        };
        let connected = if teams.is_empty() {
            None
        } else {
            match r.app.connect(&teams).await {
                Ok((backend, _)) => match backend.events(&ours).await {
                    Ok(stream) => Some(stream),
                    Err(e) => {
                        warn!(error = %e, "engine events unavailable");
                        None
                    }
                },
                Err(e) => {
                    warn!(error = %e, "engine unavailable; retrying");
                    None
                }
            }
        };
        if let Some(mut stream) = connected {
            wait = Duration::from_secs(1);
            for t in r.all_teams() {
                let _ = r.handle.schedule(Key::Team(t));
            }
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(event)) => {
                            // Not debounced: a member that died is restarted now (a burst
                            // of events for it still runs one reconcile at a time), looked
                            // at alone; its team as a whole after the debounce.
                            match event.team {
                                Some(t) => {
                                    if let Some(m) = &event.member {
                                        let _ = r.handle.schedule_after(member_key(&t, m), Duration::ZERO);
                                        let _ = r.handle.schedule(Key::Team(t));
                                    } else {
                                        let _ = r.handle.schedule_after(Key::Team(t), Duration::ZERO);
                                    }
                                }
                                // No team label: every team, to be sure.
                                None => for t in r.all_teams() {
                                    let _ = r.handle.schedule(Key::Team(t));
                                },
                            }
                        }
                        Some(Err(e)) => {
                            warn!(error = %e, "engine event stream broke");
                            break;
                        }
                        None => {
                            warn!("engine event stream ended");
                            break;
                        }
                    },
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}
