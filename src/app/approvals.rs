//! Answering a member's pending approvals (`approvals`), as the person's own `ateam` does on
//! the host: listing them, dismissing one (deny once), and allowing one always, which writes
//! the grant into the manifest file it was read from and applies it (a new allow list is a
//! new `policy.json` for the running proxy: no new container), and denying one always, which
//! writes it into the grant's `deny` list the same way.
//!
//! Allowing always writes a file the person checks in, and a member must never steer that
//! write: the file must be the one the grant was read from, reached through no symlink, in a
//! folder no member can write (no write grant or transcripts folder of any team of the store
//! reaches it, and no container ateam made mounts it writable), unchanged since it was read;
//! and the manifests with the new entry must pass every rule, the parent's grant included.

use std::path::{Path, PathBuf};

use super::apply::{ApplyOptions, ApplyReport, apply};
use super::{App, AppError, Manifests};
use crate::approvals::record::{self, RecordError};
use crate::approvals::{Pending, Want};
use crate::core::layout;
use crate::execute::Progress;
use crate::model::{Member, Network, Team};

/// Why an answer was not carried out. Nothing was written unless the error says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum ApprovalError {
    /// No pending approval has this id.
    #[error("no pending approval `{id}` (`ateam approvals` lists them)")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// It is shown, but cannot be approved here.
    #[error("approval `{id}` cannot be approved here: {why}")]
    NotApprovable { id: String, why: String },
    /// The grant is in no manifest file the team was applied from.
    #[error(
        "AccessGrant `{grant}` of team `{team}` is in no manifest file the team was applied from ({}); add {want} to it by hand",
        .paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoManifest {
        team: String,
        grant: String,
        /// Where the team was applied from.
        paths: Vec<PathBuf>,
        /// What would have been added, in words.
        want: String,
    },
    /// The manifest file is not one ateam writes: a link on its path, or a folder a member
    /// can write.
    #[error("{}: not written: {why}", .path.display())]
    Unsafe {
        /// The file.
        path: PathBuf,
        why: String,
    },
    /// The file changed between the read and the write.
    #[error(
        "{}: changed since ateam read it; not written. Look at it and answer again",
        .path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// The manifests with the new entry break a rule (a parent's grant, a bad entry).
    #[error("with {want} added, the manifests are refused; not written:\n{source}")]
    Refused {
        /// What would have been added, in words.
        want: String,
        /// What validation said.
        #[source]
        source: AppError,
    },
    /// What names no entry, or a request denied always: answered by hand.
    #[error(
        "approval `{id}` asks for {want}: deny it once (its host's rules refuse it already), or change the grant by hand"
    )]
    ByHand {
        id: String,
        /// What it asks, in words.
        want: String,
    },
    /// Allow once holds for the member's present start, and it has none.
    #[error(
        "{team}/{member} is not running (its start gate holds): there is no start to allow it for"
    )]
    NotRunning { team: String, member: String },
    /// The manifest file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The answers in the state folder.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Reading the store, looking, applying.
    #[error(transparent)]
    App(#[from] AppError),
}

/// A pending approval, with its team and member as applied.
#[derive(Debug, Clone)]
pub struct Found {
    /// The member's team, as applied (with the helpers asked for).
    pub team: Team,
    /// The member, as applied: the grant an approval widens is its own.
    pub member: Member,
    /// The approval.
    pub pending: Pending,
}

/// Every pending approval of the applied teams (or of `team`), by team and member.
pub fn list(app: &App, team: Option<&str>) -> Result<Vec<Found>, AppError> {
    let applied = app.applied_with_requests(team)?;
    let mut out = Vec::new();
    for t in &applied.teams {
        for m in t
            .members
            .iter()
            .filter(|m| matches!(m.access.network, Network::Allow(_)))
        {
            let paths = crate::servers::egress::Paths::new(&app.host.state_dir, &t.name, &m.name);
            let events = crate::servers::egress::log::read(&paths.log);
            for p in crate::approvals::of_member(&app.host.state_dir, t, m, &events) {
                out.push(Found {
                    team: t.clone(),
                    member: m.clone(),
                    pending: p,
                });
            }
        }
    }
    Ok(out)
}

