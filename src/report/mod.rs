//! What ateam tells people and tools: the plan as a diff, and the status of each team. Pure
//! functions over plans and observations, so the wording is tested without an engine.
//! - `diff`: the plan in words (diff's lines, and the phrases status and apply's log reuse);
//! - `rows`: a team's status as data, the rows of `StatusDocument`;
//! - `facts`: what status shows beyond the plan (restarts, sessions, usage...), as plain data;
//! - `status`: building those rows from the model, what was observed, the plan and the facts;
//! - `text`: the status table and the refusals, as people read them;
//! - `documents`: the same as documents for machines (`-o json|yaml`), with their schemas.

mod diff;
mod documents;
mod facts;
mod rows;
mod status;
#[cfg(test)]
mod tests;
mod text;

pub use diff::{action_text, drift_text, finding_text, render_diff, start_text};
pub use documents::{
    API_VERSION, Change, ContainerId, ControllerStatus, DiffDocument, DiffFinding, FieldChange,
    LastReconcile, StatusDocument, diff_document, diff_schema, status_schema,
};
pub use facts::{EgressFacts, MemberFacts, SessionFacts, StatusFacts, TranscriptUsage};
pub use rows::{
    AgentStatus, EgressCounts, EgressStatus, Grants, Injection, LeftOut, MemberStatus,
    NetworkGrant, NetworkMode, OriginStatus, RowKind, TeamStatus, Usage, WorkspaceStatus,
};
pub use status::{session_transcript, team_status};
pub use text::{render_controller, render_refusals, render_status, workspace_summary};

// What the unit tests (`tests.rs`) reach through `super::*`: the model and plan types their
// cases are made of, and a private helper they check.
#[cfg(test)]
use {
    crate::core::container::LastExit,
    crate::model::{AccessGrant, Network, Parent, Team},
    crate::plan::{Observed, ObservedContainer, Plan},
    text::allow_entry_shown,
};
