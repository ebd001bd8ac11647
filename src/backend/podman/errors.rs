//! Podman: podman-api's errors as `BackendError`s, with the engine's own words.

use containers_api::conn::hyper::StatusCode;

use super::ENGINE;
use crate::backend::BackendError;

/// The HTTP status of an engine answer, if the error is one.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
pub(super) fn status_of(e: &podman_api::Error) -> Option<StatusCode> {
    match e {
        podman_api::Error::Fault { code, .. } => Some(*code),
        podman_api::Error::Error(containers_api::conn::Error::Fault { code, .. }) => Some(*code),
        // podman-api's other errors carry no HTTP status.
        _ => None,
    }
}

/// Podman's own words. podman-api formats faults as `"{message}: {cause}"` and the message
/// usually already ends with the cause, so the repeat is dropped.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
pub(super) fn message_of(e: &podman_api::Error) -> String {
    match e {
        podman_api::Error::Fault { message, .. }
        | podman_api::Error::Error(containers_api::conn::Error::Fault { message, .. }) => {
            match message.rsplit_once(": ") {
                Some((head, tail)) if !tail.is_empty() && head.ends_with(tail) => head.to_string(),
                _ => message.clone(),
            }
        }
        // podman-api's own errors: their text as it is.
        other => other.to_string(),
    }
}

pub(super) fn is_not_found(e: &podman_api::Error) -> bool {
    status_of(e) == Some(StatusCode::NOT_FOUND) || e.to_string().contains("no such container")
}

/// 304: already in the asked state (start a running container, stop a stopped one).
pub(super) fn is_not_modified(e: &podman_api::Error) -> bool {
    status_of(e) == Some(StatusCode::NOT_MODIFIED)
}

pub(super) fn engine_err(op: &str, e: &podman_api::Error) -> BackendError {
    BackendError::Engine {
        engine: ENGINE.into(),
        op: op.into(),
        message: message_of(e),
    }
}

/// Not-found becomes `NotFound { id }`, the rest `Engine`.
pub(super) fn container_err(op: &str, id: &str, e: &podman_api::Error) -> BackendError {
    if is_not_found(e) {
        BackendError::NotFound { id: id.into() }
    } else {
        engine_err(op, e)
    }
}

/// A failure to talk at all (as opposed to an error answer) means nothing usable is there.
pub(super) fn unavailable(uri: &str, e: &podman_api::Error) -> BackendError {
    if status_of(e).is_some() {
        return engine_err("connect", e);
    }
    BackendError::Unavailable {
        engine: ENGINE.into(),
        socket: uri.strip_prefix("unix://").unwrap_or(uri).into(),
        hint: format!(" ({e})"),
    }
}