/// The pending approval `id`, if it is pending; `approvable`: refused unless it can be
/// approved here.
pub fn find(
    app: &App,
    team: Option<&str>,
    id: &str,
    approvable: bool,
) -> Result<Found, ApprovalError> {
    let found = list(app, team)?
        .into_iter()
        .find(|f| f.pending.id == id)
        .ok_or_else(|| ApprovalError::NotFound { id: id.to_string() })?;
    match &found.pending.not_approvable {
        Some(why) if approvable => Err(ApprovalError::NotApprovable {
            id: id.to_string(),
            why: why.clone(),
        }),
        Some(_) | None => Ok(found),
    }
}

/// Deny once: the ask is dismissed; the member's request stays refused, and a refusal after
/// now asks again.
pub fn deny_once(
    app: &App,
    f: &Found,
    waiting: &(dyn Fn(&str) + Sync),
) -> Result<(), ApprovalError> {
    let path = layout::member_approvals_path(&app.host.state_dir, &f.team.name, &f.member.name);
    let _lock = app.store.lock(false, waiting).map_err(AppError::from)?;
    let mut r = record::load(&path)?;
    r.dismissed.insert(
        f.pending.id.clone(),
        crate::servers::egress::log::Event::now(),
    );
    record::save(&path, &r, app.owner)?;
    Ok(())
}

/// Allow once: recorded in the state folder for the member's present start (its gate's
/// release), and given to its proxy (`servers::egress::OnceFile`), which lets it through from its
/// next connection; gone at the member's next start, whose release is another.
pub fn allow_once(
    app: &App,
    f: &Found,
    waiting: &(dyn Fn(&str) + Sync),
) -> Result<(), ApprovalError> {
    let (team, member) = (&f.team.name, &f.member.name);
    let state = &app.host.state_dir;
    let start = crate::approvals::release(state, team, member).ok_or_else(|| {
        ApprovalError::NotRunning {
            team: team.clone(),
            member: member.clone(),
        }
    })?;
    let _lock = app.store.lock(false, waiting).map_err(AppError::from)?;
    let path = layout::member_approvals_path(state, team, member);
    let mut r = record::load(&path)?;
    // What was allowed for an earlier start is gone.
    r.once.retain(|o| o.start == start);
    if !r.once.iter().any(|o| o.id == f.pending.id) {
        r.once.push(record::Once {
            id: f.pending.id.clone(),
            want: f.pending.want.clone(),
            start: start.clone(),
            at: crate::servers::egress::log::Event::now(),
        });
    }
    record::save(&path, &r, app.owner)?;
    let mut once = crate::servers::egress::OnceFile {
        start,
        ..Default::default()
    };
    for o in &r.once {
        match &o.want {
            Want::Host { entry } => once.allow.push(entry.clone()),
            Want::Request { host, .. } => {
                once.rules
                    .extend(o.want.rule().map(|rule| crate::servers::egress::OnceRule {
                        host: host.clone(),
                        rule,
                    }))
            }
        }
    }
    let paths = crate::servers::egress::Paths::new(state, team, member);
    crate::servers::egress::write_once(&paths, &once).map_err(|source| ApprovalError::Io {
        path: paths.dir.clone(),
        source,
    })
}

/// What allow always did.
#[derive(Debug)]
pub struct Written {
    /// The manifest file changed.
    pub file: PathBuf,
    /// The apply that followed.
    pub report: ApplyReport,
}

/// An answer written into the manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Always {
    /// Added to the grant's `network.allow`.
    Allow,
    /// Added to the grant's `deny`: refused, never suggested nor asked again.
    Deny,
}

