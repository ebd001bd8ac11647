//! Teams: which team each object belongs to, each object once, and each team's own settings
//! (transcripts folder, user, image), judged before any of its objects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Broken, Build, Kind, Parsed, Spec, TeamObjects, check_image, root_user_refused};
use crate::host::Host;
use crate::manifest::paths::{check_dir, resolve};
use crate::manifest::{Problem, did_you_mean, raw};
use crate::model::{self, UserId};

const DEFAULT_MAX_MEMBERS: u32 = 10;
const DEFAULT_MAX_DEPTH: u32 = 3;

/// The objects sorted into their teams, each object once.
pub(super) struct Grouped<'o> {
    /// Each Team by its first definition, in reading order.
    teams: Vec<(&'o Parsed<'o>, &'o raw::TeamSpec)>,
    /// Each team's objects (its Team among them), in reading order.
    by_team: BTreeMap<String, Vec<&'o Parsed<'o>>>,
}

impl<'o> Grouped<'o> {
    /// Teams these manifests define (also those that could not be read) replace their stored
    /// versions; the store's other teams stay as they are.
    pub(super) fn redefined<'b>(&self, broken: &'b Broken) -> Vec<&'b str>
    where
        'o: 'b,
    {
        self.teams
            .iter()
            .map(|(t, _)| t.name.as_str())
            .chain(
                broken
                    .iter()
                    .filter(|(k, _)| *k == Kind::Team)
                    .map(|(_, n)| n.as_str()),
            )
            .collect()
    }
}

/// Sorts `objects` into their teams. A Team defined twice counts once here (the second is
/// reported with the other objects defined twice), so that its copy's objects are not also
/// refused for naming "several teams".
pub(super) fn group<'o>(
    objects: &'o [Parsed<'o>],
    broken: &Broken,
    problems: &mut Vec<Problem>,
) -> Grouped<'o> {
    let mut teams: Vec<(&Parsed, &raw::TeamSpec)> = Vec::new();
    for o in objects {
        let spec = match &o.spec {
            Spec::Team(spec) => spec,
            Spec::MainSession(_) | Spec::AccessGrant(_) | Spec::Member(_) => continue,
        };
        if !teams.iter().any(|(t, _)| t.name == o.name) {
            teams.push((o, spec));
        }
    }
    let team_names: Vec<&str> = teams.iter().map(|(t, _)| t.name.as_str()).collect();
    let mut seen: BTreeMap<(String, Kind, String), &Parsed> = BTreeMap::new();
    // Objects defined again: (the second, the first, their team).
    let mut twice: Vec<(&Parsed, &Parsed, String)> = Vec::new();
    let mut by_team: BTreeMap<String, Vec<&Parsed>> = BTreeMap::new();
    for o in objects {
        let Some(team) = team_of(o, &team_names, broken, problems) else {
            continue;
        };
        let key = (team.clone(), o.kind(), o.name.clone());
        if let Some(first) = seen.get(&key) {
            twice.push((o, *first, team));
            continue;
        }
        seen.insert(key, o);
        by_team.entry(team).or_default().push(o);
    }
    report_twice(&twice, problems);
    Grouped { teams, by_team }
}

/// The team `o` belongs to: the one it names, or the only one. `None` when there is none to
/// give it, reported here unless its Team could not be read (reported already).
fn team_of(
    o: &Parsed,
    team_names: &[&str],
    broken: &Broken,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    match o.team_field() {
        Some(t) if team_names.contains(&t) => Some(t.to_string()),
        Some(t) if broken.contains(&(Kind::Team, t.to_string())) => None,
        None if team_names.is_empty() && broken.iter().any(|(k, _)| *k == Kind::Team) => None,
        Some(t) => {
            let hint = did_you_mean(t, team_names.iter().copied())
                .map(|m| format!(" (did you mean `{m}`?)"))
                .unwrap_or_default();
            problems.push(o.value_problem(
                "spec.team",
                format!("team `{t}` is not defined in these manifests{hint}"),
            ));
            None
        }
        None if team_names.len() == 1 => Some(team_names[0].to_string()),
        None if team_names.is_empty() => {
            problems.push(o.problem(
                "spec",
                "no Team in these manifests: add a `kind: Team` object or name one in spec.team",
            ));
            None
        }
        None => {
            problems.push(o.problem(
                "spec",
                format!(
                    "several teams are defined ({}); say which with spec.team",
                    team_names.join(", ")
                ),
            ));
            None
        }
    }
}

