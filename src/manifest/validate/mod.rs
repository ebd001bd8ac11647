//! Every rule a set of manifests must pass, and the trusted model built from them.
//!
//! Rules run in stages and each stage reports all it finds; a later stage only runs on objects
//! an earlier one could read. `shape` reads each document into an object of its kind; `teams`
//! sorts the objects into their teams and judges each team's own settings; then, team by team,
//! `sessions`, `grants` and `members` build the model's parts, `limits` judging members'
//! resources and the host's admission; last, `writers` judges every member's write grant
//! against every other's, across teams. The stages after `shape` share `Build`: what they
//! judge against, and the problems they find.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use tracing::info;

use super::raw;
use super::reach::Fence;
use super::yaml::Document;
use super::{Problem, Source, did_you_mean};
use crate::core::layout::MAX_SOCKET_PATH;
use crate::host::{EngineDir, Host, engines};
use crate::model::{self, Model, UserId};

mod agents;
mod grants;
mod images;
mod limits;
mod members;
mod sessions;
mod shape;
mod teams;
mod workspaces;
mod writers;

pub(crate) use grants::narrower;
use limits::Admission;
pub use limits::{DEFAULT_MEMORY, MEMORY_SHARE};
pub(crate) use writers::ONE_WRITER;

/// What `kind` says an object is. A string that names no kind is refused (`FromStr`), so no
/// object is ever read as a kind it does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Team,
    MainSession,
    AccessGrant,
    Member,
}

impl Kind {
    /// In the order messages list them.
    const ALL: [Kind; 4] = [
        Kind::Team,
        Kind::MainSession,
        Kind::AccessGrant,
        Kind::Member,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Kind::Team => "Team",
            Kind::MainSession => "MainSession",
            Kind::AccessGrant => "AccessGrant",
            Kind::Member => "Member",
        }
    }

    fn names() -> [&'static str; 4] {
        Kind::ALL.map(Kind::as_str)
    }
}

impl FromStr for Kind {
    type Err = String;

    /// The refusal names the nearest kind, and all of them.
    fn from_str(k: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|x| x.as_str() == k)
            .ok_or_else(|| {
                let hint = did_you_mean(k, Kind::names())
                    .map(|m| format!(" (did you mean `{m}`?)"))
                    .unwrap_or_default();
                format!(
                    "unknown kind `{k}`{hint}; kinds are {}",
                    Kind::names().join(", ")
                )
            })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An object's spec, typed by its kind.
#[derive(Debug, Clone)]
enum Spec {
    Team(raw::TeamSpec),
    MainSession(raw::MainSessionSpec),
    AccessGrant(raw::AccessGrantSpec),
    Member(raw::MemberSpec),
}

/// One readable object, with what is needed to point at its fields.
#[derive(Debug, Clone)]
struct Parsed<'a> {
    src: &'a Source,
    doc: Document,
    name: String,
    labels: BTreeMap<String, String>,
    spec: Spec,
}

impl Parsed<'_> {
    /// Read from the spec, so that it cannot disagree with it.
    fn kind(&self) -> Kind {
        match &self.spec {
            Spec::Team(_) => Kind::Team,
            Spec::MainSession(_) => Kind::MainSession,
            Spec::AccessGrant(_) => Kind::AccessGrant,
            Spec::Member(_) => Kind::Member,
        }
    }

    fn id(&self) -> String {
        format!("{}/{}", self.kind(), self.name)
    }

    fn problem(&self, field: &str, message: impl Into<String>) -> Problem {
        let pos = self.doc.pos_of(field);
        Problem {
            file: self.src.path.clone(),
            line: pos.line,
            column: pos.column,
            object: Some(self.id()),
            field: Some(field.to_string()),
            message: message.into(),
            source_line: None,
        }
    }

    /// For problems about a value rather than its key (a bad path in a list).
    fn value_problem(&self, field: &str, message: impl Into<String>) -> Problem {
        let pos = self.doc.value_pos(field);
        Problem {
            line: pos.line,
            column: pos.column,
            ..self.problem(field, message)
        }
    }

    fn team_field(&self) -> Option<&str> {
        match &self.spec {
            Spec::Team(_) => Some(&self.name),
            Spec::MainSession(s) => s.team.as_deref(),
            Spec::AccessGrant(s) => s.team.as_deref(),
            Spec::Member(s) => s.team.as_deref(),
        }
    }
}