/// Allow or deny always: the entry is written into the manifest file the grant was read
/// from (only the lines of its allow or deny list change), then the team's manifests are
/// applied. A deny needs no approvable ask (it narrows), but an entry a grant can name.
pub async fn always(
    app: &App,
    f: &Found,
    how: Always,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
    waiting: &(dyn Fn(&str) + Sync),
) -> Result<Written, ApprovalError> {
    let (t, p) = (&f.team, &f.pending);
    let want = p.want.describe();
    let by_hand = || ApprovalError::ByHand {
        id: p.id.clone(),
        want: want.clone(),
    };
    match (&p.want, how) {
        (Want::Host { entry }, Always::Allow | Always::Deny)
            if crate::core::egress::Entry::parse(entry).is_err() =>
        {
            return Err(by_hand());
        }
        // A rule refused it already: a deny of its whole host would be more than was asked.
        (Want::Request { .. }, Always::Deny) => return Err(by_hand()),
        (Want::Host { .. }, Always::Allow | Always::Deny)
        | (Want::Request { .. }, Always::Allow) => {}
    }
    let no_manifest = || ApprovalError::NoManifest {
        team: t.name.clone(),
        grant: p.grant.clone(),
        paths: t.manifests.clone(),
        want: want.clone(),
    };
    let gf = crate::manifest::edit::grant_file(&t.manifests, &t.name, &p.grant)
        .ok_or_else(no_manifest)?;
    let file = gf.path.clone();
    writable_by_ateam_alone(app, &file).await?;
    let text = edited_text(&gf.text, &p.grant, &p.want, how).ok_or_else(no_manifest)?;
    // The same judge as apply's: every rule, the parent's grant included, before a byte is
    // written.
    let edited = Manifests::read(&t.manifests)
        .map_err(AppError::from)?
        .replaced(&file, &text);
    app.judge(&edited)
        .map_err(|source| ApprovalError::Refused {
            want: want.clone(),
            source,
        })?;
    write_if_unchanged(&file, &gf.text, &text)?;
    let manifests = Manifests::read(&t.manifests).map_err(AppError::from)?;
    let report = apply(
        app,
        &manifests,
        ApplyOptions::default(),
        secret,
        progress,
        waiting,
        |_| {},
    )
    .await?;
    Ok(Written { file, report })
}

/// The manifest file's text with the answer written into the grant `grant`.
fn edited_text(text: &str, grant: &str, want: &Want, how: Always) -> Option<String> {
    use crate::manifest::edit;
    match (want, how) {
        (Want::Host { entry }, Always::Allow) => {
            edit::add_allow_entries_in_file(text, grant, std::slice::from_ref(entry))
        }
        (Want::Host { entry }, Always::Deny) => {
            edit::add_deny_entries_in_file(text, grant, std::slice::from_ref(entry))
        }
        (Want::Request { host, method, path }, Always::Allow) => {
            edit::add_http_rule_in_file(text, grant, host, method, path)
        }
        (Want::Request { .. }, Always::Deny) => None,
    }
}

/// Refuses a manifest file that a member could write, or that is reached through a link.
async fn writable_by_ateam_alone(app: &App, file: &Path) -> Result<(), ApprovalError> {
    let unsafe_ = |why: String| ApprovalError::Unsafe {
        path: file.to_path_buf(),
        why,
    };
    let real = std::fs::canonicalize(file).map_err(|source| ApprovalError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    if real != file {
        return Err(unsafe_(format!(
            "a symlink on its path leads to {}; ateam writes no manifest through a link",
            real.display()
        )));
    }
    let folder = file.parent().unwrap_or(Path::new("/"));
    let mounts = crate::host::mounts::Mounts::current().map_err(|source| ApprovalError::Io {
        path: "/proc/self/mountinfo".into(),
        source,
    })?;
    let reaches = |dir: &Path| {
        use crate::manifest::reach::{Reach, reach, real_path};
        matches!(
            reach(&real_path(dir), folder, &mounts),
            Some(Reach::Is { .. } | Reach::Contains { .. } | Reach::Mount(_))
        )
    };
    for t in &app.applied_with_requests(None)?.teams {
        if reaches(&t.session_dir) {
            return Err(unsafe_(format!(
                "its folder is inside the transcripts folder of team `{}`, where members write",
                t.name
            )));
        }
        for m in &t.members {
            if let Some(w) = m.access.write.iter().find(|w| reaches(w)) {
                return Err(unsafe_(format!(
                    "member `{}/{}` can write {}, which holds it",
                    t.name,
                    m.name,
                    w.display()
                )));
            }
        }
    }
    writable_mounts(app)
        .await?
        .into_iter()
        .find(|(_, source)| reaches(source))
        .map_or(Ok(()), |(name, source)| {
            Err(unsafe_(format!(
                "container `{name}`, which ateam made, mounts {} writable, which holds it",
                source.display()
            )))
        })
}

/// The writable bind mounts of every container ateam made on the engines of the applied
/// teams, of any store: a member of another state folder writes there too.
async fn writable_mounts(app: &App) -> Result<Vec<(String, PathBuf)>, AppError> {
    use crate::core::container::labels;
    let teams = app.applied(None)?.teams;
    let (backend, _) = app.connect(&teams).await?;
    let filter = [(labels::MANAGED_BY.to_string(), "ateam".to_string())].into();
    let mut out = Vec::new();
    for s in backend.list(&filter).await? {
        let Ok(i) = backend.inspect(&s.id).await else {
            continue; // gone meanwhile
        };
        out.extend(
            i.effective
                .bind_mounts
                .into_iter()
                .filter(|m| !m.read_only)
                .map(|m| (s.name.clone(), m.source)),
        );
    }
    Ok(out)
}

/// Writes `new` over `file` (atomically, its mode and owner kept) if it still reads `old`.
fn write_if_unchanged(file: &Path, old: &str, new: &str) -> Result<(), ApprovalError> {
    use std::os::unix::fs::MetadataExt;
    let io = |source| ApprovalError::Io {
        path: file.to_path_buf(),
        source,
    };
    let f = crate::files::open_regular(file).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    let mut now = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(f, crate::manifest::load::MAX_FILE_BYTES + 1),
        &mut now,
    )
    .map_err(io)?;
    if now != old {
        return Err(ApprovalError::Changed {
            path: file.to_path_buf(),
        });
    }
    let owner = crate::files::Owner {
        uid: meta.uid(),
        gid: meta.gid(),
    };
    crate::files::write_atomic(file, new.as_bytes(), meta.mode() & 0o7777, owner).map_err(io)
}

