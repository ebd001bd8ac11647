//! Every rule a set of manifests must pass, and the trusted model built from them.
//!
//! Rules run in stages (shape, names, references, grants, limits) and each stage reports all it
//! finds; a later stage only runs on objects an earlier one could read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use tracing::info;

use super::paths::{check_dir, resolve, within};
use super::quantity::{human_bytes, parse_cpus, parse_memory};
use super::raw::{self, Quantity};
use super::reach::Fence;
use super::rules;
use super::yaml::Document;
use super::{Problem, Source, did_you_mean};
use crate::core::layout::{MAX_SOCKET_PATH, egress_socket_path};
use crate::host::{EngineDir, Host, engines};
use crate::model::{self, AccessGrant, Desired, Network, Parent, UserId};

mod grants;
mod limits;
mod sessions;
mod shape;
mod teams;

pub(crate) use grants::narrower;
use limits::Admission;
pub use limits::{DEFAULT_MEMORY, MEMORY_SHARE};

const DEFAULT_PIDS: u32 = 512;

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

/// Checks `sources` against every rule; the model when all pass, else every problem found.
/// `applied` are the teams in the store: the manifests' grants must not reach their
/// transcripts, nor their grants the manifests' transcripts, and their members' memory counts
/// toward admission. A team the manifests define again is replaced by them.
pub fn validate(
    sources: &[Source],
    host: &Host,
    applied: &[model::Team],
) -> Result<Desired, Vec<Problem>> {
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
pub fn validate_given(
    sources: &[Source],
    given: &[PathBuf],
    host: &Host,
    applied: &[model::Team],
) -> Result<Desired, Vec<Problem>> {
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

/// Objects that were found but could not be read, by kind and name: references to them are
/// not reported again as missing.
type Broken = BTreeSet<(Kind, String)>;

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
) -> Desired {
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
        fence: Fence::new(&host.state_dir, &engine_dirs, applied, &redefined, given),
        admission: Admission::new(host, applied, &redefined),
        problems,
    };
    let mut desired = Desired::default();
    for t in stages.teams(grouped) {
        let team = stages.team(t);
        desired.teams.push(team);
    }
    desired
}

