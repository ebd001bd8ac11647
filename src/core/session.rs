//! A promotion's journal: the steps of turning a member into a main session, as data. Each
//! step is recorded (`sessions::promote` writes it atomically) before the next one starts, so
//! that an apply that dies half way leaves enough for the next one to finish the promotion,
//! or undo it when the manifests no longer ask for it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How far a promotion got. Ordered: each step implies the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PromotionStep {
    /// Recorded, nothing changed yet.
    Begun,
    /// The member's containers are stopped (not removed: a rollback finds them).
    Stopped,
    /// Its transcript folder is at the session's place.
    Moved,
    /// The session's terminal runs.
    Started,
}

impl PromotionStep {
    /// Every step, in order.
    pub const ALL: [PromotionStep; 4] = [
        PromotionStep::Begun,
        PromotionStep::Stopped,
        PromotionStep::Moved,
        PromotionStep::Started,
    ];

    /// Its name as serialized (`begun`), for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            PromotionStep::Begun => "begun",
            PromotionStep::Stopped => "stopped",
            PromotionStep::Moved => "moved",
            PromotionStep::Started => "started",
        }
    }
}

/// `<state>/teams/<t>/sessions/<s>/promotion.json`, while a promotion is under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Promotion {
    /// The team of the member and the session.
    pub team: String,
    /// The member's name, which is the session's.
    pub name: String,
    /// The last step done.
    pub step: PromotionStep,
    /// The member's containers when it began (stopped, then removed once the session runs).
    pub containers: Vec<String>,
    /// The member's transcript folder, and the session's.
    pub from: PathBuf,
    /// The session's transcript folder, where the member's moves to.
    pub to: PathBuf,
    /// The transcript was there to move (a member may have had none yet).
    pub had_transcript: bool,
    /// When it began (RFC 3339), for the log and status.
    pub begun_at: String,
}