/// Objects that were found but could not be read, by kind and name: references to them are
/// not reported again as missing.
type Broken = BTreeSet<(Kind, String)>;

/// Checks `sources` against every rule; the model when all pass, else every problem found.
/// `applied` are the teams in the store: the manifests' grants must not reach their
/// transcripts, nor their grants the manifests' transcripts, and their members' memory counts
/// toward admission. A team the manifests define again is replaced by them.
pub fn validate(
    sources: &[Source],
    host: &Host,
    applied: &[model::Team],
) -> Result<Model, Vec<Problem>> {
    let mut given: Vec<PathBuf> = Vec::new();
    for g in sources.iter().filter_map(|s| s.given.as_ref()) {
        if !given.contains(g) {
            given.push(g.clone());
        }
    }
    validate_given(sources, &given, host, applied)
}

/// `validate`, with every `-f` path (`load::given_path`) protected, also those where no
/// manifest is yet: a member must not be able to add one there.
pub(crate) fn validate_given(
    sources: &[Source],
    given: &[PathBuf],
    host: &Host,
    applied: &[model::Team],
) -> Result<Model, Vec<Problem>> {
    let started = Instant::now();
    let mut problems = Vec::new();
    let mut broken = Broken::new();
    let objects = shape::read_objects(sources, &mut problems, &mut broken);
    let desired = build(&objects, &broken, host, applied, given, &mut problems);
    // Report in reading order: by file as given, then by place in the file.
    let order: BTreeMap<&Path, usize> = sources
        .iter()
        .enumerate()
        .map(|(i, s)| (s.path.as_path(), i))
        .collect();
    problems.sort_by_key(|p| (order.get(p.file.as_path()).copied(), p.line, p.column));
    let problems: Vec<Problem> = problems
        .into_iter()
        .map(|p| match order.get(p.file.as_path()) {
            Some(&i) => p.with_source(&sources[i].text),
            None => p,
        })
        .collect();
    info!(
        files = sources.len(),
        objects = objects.len(),
        applied_teams = applied.len(),
        problems = problems.len(),
        elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
        "manifests judged"
    );
    if problems.is_empty() {
        Ok(desired)
    } else {
        Err(problems)
    }
}

/// What the stages after parsing share: the machine, the store, the objects that could not be
/// read, what grants and transcripts folders must keep clear of, the members' memory so far,
/// and the problems they all add to, in the order they find them.
struct Build<'a> {
    host: &'a Host,
    applied: &'a [model::Team],
    /// The `-f` paths: the model's teams record them, and no member may write there.
    given: &'a [PathBuf],
    broken: &'a Broken,
    fence: Fence<'a>,
    admission: Admission,
    /// Workspaces judged so far: checked against every write grant once all are built.
    workspaces: Vec<workspaces::Made>,
    /// The manifests' members that write, as `members` builds them (`writers`).
    writers: Vec<writers::Writer>,
    /// Images built from a repository, judged so far: checked against every write grant once
    /// all are built (`images::writable_builds`).
    builds: Vec<images::Built>,
    problems: &'a mut Vec<Problem>,
}

/// One team and its objects by kind, as the stages after `teams` read them.
struct TeamObjects<'o> {
    team: &'o Parsed<'o>,
    spec: &'o raw::TeamSpec,
    session_dir: PathBuf,
    /// In reading order.
    sessions: Vec<(&'o Parsed<'o>, &'o raw::MainSessionSpec)>,
    /// In reading order.
    grants: Vec<(&'o Parsed<'o>, &'o raw::AccessGrantSpec)>,
    /// By name.
    members: BTreeMap<&'o str, (&'o Parsed<'o>, &'o raw::MemberSpec)>,
}