/// The longest learning run: members get past their lists for no longer than this.
pub const MAX_LEARN: std::time::Duration = std::time::Duration::from_secs(3600);

/// Starts a learning run for every member with an allow list of `desired`, until `until`
/// (seconds since the epoch): its proxy lets through what the person could approve
/// (`servers::egress::LearnFile`) and logs it as an ask. Returns how many members learn.
pub fn learn(app: &App, desired: &crate::model::Model, until: f64) -> Result<usize, ApprovalError> {
    let mut n = 0;
    for t in &desired.teams {
        for m in t
            .members
            .iter()
            .filter(|m| matches!(m.access.network, Network::Allow(_)))
        {
            let s = crate::approvals::subject(t, m, None);
            let (parent, parent_ruled) = match s.parent {
                crate::approvals::ParentGrant::Session => (None, Vec::new()),
                crate::approvals::ParentGrant::Member { grant, .. } => match &grant.network {
                    Network::Open => (None, Vec::new()),
                    Network::None => (Some(Vec::new()), Vec::new()),
                    Network::Allow(l) => (
                        Some(l.clone()),
                        grant.intercept.iter().map(|i| i.host.clone()).collect(),
                    ),
                },
            };
            let paths = crate::servers::egress::Paths::new(&app.host.state_dir, &t.name, &m.name);
            let file = crate::servers::egress::LearnFile {
                until,
                parent,
                parent_ruled,
            };
            crate::servers::egress::write_learn(&paths, &file).map_err(|source| {
                ApprovalError::Io {
                    path: paths.dir.clone(),
                    source,
                }
            })?;
            n += 1;
        }
    }
    Ok(n)
}

/// What a learning run (or any refusals) proposes: for every manifest file holding a grant
/// with approvable asks for new entries, the file as it is and as it would be with them all
/// added (allow lists only: the smallest grant that covers what was asked is its entries).
pub fn proposal(app: &App, team: Option<&str>) -> Result<Vec<(PathBuf, String, String)>, AppError> {
    let found = list(app, team)?;
    let mut by_grant: std::collections::BTreeMap<(String, String), (Team, Vec<String>)> =
        std::collections::BTreeMap::new();
    for f in found.iter().filter(|f| f.pending.not_approvable.is_none()) {
        let Want::Host { entry } = &f.pending.want else {
            continue;
        };
        let e = by_grant
            .entry((f.team.name.clone(), f.pending.grant.clone()))
            .or_insert_with(|| (f.team.clone(), Vec::new()));
        if !e.1.contains(entry) {
            e.1.push(entry.clone());
        }
    }
    let mut files: Vec<(PathBuf, String, String)> = Vec::new();
    for ((team, grant), (t, entries)) in by_grant {
        let Some(gf) = crate::manifest::edit::grant_file(&t.manifests, &team, &grant) else {
            continue;
        };
        let at = match files.iter().position(|(p, _, _)| *p == gf.path) {
            Some(i) => i,
            None => {
                files.push((gf.path.clone(), gf.text.clone(), gf.text.clone()));
                files.len() - 1
            }
        };
        if let Some(new) =
            crate::manifest::edit::add_allow_entries_in_file(&files[at].2, &grant, &entries)
        {
            files[at].2 = new;
        }
    }
    files.retain(|(_, old, new)| old != new);
    Ok(files)
}
