//! Docker: the engine's events, as a stream and as what it still holds.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::EventsOptions;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};

use super::{DockerBackend, ENGINE};
use super::{
    errors::{is_connection_error, message_of},
    list::label_filters,
};
use crate::backend::{BackendError, ContainerEvent, EventMark, Result};

/// Nanoseconds in a second.
const NANOS: i64 = 1_000_000_000;

pub(super) async fn events(
    b: &DockerBackend,
    labels: &BTreeMap<String, String>,
) -> Result<BoxStream<'static, Result<ContainerEvent>>> {
    let mut filters = HashMap::from([("type".to_string(), vec!["container".to_string()])]);
    if !labels.is_empty() {
        filters.insert("label".to_string(), label_filters(labels));
    }
    // bollard sends the request only when the stream is first polled: starting from a
    // second ago replays what happened in between, so a caller that subscribes, acts, then
    // polls misses nothing. A repeated id costs one more look; a missed one, a stuck team.
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(Duration::from_secs(1));
    let opts = EventsOptions {
        since: Some(format!("{}.{:09}", since.as_secs(), since.subsec_nanos())),
        until: None,
        filters: Some(filters),
    };
    let socket = b.socket.clone();
    let stream = b
        .docker
        .events(Some(opts))
        .map_err(move |e| {
            if is_connection_error(&e) {
                BackendError::Unavailable {
                    engine: ENGINE.into(),
                    socket: socket.clone(),
                    hint: format!(" (events: {})", message_of(&e)),
                }
            } else {
                BackendError::Engine {
                    engine: ENGINE.into(),
                    op: "events".into(),
                    message: message_of(&e),
                }
            }
        })
        .try_filter_map(|ev| async move {
            let action = ev.action.unwrap_or_default();
            let quiet = crate::backend::quiet_event(&action);
            Ok(ev.actor.and_then(|a| {
                let label = |k: &str| a.attributes.as_ref().and_then(|at| at.get(k).cloned());
                let (team, member) = {
                    use crate::core::container::labels as names;
                    (label(names::TEAM), label(names::MEMBER))
                };
                a.id.filter(|id| !quiet && !id.is_empty())
                    .map(|id| ContainerEvent { id, team, member })
            }))
        });
    Ok(stream.boxed())
}

pub(super) async fn recent_events(
    b: &DockerBackend,
    since_nano: i64,
) -> Result<Option<Vec<EventMark>>> {
    // Docker's own daemon only: a look-alike's compatible API (Podman's) replays its whole
    // event log, however long, not a bounded buffer.
    if !b
        .identity
        .as_deref()
        .is_some_and(|i| i.starts_with("Docker/"))
    {
        return Ok(None);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = |n: i64| format!("{}.{:09}", n.div_euclid(NANOS), n.rem_euclid(NANOS));
    let opts = EventsOptions {
        since: Some(stamp(since_nano)),
        // A past end: the engine answers with what it holds and closes.
        until: Some(format!("{}.{:09}", now.as_secs(), now.subsec_nanos())),
        filters: None,
    };
    let held: Vec<bollard::models::EventMessage> = b
        .docker
        .events(Some(opts))
        .try_collect()
        .await
        .map_err(|e| b.engine_err("events", e))?;
    Ok(Some(
        held.into_iter()
            .map(|ev| EventMark {
                time_nano: ev.time_nano.unwrap_or(0),
                kind: ev.typ.map(|t| t.to_string()).unwrap_or_default(),
                action: ev.action.unwrap_or_default(),
                id: ev.actor.and_then(|a| a.id).unwrap_or_default(),
            })
            .collect(),
    ))
}