/// The stages after parsing: teams, then team by team its sessions, grants and members, with
/// their limits.
fn build(
    objects: &[Parsed],
    broken: &Broken,
    host: &Host,
    applied: &[model::Team],
    given: &[PathBuf],
    problems: &mut Vec<Problem>,
) -> Model {
    let grouped = teams::group(objects, broken, problems);
    let redefined = grouped.redefined(broken);
    let engine_dirs: Vec<EngineDir> = engines::defaults()
        .into_iter()
        .chain(host.engine_dirs.get().iter().cloned())
        .collect();
    let mut stages = Build {
        host,
        applied,
        given,
        broken,
        fence: Fence::new(
            &host.state_dir,
            &host.agents_dir(),
            &engine_dirs,
            applied,
            &redefined,
            given,
        ),
        admission: Admission::new(host, applied, &redefined),
        workspaces: Vec::new(),
        writers: Vec::new(),
        builds: Vec::new(),
        problems,
    };
    let mut desired = Model::default();
    for t in stages.teams(grouped) {
        let team = stages.team(t);
        desired.teams.push(team);
    }
    let teams: Vec<&model::Team> = desired
        .teams
        .iter()
        .chain(
            applied
                .iter()
                .filter(|t| !redefined.contains(&t.name.as_str())),
        )
        .collect();
    let made = std::mem::take(&mut stages.workspaces);
    workspaces::writable_repositories(made, &teams, stages.problems);
    let builds = std::mem::take(&mut stages.builds);
    images::writable_builds(builds, &teams, stages.problems);
    stages.one_writer_per_folder(objects, &redefined);
    desired
}

impl Build<'_> {
    /// One team through its stages, in the order their problems are reported.
    fn team(&mut self, t: TeamObjects) -> model::Team {
        let mut team = self.team_model(&t);
        team.sessions = self.sessions(&t);
        let grants = self.grants(&t);
        team.grants = grants.values().cloned().collect();
        team.members = self.members(&t, &team, &grants);
        team
    }
}

// Checks of one value, for several stages.

fn root_user_refused(u: UserId) -> String {
    format!(
        "`{u}` is root: a member running as uid or gid 0 owns every root-owned file in its grants; use an unprivileged UID:GID, or set `allowRootUser: true` in the Team to say you mean it"
    )
}

/// A socket path built from names must fit in `sun_path`. Names are at most 63 bytes each, but
/// the state folder may be long, so the whole path is checked with the real state folder.
fn check_socket_path(what: &str, path: &Path) -> Result<(), String> {
    let len = path.as_os_str().len();
    if len <= MAX_SOCKET_PATH {
        return Ok(());
    }
    Err(format!(
        "the {what} socket path `{}` is {len} bytes, longer than the {MAX_SOCKET_PATH} a Unix socket path can hold; use a shorter name or a shorter --state-dir",
        path.display()
    ))
}

fn check_image(image: &str) -> Result<(), String> {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        Err(format!(
            "`{image}` is not an image reference (example: ateam-demo:latest)"
        ))
    } else {
        Ok(())
    }
}

/// Whether `name` is one a manifest may give (`check_dns_label`): what a label read back from
/// the engine must be before it names a member's folders.
pub(crate) fn is_name(name: &str) -> bool {
    check_dns_label(name).is_ok()
}

/// Kubernetes' rule for names (DNS-1123 labels): a name becomes part of container names,
/// hostnames and paths.
fn check_dns_label(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a valid name: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// A name a shell can export, and not one of the ATEAM_ names ateam sets itself.
pub(super) fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(format!("`{name}` is not a valid environment variable name"));
    }
    if name.starts_with("ATEAM_") {
        return Err(format!(
            "`{name}`: names starting with ATEAM_ are set by ateam itself"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_every_identifier_made_from_them() {
        let longest = "a".repeat(63);
        assert!(check_dns_label(&longest).is_ok());
        assert!(check_dns_label(&"a".repeat(64)).is_err());
        // Neither engine limits the length of a container name (only its characters); the
        // longest ateam makes, a replacement's, stays well within any DNS-name-sized limit.
        let name = crate::core::container::replacement_name(
            &crate::core::container::container_name(&longest, &longest),
        );
        assert_eq!(name.len(), 138);
        // Socket paths: 107 bytes fit in sun_path with the NUL, 108 do not.
        let path = |len: usize| PathBuf::from(format!("/{}", "s".repeat(len - 1)));
        assert!(check_socket_path("tmux", &path(107)).is_ok());
        let e = check_socket_path("tmux", &path(108)).unwrap_err();
        assert!(e.contains("is 108 bytes, longer than the 107"), "{e}");
    }

    #[test]
    fn a_kind_is_read_from_its_own_name_only() {
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
        }
        let e = "Membr".parse::<Kind>().unwrap_err();
        assert!(e.contains("(did you mean `Member`?)"), "{e}");
        assert!("member".parse::<Kind>().is_err());
        assert!("".parse::<Kind>().is_err());
    }
}