impl Build<'_> {
    fn team(&mut self, t: TeamObjects) -> model::Team {
        let mut team = self.team_model(&t);
        team.sessions = self.sessions(&t);
        let grants = self.grants(&t);
        team.grants = grants.values().cloned().collect();
        let team_user = team.user;
        let (host, applied, broken) = (self.host, self.applied, self.broken);
        let admission = &mut self.admission;
        let problems = &mut *self.problems;
        // Members: references first, then depth and narrowing along the parent chain.
        let members = &t.members;
        let session_names: BTreeSet<&str> = team.sessions.iter().map(|s| s.name.as_str()).collect();
        // A removed session's name still leads to the one that took it over.
        let taken_over: BTreeMap<&str, &str> = team
            .sessions
            .iter()
            .filter_map(|s| Some((s.takes_over.as_deref()?, s.name.as_str())))
            .collect();
        let removed_sessions: BTreeSet<&str> = applied
            .iter()
            .filter(|a| a.name == t.team.name)
            .flat_map(|a| a.sessions.iter().map(|s| s.name.as_str()))
            .filter(|n| !session_names.contains(n) && !taken_over.contains_key(n))
            .collect();
        let mut parents: BTreeMap<&str, Parent> = BTreeMap::new();
        let is_broken = |parent: &str| {
            let name = parent.rsplit('/').next().unwrap_or(parent).to_string();
            broken.contains(&(Kind::Member, name.clone()))
                || broken.contains(&(Kind::MainSession, name))
        };
        for (name, (o, m)) in members {
            match resolve_parent(&m.parent, &session_names, &taken_over, members) {
                Ok(p) => {
                    parents.insert(name, p);
                }
                Err(_) if is_broken(&m.parent) => {}
                Err(_) if removed_sessions.contains(m.parent.rsplit('/').next().unwrap_or("")) => {
                    let gone = m.parent.rsplit('/').next().unwrap_or("");
                    let reporting: Vec<&str> = members
                        .iter()
                        .filter(|(_, (_, x))| x.parent.rsplit('/').next() == Some(gone))
                        .map(|(n, _)| *n)
                        .collect();
                    problems.push(o.value_problem(
                        "spec.parent",
                        format!(
                            "MainSession `{gone}` is removed, and members report to it: {}; a MainSession must take them over (`takesOver: {gone}`) in the same change, or they must go",
                            reporting.join(", ")
                        ),
                    ));
                }
                Err(e) => problems.push(o.value_problem("spec.parent", e)),
            }
            if let Some(a) = &m.access
                && !grants.contains_key(a.as_str())
                && !broken.contains(&(Kind::AccessGrant, a.clone()))
            {
                let hint = did_you_mean(a, grants.keys().copied())
                    .map(|m| format!(" (did you mean `{m}`?)"))
                    .unwrap_or_default();
                problems.push(o.value_problem(
                    "spec.access",
                    format!(
                        "AccessGrant `{a}` is not defined in team `{}`{hint}",
                        t.team.name
                    ),
                ));
            }
        }
        // Depth, and cycles among members.
        let mut depth: BTreeMap<&str, u32> = BTreeMap::new();
        for name in members.keys() {
            let mut chain = vec![*name];
            let mut cur = *name;
            let d = loop {
                match parents.get(cur) {
                    Some(Parent::MainSession(_)) => break Some(chain.len() as u32),
                    Some(Parent::Member(p)) => {
                        if chain.contains(&p.as_str()) {
                            chain.push(p);
                            break None;
                        }
                        chain.push(p);
                        cur = p;
                    }
                    None => break Some(0), // unresolved parent: reported already
                }
            };
            match d {
                Some(0) => {}
                Some(d) => {
                    depth.insert(name, d);
                    if d > team.max_depth {
                        problems.push(members[name].0.value_problem(
                            "spec.parent",
                            format!(
                                "`{name}` is at depth {d}, deeper than the team's maxDepth {}",
                                team.max_depth
                            ),
                        ));
                    }
                }
                None => problems.push(members[name].0.value_problem(
                    "spec.parent",
                    format!("parents form a cycle: {}", chain.join(" -> ")),
                )),
            }
        }
        if members.len() as u32 > team.max_members {
            let field = if t.spec.max_members.is_some() {
                "spec.maxMembers"
            } else {
                "spec"
            };
            problems.push(t.team.problem(
                field,
                format!(
                    "team `{}` has {} members, more than maxMembers {}; to allow more, set spec.maxMembers explicitly",
                    t.team.name,
                    members.len(),
                    team.max_members
                ),
            ));
        }

        for (name, (o, m)) in members {
            let access = m
                .access
                .as_deref()
                .and_then(|a| grants.get(a))
                .cloned()
                .unwrap_or_else(AccessGrant::empty);
            if let Some(Parent::Member(p)) = parents.get(name) {
                let parent_access = members
                    .get(p.as_str())
                    .and_then(|(_, pm)| pm.access.as_deref())
                    .and_then(|a| grants.get(a));
                let parent_grant = parent_access.cloned().unwrap_or_else(AccessGrant::empty);
                if let Err((field, why)) = narrower(&access, &parent_grant) {
                    problems.push(o.value_problem(
                        "spec.access",
                        format!("grant `{}` {why} (`{p}`, grant `{}`: {field}); a member's access must be the same as or narrower than its parent's", access.name, parent_grant.name),
                    ));
                }
            }
            let image = match m.image.clone().or_else(|| t.spec.image.clone()) {
                Some(i) => {
                    if let Err(e) = check_image(&i) {
                        problems.push(o.value_problem("spec.image", e));
                    }
                    i
                }
                None => {
                    problems.push(o.problem(
                        "spec",
                        "no image: set spec.image here or a default spec.image on the Team",
                    ));
                    String::new()
                }
            };
            let socket = egress_socket_path(&host.state_dir, &t.team.name, name);
            if let Err(e) = check_socket_path("egress", &socket) {
                problems.push(o.problem("metadata.name", e));
            }
            if let Some(c) = &m.command
                && (c.is_empty() || c[0].trim().is_empty())
            {
                problems.push(o.problem(
                    "spec.command",
                    "the command must name a program; leave it out to use the image's own",
                ));
            }
            let transcript_dir = crate::core::layout::transcript_dir(&t.session_dir, name);
            let cwd = match &m.cwd {
                Some(c) => {
                    let p = resolve(c, &o.src.dir, &host.home);
                    let inside = access
                        .read
                        .iter()
                        .chain(&access.write)
                        .any(|g| within(&p, g))
                        || within(&p, &transcript_dir);
                    if !inside {
                        problems.push(o.value_problem(
                            "spec.cwd",
                            format!(
                                "`{}` is not inside the member's grants or transcript folder",
                                p.display()
                            ),
                        ));
                    } else if !within(&p, &transcript_dir)
                        && let Err(e) = check_dir(&p)
                    {
                        problems.push(o.value_problem("spec.cwd", e));
                    }
                    p
                }
                None => access
                    .write
                    .first()
                    .or(access.read.first())
                    .cloned()
                    .unwrap_or_else(|| transcript_dir.clone()),
            };
            let proxied = matches!(access.network, Network::Allow(_));
            for k in m.env.keys() {
                if let Err(e) = check_env_name(k) {
                    problems.push(o.problem(&format!("spec.env.{k}"), e));
                } else if let Some(why) = crate::plan::spec::reserved_env(k, proxied) {
                    problems.push(o.problem(&format!("spec.env.{k}"), why));
                }
            }
            for (i, k) in m.secret_env.iter().enumerate() {
                if let Err(e) = check_env_name(k) {
                    problems.push(o.value_problem(&format!("spec.secretEnv[{i}]"), e));
                } else if let Some(why) = crate::plan::spec::reserved_env(k, proxied) {
                    problems.push(o.value_problem(&format!("spec.secretEnv[{i}]"), why));
                } else if m.env.contains_key(k) {
                    problems.push(o.value_problem(&format!("spec.secretEnv[{i}]"), format!("`{k}` is in both env and secretEnv; a secret must not also be a plain value")));
                }
            }
            for why in rules::undeclared_secrets(&access, &m.secret_env) {
                let field = if m.secret_env.is_empty() {
                    "spec.access"
                } else {
                    "spec.secretEnv"
                };
                problems.push(o.value_problem(field, why));
            }
            let memory_bytes = match &m.resources.memory {
                None => DEFAULT_MEMORY,
                Some(q) => match parse_memory(&quantity_text(q)) {
                    Ok(b) if b >= 6 << 20 => b,
                    Ok(b) => {
                        problems.push(o.value_problem(
                            "spec.resources.memory",
                            format!("{} is below the engines' minimum of 6MiB", human_bytes(b)),
                        ));
                        DEFAULT_MEMORY
                    }
                    Err(e) => {
                        problems.push(o.value_problem("spec.resources.memory", e));
                        DEFAULT_MEMORY
                    }
                },
            };
            let nano_cpus = match &m.resources.cpus {
                None => None,
                Some(q) => match parse_cpus(&quantity_text(q)) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        problems.push(o.value_problem("spec.resources.cpus", e));
                        None
                    }
                },
            };
            let pids = m.resources.pids.unwrap_or(DEFAULT_PIDS);
            if pids < 8 {
                problems.push(o.value_problem(
                    "spec.resources.pids",
                    format!("pids {pids} is too low to start anything; use at least 8"),
                ));
            }
            let user = match m.user.as_deref().map(str::parse::<UserId>) {
                Some(Ok(u)) => {
                    if u.is_root() && !t.spec.allow_root_user {
                        problems.push(o.value_problem("spec.user", root_user_refused(u)));
                    }
                    Some(u)
                }
                Some(Err(e)) => {
                    problems.push(o.value_problem("spec.user", e));
                    None
                }
                None => team_user,
            };
            if let Err(e) = admission.admit(memory_bytes) {
                problems.push(o.value_problem("spec.resources.memory", e));
            }
            team.members.push(model::Member {
                name: name.to_string(),
                user,
                parent: parents
                    .get(name)
                    .cloned()
                    .unwrap_or(Parent::MainSession(String::new())),
                depth: depth.get(name).copied().unwrap_or(1),
                access,
                image,
                command: m.command.clone(),
                cwd,
                env: m.env.clone(),
                secret_env: m.secret_env.clone(),
                memory_bytes,
                pids,
                nano_cpus,
                restart: m.restart,
                image_pull_policy: m
                    .image_pull_policy
                    .or(t.spec.image_pull_policy)
                    .unwrap_or_default(),
                labels: o.labels.clone(),
                transcript_dir,
                origin: model::Origin::Manifest,
            });
        }
        team
    }
}

