//! Accepted requests, recorded in the team's state folder, and merged into the manifests
//! wherever ateam looks while their requester is wanted.

use std::path::{Path, PathBuf};

use crate::core::layout;
use crate::files::{self, Owner};
use crate::model::{Member, Model, Origin, Parent, Team};

use super::judge::still_within;
use super::{Dropped, RequestError, RequestRecord};

pub(super) fn record_path(state_dir: &Path, team: &str, name: &str) -> PathBuf {
    layout::requested_path(state_dir, team, name)
}

/// Every record of `team`, oldest first (a helper's own helpers come after it). Unreadable
/// records are skipped with a warning: a broken file must not stop the team's manifests.
pub fn records(state_dir: &Path, team: &str) -> Vec<RequestRecord> {
    let dir = layout::requested_dir(state_dir, team);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut out: Vec<RequestRecord> = rd
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| match load(&e.path()) {
            Ok(r) => Some(r),
            Err(err) => {
                tracing::warn!(error = %err, "skipping a helper request record");
                None
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (requested_at(&a.member), &a.member.name).cmp(&(requested_at(&b.member), &b.member.name))
    });
    out
}

pub(super) fn requested_at(m: &Member) -> &str {
    match &m.origin {
        Origin::Requested { at, .. } | Origin::Forked { at, .. } => at,
        Origin::Manifest => "",
    }
}

