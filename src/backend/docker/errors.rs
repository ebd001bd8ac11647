//! Docker: bollard's errors as `BackendError`s, with the engine's own words.

use std::io::ErrorKind;

use bollard::errors::Error as BollardError;

use super::{DockerBackend, ENGINE};
use crate::backend::BackendError;

impl DockerBackend {
    /// Any other failure, with the engine's own words; a dead connection says so instead.
    pub(super) fn engine_err(&self, op: &str, e: BollardError) -> BackendError {
        if is_connection_error(&e) {
            return BackendError::Unavailable {
                engine: ENGINE.into(),
                socket: self.socket.clone(),
                hint: format!(" ({op}: {})", message_of(&e)),
            };
        }
        BackendError::Engine {
            engine: ENGINE.into(),
            op: op.into(),
            message: message_of(&e),
        }
    }

    /// 404 on a container call means the container is gone, whatever the call was.
    pub(super) fn container_err(&self, op: &str, id: &str, e: BollardError) -> BackendError {
        match status_of(&e) {
            Some(404) => BackendError::NotFound { id: id.into() },
            _ => self.engine_err(op, e),
        }
    }
}

pub(super) fn status_of(e: &BollardError) -> Option<u16> {
    if let BollardError::DockerResponseServerError { status_code, .. } = e {
        Some(*status_code)
    } else {
        None
    }
}

/// The engine's message as is; for anything else the whole cause chain, because bollard's
/// own text ("Error in the hyper legacy client: client error (Connect)") hides the reason.
pub(super) fn message_of(e: &BollardError) -> String {
    if let BollardError::DockerResponseServerError { message, .. } = e {
        return message.trim().to_string();
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        source = s.source();
    }
    out
}

pub(super) fn io_kind(e: &BollardError) -> Option<ErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = s.source();
    }
    None
}

#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
pub(super) fn is_connection_error(e: &BollardError) -> bool {
    match e {
        BollardError::HyperLegacyError { err } => err.is_connect(),
        BollardError::SocketNotFoundError(_) => true,
        // bollard's other errors (two dozen, growing): judged by the I/O error under them.
        _ => matches!(
            io_kind(e),
            Some(
                ErrorKind::ConnectionRefused
                    | ErrorKind::NotFound
                    | ErrorKind::ConnectionReset
                    | ErrorKind::BrokenPipe
            )
        ),
    }
}
