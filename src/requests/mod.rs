//! Helper members a member asks for at run time, in teams that allow it (`helperRequests`).
//!
//! A request is judged as manifests are: the team as it stands (`manifest::export`), plus
//! the requested Member and an AccessGrant of its own, go through `manifest::validate`, so
//! that every rule (names, grant paths, a child never wider than its parent, maxMembers,
//! maxDepth, admission) holds for requested members as for written ones. On top of those, a
//! request may not ask for more memory, pids or CPUs than its requester has.
//!
//! An accepted request is recorded (`<state>/teams/<team>/requested/<name>.json`) and is
//! desired state from then on: `merge` adds it to the team's manifests wherever ateam looks
//! (apply, the controller, status, diff). It lasts as long as its requester is desired: when
//! the manifests no longer name the requester (or a manifest now names a member of the same
//! name), the record is dropped and its container removed by the next apply or reconcile,
//! without `--prune`, and so is every helper below it (its requester chain is followed
//! through the records). Its transcript stays, as every member's does. A request may not
//! take a name anything else has or had: a main session's, a member's, one the store or the
//! sessionDir remembers (`remembered`), a container's (checked by the server). A requester whose
//! container is merely down (crashed, being replaced) is still desired, so its helpers stay.
//!
//! A fork a person made (`ateam fork`, `app::fork`) is recorded here too, as a member of
//! `Origin::Forked`: merged while the member it was forked from is desired, beside it.
//!
//! This module is the pure part: judging, recording, merging. `ateam helper-server`, the
//! per-member process behind `/.ateam/helpers.sock` that judges and converges, and its
//! starting and stopping, are `servers::helper`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod judge;
mod records;
/// A requested member that is no longer wanted (the planner's input: it removes them).
pub use crate::plan::Dropped;
pub use judge::{grant_name, hosts_wanted, judge, remembered};
pub use records::{forget, merge, records, save};

use crate::manifest::raw::{NetworkSpec, Resources};
use crate::model::{Member, RestartPolicy};

/// What a member sends to ask for a helper (JSON). Unknown fields are errors, as in manifests.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Request {
    /// The helper's name (a DNS-1123 label, unique in the team).
    pub name: String,
    /// Default: the team's image, else the requester's. Only an image the team's manifests
    /// name (the Team's or a member's): a free choice would let the host fetch anything.
    pub image: Option<String>,
    /// Default: the image's own.
    pub command: Option<Vec<String>>,
    /// Absolute; default as a manifest's: the first write folder, else read, else its
    /// transcript folder.
    pub cwd: Option<String>,
    /// Plain environment variables, judged by the manifest rules.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Absolute folders the requester may read (or write), or folders inside them.
    #[serde(default)]
    pub read: Vec<String>,
    /// Absolute folders the requester may write, or folders inside them.
    #[serde(default)]
    pub write: Vec<String>,
    /// `none` (default), `{allow: [...]}` within the requester's, or `open` if it has it.
    pub network: Option<NetworkSpec>,
    /// Each default: the requester's own; never more than it.
    #[serde(default)]
    pub resources: Resources,
    /// When to restart it; default `OnFailure`, as a manifest's.
    pub restart: Option<RestartPolicy>,
}

/// Why a request was refused: which rule it breaks, and in what words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// An HTTP status: 400 malformed, 403 not allowed at all, 409 the name is taken (by a
    /// member, a main session, something remembered, a container), 422 a rule is broken.
    pub status: u16,
    /// A short name of the rule: `narrower-than-requester`, `resources-within-requester`,
    /// `maxMembers`, `maxDepth`, `name`, `absolute-paths`, `manifest-rules`...
    pub rule: String,
    /// The field of the request at fault, when one is.
    pub field: Option<String>,
    /// What is wrong, in words for the member to act on.
    pub message: String,
}

impl Refusal {
    /// A refusal by `rule`, with a `status` and, when one is at fault, the request's `field`.
    pub fn new(
        status: u16,
        rule: &str,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> Refusal {
        Refusal {
            status,
            rule: rule.into(),
            field: field.map(str::to_string),
            message: message.into(),
        }
    }
}

/// One accepted request, as recorded: the member it made (its `origin` says who asked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The helper, as a manifest member would be (its `origin` says who asked, and when).
    pub member: Member,
}

/// Why the recorded requests of a team could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// A record could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A record is not one ateam wrote.
    #[error("{}: not a request record ateam wrote: {source}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What did not parse.
        #[source]
        source: serde_json::Error,
    },
}

#[cfg(test)]
mod tests;