/// One problem per pair of files for objects defined twice: a copy of a manifest (`team
/// copy.yaml` beside `team.yaml`, both read from the folder) is one mistake, reported at the
/// first object it repeats, naming both places and how many more it repeats.
fn report_twice(twice: &[(&Parsed, &Parsed, String)], problems: &mut Vec<Problem>) {
    let mut pairs: Vec<(&Path, &Path, Vec<usize>)> = Vec::new();
    for (i, (again, first, _)) in twice.iter().enumerate() {
        let key = (again.src.path.as_path(), first.src.path.as_path());
        match pairs.iter_mut().find(|(a, f, _)| (*a, *f) == key) {
            Some((_, _, members)) => members.push(i),
            None => pairs.push((key.0, key.1, vec![i])),
        }
    }
    for (again_file, first_file, members) in pairs {
        let (again, first, team) = &twice[members[0]];
        let pos = first.doc.pos_of("metadata.name");
        let within = if again.kind() == Kind::Team {
            String::new()
        } else {
            format!(" in team `{team}`")
        };
        let more = match members.len() - 1 {
            0 => String::new(),
            n => {
                let objects = if n == 1 { "object" } else { "objects" };
                if again_file == first_file {
                    format!("; so are {n} more {objects} in this file (the same documents twice?)")
                } else {
                    format!(
                        "; so are {n} more {objects} of this file, first defined in {} (a copy of the same manifests? keep one)",
                        first_file.display()
                    )
                }
            }
        };
        problems.push(again.problem(
            "metadata.name",
            format!(
                "{} is defined twice{within}; the first is at {}:{}{more}",
                again.id(),
                first.src.path.display(),
                pos.line
            ),
        ));
    }
}

impl<'o> TeamObjects<'o> {
    /// `objs` by kind; its Team is `team`.
    fn new(
        team: &'o Parsed<'o>,
        spec: &'o raw::TeamSpec,
        session_dir: PathBuf,
        objs: &[&'o Parsed<'o>],
    ) -> TeamObjects<'o> {
        let mut t = TeamObjects {
            team,
            spec,
            session_dir,
            sessions: Vec::new(),
            grants: Vec::new(),
            members: BTreeMap::new(),
        };
        for o in objs {
            match &o.spec {
                Spec::Team(_) => {}
                Spec::MainSession(s) => t.sessions.push((o, s)),
                Spec::AccessGrant(g) => t.grants.push((o, g)),
                Spec::Member(m) => {
                    t.members.insert(o.name.as_str(), (o, m));
                }
            }
        }
        t
    }
}

impl Build<'_> {
    /// Each team with its objects and its transcripts folder. The folders are judged for all
    /// teams before any team's objects, as each must keep clear of the others'.
    pub(super) fn teams<'o>(&mut self, grouped: Grouped<'o>) -> Vec<TeamObjects<'o>> {
        let mut teams = Vec::new();
        for (t, spec) in grouped.teams {
            let Some(objs) = grouped.by_team.get(&t.name) else {
                continue;
            };
            let session_dir = match &spec.session_dir {
                Some(d) => resolve(d, &t.src.dir, &self.host.home),
                None => self.host.home.join(".local/share/ateam").join(&t.name),
            };
            teams.push(TeamObjects::new(t, spec, session_dir, objs));
        }
        let session_dirs: Vec<(&str, PathBuf)> = teams
            .iter()
            .map(|t| (t.team.name.as_str(), t.session_dir.clone()))
            .collect();
        for t in &teams {
            let (name, dir) = (&t.team.name, &t.session_dir);
            match check_session_dir(dir, self.host)
                .and_then(|()| self.fence.check_session_dir(name, dir, &session_dirs))
                .and_then(|()| {
                    self.fence
                        .check_writable(&crate::core::layout::transcripts_dir(dir))
                }) {
                Ok(()) => self.fence.add_session_dir(name, dir),
                Err(e) => self
                    .problems
                    .push(t.team.value_problem("spec.sessionDir", e)),
            }
        }
        teams
    }

    /// The team's own settings, as the model has them; its sessions, grants and members are
    /// added by the stages after.
    pub(super) fn team_model(&mut self, t: &TeamObjects) -> model::Team {
        let spec = t.spec;
        let user = self.team_user(t);
        if let Some(img) = &spec.image
            && let Err(e) = check_image(img)
        {
            self.problems.push(t.team.value_problem("spec.image", e));
        }
        model::Team {
            name: t.team.name.clone(),
            labels: t.team.labels.clone(),
            backend: spec.backend,
            user,
            allow_root_user: spec.allow_root_user,
            image: spec.image.clone(),
            max_members: spec.max_members.unwrap_or(DEFAULT_MAX_MEMBERS),
            max_depth: spec.max_depth.unwrap_or(DEFAULT_MAX_DEPTH),
            session_dir: t.session_dir.clone(),
            allow_unenforced_limits: spec.allow_unenforced_limits,
            helper_requests: spec.helper_requests,
            board: spec.board,
            manifests: self.given.to_vec(),
            sessions: vec![],
            grants: vec![],
            members: vec![],
        }
    }

    /// Whom the team's members run as unless they say otherwise.
    fn team_user(&mut self, t: &TeamObjects) -> Option<UserId> {
        let user = t
            .spec
            .user
            .as_deref()
            .and_then(|u| match u.parse::<UserId>() {
                Ok(u) => Some(u),
                Err(e) => {
                    self.problems.push(t.team.value_problem("spec.user", e));
                    None
                }
            });
        if let Some(u) = user
            && u.is_root()
            && !t.spec.allow_root_user
        {
            self.problems
                .push(t.team.value_problem("spec.user", root_user_refused(u)));
        }
        // A root caller with no sudo user: the owner of the team's folder, whose files the
        // members are there to change, rather than nobody (who can write none of them).
        user.or_else(|| self.host.folder_owner_user(&t.team.src.dir))
    }
}

