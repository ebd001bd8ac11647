//! What members' helper requests asked of their requester's grant: a helper request for a
//! host the requester may not reach is refused (a helper is never wider than its requester),
//! and the host becomes an ask of the requester's grant, as its own refusal would
//! (`core::layout::member_helper_asks_path`, 0600, ateam's user, beside the answers and never
//! mounted). Written by the member's helper server, one request at a time; read by
//! `approvals::of_member`. Bounded: a member asking for thousands of hosts keeps the last
//! `KEPT`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::record::RecordError;
use crate::core::egress::Entry;
use crate::files::Owner;

/// How many hosts asked for are kept per member, the most recent.
pub const KEPT: usize = 64;

/// One host helper requests asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ask {
    /// The allow-list entry, as `Entry` writes it (`pypi.org`, `*.example.com`, `host:8443`).
    pub entry: String,
    /// The helper last asked for with it.
    pub helper: String,
    /// How many requests asked for it.
    pub count: u64,
    /// The first of them, seconds since the epoch.
    pub first_seen: f64,
    /// The last of them, seconds since the epoch.
    pub last_seen: f64,
}

/// A member's asks, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Asks {
    /// By entry, each once.
    #[serde(default)]
    pub asks: Vec<Ask>,
}

/// The asks at `path`; none yet, or unreadable (said on the log), is none: an ask shown or
/// not grants nothing.
pub fn load(path: &Path) -> Asks {
    let f = match crate::files::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Asks::default(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "helper asks not readable");
            return Asks::default();
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut bytes) {
        tracing::warn!(path = %path.display(), error = %e, "helper asks not readable");
        return Asks::default();
    }
    let mut asks: Asks = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::warn!(path = %path.display(), error = %e, "helper asks not readable");
        Asks::default()
    });
    asks.asks
        .retain(|a| crate::manifest::validate::is_name(&a.helper));
    asks
}

impl Asks {
    /// Counts `entries` asked for by a request for `helper` at `now`: each written as `Entry`
    /// writes it (what does not parse is no ask), the oldest dropped past `KEPT`.
    pub fn add(&mut self, entries: &[String], helper: &str, now: f64) {
        // The member chose the name: shown to the person only as a name a manifest may give
        // (no escape sequence, no bidi override); a request of another name asks nothing.
        if !crate::manifest::validate::is_name(helper) {
            return;
        }
        for e in entries {
            let Ok(entry) = Entry::parse(e) else { continue };
            let entry = entry.to_string();
            match self.asks.iter_mut().find(|a| a.entry == entry) {
                Some(a) => {
                    a.count += 1;
                    a.last_seen = now;
                    a.helper = helper.to_string();
                }
                None => self.asks.push(Ask {
                    entry,
                    helper: helper.to_string(),
                    count: 1,
                    first_seen: now,
                    last_seen: now,
                }),
            }
        }
        self.asks
            .sort_by(|a, b| a.last_seen.total_cmp(&b.last_seen));
        let over = self.asks.len().saturating_sub(KEPT);
        self.asks.drain(..over);
    }
}

/// Adds `entries` asked for by a request for `helper` to the asks at `path`, atomically,
/// 0600, `owner`'s.
pub fn record(
    path: &Path,
    entries: &[String],
    helper: &str,
    now: f64,
    owner: Owner,
) -> Result<(), RecordError> {
    let mut asks = load(path);
    asks.add(entries, helper, now);
    let json = serde_json::to_vec_pretty(&asks).map_err(|source| RecordError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    crate::files::write_atomic(path, &json, 0o600, owner).map_err(|source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    })
}