fn root_user_refused(u: UserId) -> String {
    format!(
        "`{u}` is root: a member running as uid or gid 0 owns every root-owned file in its grants; use an unprivileged UID:GID, or set `allowRootUser: true` in the Team to say you mean it"
    )
}

fn quantity_text(q: &Quantity) -> String {
    match q {
        Quantity::Text(s) => s.clone(),
        Quantity::Number(n) => n.to_string(),
    }
}

/// The kind a member's `parent` names: `MainSession/x`, `Member/x`, or a bare `x` for either.
#[derive(Debug, Clone, Copy)]
enum ParentKind<'a> {
    MainSession,
    Member,
    Either,
    /// A kind that is never a parent, as written.
    Other(&'a str),
}

fn resolve_parent(
    parent: &str,
    sessions: &BTreeSet<&str>,
    taken_over: &BTreeMap<&str, &str>,
    members: &BTreeMap<&str, (&Parsed, &raw::MemberSpec)>,
) -> Result<Parent, String> {
    let (kind, name) = match parent.split_once('/') {
        Some(("MainSession", n)) => (ParentKind::MainSession, n),
        Some(("Member", n)) => (ParentKind::Member, n),
        Some((k, n)) => (ParentKind::Other(k), n),
        None => (ParentKind::Either, parent),
    };
    if let Some(heir) = taken_over.get(name)
        && !matches!(kind, ParentKind::Member)
        && !members.contains_key(name)
    {
        return Ok(Parent::MainSession(heir.to_string()));
    }
    let is_session = sessions.contains(name);
    let is_member = members.contains_key(name);
    match (kind, is_session, is_member) {
        (ParentKind::MainSession, true, _) | (ParentKind::Either, true, false) => {
            Ok(Parent::MainSession(name.into()))
        }
        (ParentKind::Member, _, true) | (ParentKind::Either, false, true) => {
            Ok(Parent::Member(name.into()))
        }
        (ParentKind::Either, true, true) => Err(format!(
            "`{name}` is both a MainSession and a Member; write `MainSession/{name}` or `Member/{name}`"
        )),
        (ParentKind::Other(k), _, _) => {
            Err(format!("a parent is a MainSession or a Member, not a {k}"))
        }
        (ParentKind::MainSession, false, _)
        | (ParentKind::Member, _, false)
        | (ParentKind::Either, false, false) => {
            let candidates = sessions.iter().copied().chain(members.keys().copied());
            let hint = did_you_mean(name, candidates)
                .map(|m| format!(" (did you mean `{m}`?)"))
                .unwrap_or_default();
            Err(format!(
                "parent `{parent}` is not a MainSession or Member of this team{hint}"
            ))
        }
    }
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
