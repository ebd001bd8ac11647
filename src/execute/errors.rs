//! What went wrong for one member while its actions were carried out.

use crate::backend::BackendError;
use crate::runtime::RunError;
use crate::servers::egress;
use crate::sessions;

/// What went wrong for one member; the others went on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum ActionError {
    /// Bringing the member up failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// An engine call failed.
    #[error("member `{member}`: {source}")]
    Backend {
        member: String,
        /// The engine's error.
        #[source]
        source: BackendError,
    },
    /// A file could not be read or written.
    #[error("member `{member}`: {}: {source}", .path.display())]
    Io {
        member: String,
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Its egress proxy could not be set up or started.
    #[error("member `{member}`: {source}")]
    Egress {
        member: String,
        /// What failed.
        #[source]
        source: egress::ProxyError,
    },
    /// Its helper server could not be started.
    #[error("member `{member}`: its helper server: {source}")]
    Helpers {
        member: String,
        /// What failed.
        #[source]
        source: crate::servers::helper::StartError,
    },
    /// An action that cannot be carried out as planned, or a task that panicked, in words.
    #[error("main session `{session}`: {message}")]
    Session {
        /// The session or member it is about.
        session: String,
        /// What is wrong.
        message: String,
    },
    /// A step of starting, stopping or promoting a main session failed.
    #[error("main session `{session}`: {source}")]
    SessionStep {
        session: String,
        /// What failed.
        #[source]
        source: Box<sessions::SessionError>,
    },
}