pub(super) fn load(path: &Path) -> Result<RequestRecord, RequestError> {
    let bytes = std::fs::read(path).map_err(|source| RequestError::Io {
        path: path.into(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| RequestError::Corrupt {
        path: path.into(),
        source,
    })
}

/// Records `m`, atomically, 0600.
pub fn save(state_dir: &Path, team: &str, m: &Member, owner: Owner) -> Result<(), RequestError> {
    let dir = layout::requested_dir(state_dir, team);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RequestError::Io { path, source }
    };
    files::private_dir(&dir, owner).map_err(io(&dir))?;
    let path = record_path(state_dir, team, &m.name);
    let json = serde_json::to_vec_pretty(&RequestRecord { member: m.clone() })
        .expect("a record serializes");
    files::write_atomic(&path, &json, 0o600, owner).map_err(io(&path))
}

/// Forgets the request that made `name` (its container is the caller's business).
pub fn forget(state_dir: &Path, team: &str, name: &str) -> Result<(), RequestError> {
    let path = record_path(state_dir, team, name);
    files::remove_if_present(&path).map_err(|source| RequestError::Io { path, source })
}

/// `desired` with the requested members of its teams added: those of a team that still allows
/// requests, whose requester is in it (a manifest member, or a requested one kept itself),
/// whose name no manifest member or main session takes, that fit the team's maxMembers and
/// maxDepth as it is now (the oldest first), and that are still no wider than their requester.
/// The others are `Dropped`, and with them, in the same plan, every helper below them: a
/// helper's chain of requesters is followed link by link through the records, so it lives
/// only while every link does. Turning `helperRequests` off leaves a team exactly as its
/// manifests say.
pub fn merge(desired: &Model, state_dir: &Path) -> (Model, Vec<Dropped>) {
    let mut out = desired.clone();
    let mut dropped = Vec::new();
    for team in &mut out.teams {
        let manifest_names: Vec<String> = team.members.iter().map(|m| m.name.clone()).collect();
        let mut pending: Vec<Member> = records(state_dir, &team.name)
            .into_iter()
            .map(|r| r.member)
            .collect();
        // Pass after pass, each record whose requester is in the team by now: a helper's
        // helper may be recorded in the same second as it, so the order of the records
        // alone does not say who comes first.
        loop {
            let mut waiting = Vec::new();
            let before = pending.len();
            for m in pending {
                match admit(team, &manifest_names, m) {
                    Admit::Keep(m) => team.members.push(*m),
                    Admit::Wait(m) => waiting.push(*m),
                    Admit::Drop { member, why } => dropped.push(Dropped {
                        team: team.name.clone(),
                        member,
                        why,
                    }),
                }
            }
            let stuck = waiting.len() == before;
            pending = waiting;
            if stuck || pending.is_empty() {
                break;
            }
        }
        // Whose requester never came: it went, or was itself dropped (and so, its chain).
        let pending_names: Vec<String> = pending
            .iter()
            .map(|m| m.name.clone())
            .chain(
                dropped
                    .iter()
                    .filter(|d| d.team == team.name)
                    .map(|d| d.member.clone()),
            )
            .collect();
        for m in pending {
            let by = match &m.origin {
                Origin::Requested { by, .. } => by.clone(),
                Origin::Forked { from, .. } => {
                    let why =
                        format!("the member it was forked from, `{from}`, is no longer wanted");
                    dropped.push(Dropped {
                        team: team.name.clone(),
                        member: m.name,
                        why,
                    });
                    continue;
                }
                Origin::Manifest => String::new(),
            };
            let why = if pending_names.contains(&by) {
                format!("its requester `{by}` is no longer wanted (a link of its chain went)")
            } else {
                format!("its requester `{by}` is no longer wanted")
            };
            dropped.push(Dropped {
                team: team.name.clone(),
                member: m.name,
                why,
            });
        }
    }
    (out, dropped)
}

/// A fork (`ateam fork`): kept while its origin is in the team, beside it (its parent and
/// depth); its grants are its own copies, so no bound of its origin's applies to them. The
/// team's name rules and maxMembers hold as for a helper.
fn admit_fork(team: &Team, manifest_names: &[String], mut m: Member, from: &str) -> Admit {
    let why = if manifest_names.contains(&m.name) {
        Some("a manifest now names a member of this name".to_string())
    } else if team.sessions.iter().any(|s| s.name == m.name) {
        Some("a main session has this name".to_string())
    } else if team.members.iter().any(|p| p.name == m.name) {
        Some("another member has this name".to_string())
    } else if team.members.len() as u32 >= team.max_members {
        Some(format!(
            "the team has maxMembers {} without it",
            team.max_members
        ))
    } else if let Some(origin) = team.members.iter().find(|p| p.name == from) {
        m.parent = origin.parent.clone();
        m.depth = origin.depth;
        None
    } else {
        return Admit::Wait(Box::new(m));
    };
    match why {
        Some(why) => Admit::Drop {
            member: m.name,
            why,
        },
        None => Admit::Keep(Box::new(m)),
    }
}

/// What `merge` does with one record, given the team as merged so far.
enum Admit {
    Keep(Box<Member>),
    /// Its requester is not (yet) in the team.
    Wait(Box<Member>),
    Drop {
        member: String,
        why: String,
    },
}

fn admit(team: &Team, manifest_names: &[String], mut m: Member) -> Admit {
    let by = match &m.origin {
        Origin::Requested { by, .. } => by.clone(),
        Origin::Forked { from, .. } => {
            let from = from.clone();
            return admit_fork(team, manifest_names, m, &from);
        }
        Origin::Manifest => {
            return Admit::Drop {
                member: m.name,
                why: "its record says no member asked for it".into(),
            };
        }
    };
    let why = if !team.helper_requests {
        Some("its team no longer allows helper requests".to_string())
    } else if manifest_names.contains(&m.name) {
        Some("a manifest now names a member of this name".to_string())
    } else if team.sessions.iter().any(|s| s.name == m.name) {
        // A helper may never be a main session's namesake: plans act on the session by
        // that name, and the helper's own helpers would seem to be the session's.
        Some("a main session has this name".to_string())
    } else if team.members.iter().any(|p| p.name == m.name) {
        Some("another member has this name".to_string())
    } else if team.members.len() as u32 >= team.max_members {
        Some(format!(
            "the team has maxMembers {} without it",
            team.max_members
        ))
    } else if let Some(parent) = team.members.iter().find(|p| p.name == by) {
        // The depth is the chain's as it is now, not as it was when it asked: its
        // requester may have been moved deeper since.
        if parent.depth + 1 > team.max_depth {
            Some(format!(
                "it would be at depth {}, deeper than the team's maxDepth {}",
                parent.depth + 1,
                team.max_depth
            ))
        } else {
            m.parent = Parent::Member(by.clone());
            m.depth = parent.depth + 1;
            still_within(&m, parent).err()
        }
    } else if team
        .sessions
        .iter()
        .any(|s| s.name == by && s.promoted_from.as_deref() == Some(by.as_str()))
    {
        // Its requester was promoted to a main session of the same name: as a manifest
        // member's children, it now works for the session (which has the person's own
        // access, so it is no wider). Only a promotion: a session that merely shares the
        // requester's name is not its requester.
        m.parent = Parent::MainSession(by.clone());
        m.depth = 1;
        None
    } else {
        return Admit::Wait(Box::new(m));
    };
    match why {
        None => Admit::Keep(Box::new(m)),
        Some(why) => Admit::Drop {
            member: m.name,
            why,
        },
    }
}