/// Folders a transcripts folder may neither be nor contain: the system's, or shared by every
/// user. Members' transcript folders are made in it, and each is mounted into its member.
const SESSION_NEVER: [&str; 7] = ["/", "/proc", "/dev", "/sys", "/run", "/var/run", "/tmp"];
/// Folders it may not lie inside either: the kernel's, and the runtime's (lost at reboot, and
/// where engines keep their sockets). A private folder made inside /tmp is fine for a
/// throwaway team.
const SESSION_NOT_INSIDE: [&str; 5] = ["/proc", "/dev", "/sys", "/run", "/var/run"];

/// The transcripts folder need not exist yet, but what exists of it must be a real directory
/// path (no symlink), and it must be a place of its own.
fn check_session_dir(dir: &Path, host: &Host) -> Result<(), String> {
    session_dir_place(dir, host)?;
    let mut existing = dir.to_path_buf();
    while !existing.exists() {
        if !existing.pop() {
            break;
        }
    }
    check_dir(&existing).map_err(|e| format!("transcripts folder: {e}"))
}

/// Where a transcripts folder may be, by name: not one of the shared folders themselves, not
/// around them, not inside the system's.
fn session_dir_place(dir: &Path, host: &Host) -> Result<(), String> {
    let shown = dir.display();
    let own = "choose a folder of its own, such as the default ~/.local/share/ateam/<team>";
    if SESSION_NEVER.iter().any(|f| dir == Path::new(f)) {
        return Err(format!(
            "`{shown}` is a folder the system or every user shares; {own}"
        ));
    }
    if dir == host.home {
        return Err(format!("`{shown}` is your home folder itself; {own}"));
    }
    if let Some(f) = SESSION_NEVER.iter().find(|f| Path::new(f).starts_with(dir)) {
        return Err(format!("`{shown}` contains {f}; {own}"));
    }
    if host.home.starts_with(dir) {
        return Err(format!(
            "`{shown}` contains your home folder {}; {own}",
            host.home.display()
        ));
    }
    if dir.starts_with(&host.state_dir) || host.state_dir.starts_with(dir) {
        return Err(format!(
            "`{shown}` overlaps ateam's own state folder {}",
            host.state_dir.display()
        ));
    }
    if let Some(f) = SESSION_NOT_INSIDE.iter().find(|f| dir.starts_with(f)) {
        return Err(format!("`{shown}` is inside {f}; {own}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_dir_places() {
        let host = Host {
            uid: 1000,
            gid: 1000,
            home: "/home/u".into(),
            memory_bytes: 1 << 34,
            state_dir: "/home/u/.local/state/ateam".into(),
            engine_dirs: Default::default(),
            sudo_user: None,
        };
        for (dir, refusal) in [
            (
                "/tmp",
                Some("`/tmp` is a folder the system or every user shares"),
            ),
            (
                "/run",
                Some("`/run` is a folder the system or every user shares"),
            ),
            (
                "/var/run",
                Some("`/var/run` is a folder the system or every user shares"),
            ),
            (
                "/proc",
                Some("`/proc` is a folder the system or every user shares"),
            ),
            ("/", Some("`/` is a folder the system or every user shares")),
            ("/home/u", Some("`/home/u` is your home folder itself")),
            ("/home", Some("`/home` contains your home folder /home/u")),
            ("/var", Some("`/var` contains /var/run")),
            (
                "/run/user/1000/s",
                Some("`/run/user/1000/s` is inside /run"),
            ),
            ("/sys/x", Some("`/sys/x` is inside /sys")),
            (
                "/home/u/.local/state",
                Some("overlaps ateam's own state folder"),
            ),
            ("/tmp/team-x", None),
            ("/home/u/.local/share/ateam/t", None),
            ("/srv/sessions", None),
        ] {
            let got = session_dir_place(Path::new(dir), &host);
            match refusal {
                None => assert_eq!(got, Ok(()), "{dir}"),
                Some(r) => assert!(got.as_ref().is_err_and(|e| e.contains(r)), "{dir}: {got:?}"),
            }
        }
    }
}
