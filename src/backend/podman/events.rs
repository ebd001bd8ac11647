//! Podman: the engine's events, as a stream.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use podman_api::opts::EventsOpts;

use super::PodmanBackend;
use super::errors::engine_err;
use super::list::{has_labels, label_filters};
use crate::backend::{ContainerEvent, Result};

pub(super) async fn events(
    b: &PodmanBackend,
    labels: &BTreeMap<String, String>,
) -> Result<BoxStream<'static, Result<ContainerEvent>>> {
    // podman-api's event stream borrows the client, so a task owns a clone and forwards
    // ids; it ends when the receiver is dropped or the engine closes the stream.
    //
    // `since` = now: the subscription is made by the task a moment later, and events in
    // between are replayed from Podman's event log instead of being lost.
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut filters: Vec<(String, Vec<String>)> = vec![("type".into(), vec!["container".into()])];
    if !labels.is_empty() {
        filters.push(("label".into(), label_filters(labels)));
    }
    let opts = EventsOpts::builder()
        .stream(true)
        .since(since.to_string())
        .filters(filters)
        .build();
    let podman = b.podman.clone();
    let labels = labels.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<ContainerEvent>>(64);
    tokio::spawn(async move {
        let mut events = podman.events(&opts);
        loop {
            tokio::select! {
                _ = tx.closed() => break,
                next = events.next() => match next {
                    None => break,
                    // Several label filters are OR-ed by Podman: require all of them here.
                    Some(Ok(ev)) => {
                        let label = |k: &str| ev.actor.attributes.get(k).cloned();
                        let (team, member) = {
                    use crate::core::container::labels as names;
                    (label(names::TEAM), label(names::MEMBER))
                };
                        if ev.typ == "container"
                            && !crate::backend::quiet_event(&ev.action)
                            && has_labels(&ev.actor.attributes, &labels)
                            && tx
                                .send(Ok(ContainerEvent { id: ev.actor.id, team, member }))
                                .await
                                .is_err()
                        {
                            break;
                        }
                    }
                    Some(Err(e)) => {
                        let _ = tx.send(Err(engine_err("events", &e))).await;
                        break;
                    }
                },
            }
        }
    });
    Ok(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed())
}
