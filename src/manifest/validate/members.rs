//! Members: first what they refer to (parent, grant), then where each sits in the team's tree
//! (depth, cycles, how many), then each member on its own, its access within its parent's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::grants::narrower;
use super::images::Defined;
use super::writers::Writer;
use super::{
    Build, Kind, Parsed, TeamObjects, check_env_name, check_image, check_socket_path,
    root_user_refused,
};
use crate::core::agents::{AgentKind, AgentLogin};
use crate::core::container::ContainerRuntime;
use crate::core::env::reserved_env;
use crate::core::layout::{egress_socket_path, transcript_dir};
use crate::manifest::paths::{check_dir, resolve, within};
use crate::manifest::{did_you_mean, raw, rules};
use crate::model::{self, AccessGrant, Network, Parent, UserId};

/// A team as each of its members is judged against it.
struct Tree<'t, 'o> {
    t: &'t TeamObjects<'o>,
    grants: &'t BTreeMap<&'o str, AccessGrant>,
    /// Each member's parent, where it resolved.
    parents: BTreeMap<&'o str, Parent>,
    /// Each member's depth, where its parents lead to a main session.
    depth: BTreeMap<&'o str, u32>,
    /// Whom members run as unless they say otherwise.
    user: Option<UserId>,
}

impl Tree<'_, '_> {
    /// The grant a member names, as written (nothing when it names none).
    fn grant_of(&self, m: &raw::MemberSpec) -> AccessGrant {
        m.access
            .as_deref()
            .and_then(|a| self.grants.get(a))
            .cloned()
            .unwrap_or_else(AccessGrant::empty)
    }
}

impl Build<'_> {
    /// The team's members, by name. `team` has its sessions and grants already.
    pub(super) fn members(
        &mut self,
        t: &TeamObjects,
        team: &model::Team,
        grants: &BTreeMap<&str, AccessGrant>,
    ) -> Vec<model::Member> {
        let parents = self.parents(t, &team.sessions, grants);
        let depth = self.depths(t, team.max_depth, &parents);
        self.team_size(t, team.max_members);
        let tree = Tree {
            t,
            grants,
            parents,
            depth,
            user: team.user,
        };
        t.members
            .iter()
            .map(|(name, (o, m))| self.member(&tree, name, o, m))
            .collect()
    }

    /// Each member's parent, where it resolves; each parent or grant named that is not there
    /// is reported.
    fn parents<'o>(
        &mut self,
        t: &TeamObjects<'o>,
        sessions: &[model::MainSession],
        grants: &BTreeMap<&str, AccessGrant>,
    ) -> BTreeMap<&'o str, Parent> {
        let session_names: BTreeSet<&str> = sessions.iter().map(|s| s.name.as_str()).collect();
        // A removed session's name still leads to the one that took it over.
        let taken_over: BTreeMap<&str, &str> = sessions
            .iter()
            .filter_map(|s| Some((s.takes_over.as_deref()?, s.name.as_str())))
            .collect();
        let removed: BTreeSet<&str> = self
            .applied
            .iter()
            .filter(|a| a.name == t.team.name)
            .flat_map(|a| a.sessions.iter().map(|s| s.name.as_str()))
            .filter(|n| !session_names.contains(n) && !taken_over.contains_key(n))
            .collect();
        let mut parents = BTreeMap::new();
        for (name, (o, m)) in &t.members {
            match resolve_parent(&m.parent, &session_names, &taken_over, &t.members) {
                Ok(p) => {
                    parents.insert(*name, p);
                }
                Err(e) => self.unresolved_parent(t, o, m, &removed, e),
            }
            self.access_reference(t, o, m, grants);
        }
        parents
    }

    /// Reports a parent that did not resolve, unless it is an object that could not be read
    /// (reported already). Members left under a removed session are one mistake of the
    /// session's removal, and said so.
    fn unresolved_parent(
        &mut self,
        t: &TeamObjects,
        o: &Parsed,
        m: &raw::MemberSpec,
        removed: &BTreeSet<&str>,
        e: String,
    ) {
        // The parent's name, without a `Kind/` before it.
        let named = m.parent.rsplit('/').next().unwrap_or(&m.parent);
        if self.broken.contains(&(Kind::Member, named.to_string()))
            || self
                .broken
                .contains(&(Kind::MainSession, named.to_string()))
        {
            return;
        }
        if !removed.contains(named) {
            self.problems.push(o.value_problem("spec.parent", e));
            return;
        }
        let gone = named;
        let reporting: Vec<&str> = t
            .members
            .iter()
            .filter(|(_, (_, x))| x.parent.rsplit('/').next() == Some(gone))
            .map(|(n, _)| *n)
            .collect();
        self.problems.push(o.value_problem(
            "spec.parent",
            format!(
                "MainSession `{gone}` is removed, and members report to it: {}; a MainSession must take them over (`takesOver: {gone}`) in the same change, or they must go",
                reporting.join(", ")
            ),
        ));
    }

    /// The grant a member names must be one of its team's, unless it could not be read.
    fn access_reference(
        &mut self,
        t: &TeamObjects,
        o: &Parsed,
        m: &raw::MemberSpec,
        grants: &BTreeMap<&str, AccessGrant>,
    ) {
        if let Some(a) = &m.access
            && !grants.contains_key(a.as_str())
            && !self.broken.contains(&(Kind::AccessGrant, a.clone()))
        {
            let hint = did_you_mean(a, grants.keys().copied())
                .map(|m| format!(" (did you mean `{m}`?)"))
                .unwrap_or_default();
            self.problems.push(o.value_problem(
                "spec.access",
                format!(
                    "AccessGrant `{a}` is not defined in team `{}`{hint}",
                    t.team.name
                ),
            ));
        }
    }

    /// Each member's depth below its main session. Members deeper than the team allows, and
    /// cycles among members, are reported.
    fn depths<'o>(
        &mut self,
        t: &TeamObjects<'o>,
        max_depth: u32,
        parents: &BTreeMap<&'o str, Parent>,
    ) -> BTreeMap<&'o str, u32> {
        let mut depth = BTreeMap::new();
        for (name, (o, _)) in &t.members {
            match depth_of(name, parents) {
                Ok(0) => {}
                Ok(d) => {
                    depth.insert(*name, d);
                    if d > max_depth {
                        self.problems.push(o.value_problem(
                            "spec.parent",
                            format!(
                                "`{name}` is at depth {d}, deeper than the team's maxDepth {max_depth}"
                            ),
                        ));
                    }
                }
                Err(chain) => self.problems.push(o.value_problem(
                    "spec.parent",
                    format!("parents form a cycle: {}", chain.join(" -> ")),
                )),
            }
        }
        depth
    }

    /// A team has at most `maxMembers` members (10 unless written); past the default, the
    /// refusal points at the spec, as there is no field to point at.
    fn team_size(&mut self, t: &TeamObjects, max_members: u32) {
        if t.members.len() as u32 > max_members {
            let field = if t.spec.max_members.is_some() {
                "spec.maxMembers"
            } else {
                "spec"
            };
            self.problems.push(t.team.problem(
                field,
                format!(
                    "team `{}` has {} members, more than maxMembers {}; to allow more, set spec.maxMembers explicitly",
                    t.team.name,
                    t.members.len(),
                    max_members
                ),
            ));
        }
    }

    /// One member, judged on its own and against its parent, as the model has it.
    fn member(
        &mut self,
        tree: &Tree,
        name: &str,
        o: &Parsed,
        m: &raw::MemberSpec,
    ) -> model::Member {
        let t = tree.t;
        let transcript_dir = transcript_dir(&t.session_dir, name);
        let mut access = tree.grant_of(m);
        let workspace = m
            .workspace
            .as_ref()
            .and_then(|w| self.member_workspace(&t.team.name, &t.session_dir, name, o, w));
        let cwd = self.member_cwd(o, m, &access, &transcript_dir, workspace.as_ref());
        // `agent:` is a command and an environment: judged as if the manifest said them.
        let (expanded, mut agent) = match &m.agent {
            Some(a) => {
                let tools = t.spec.board || t.spec.helper_requests;
                self.member_agent(o, m, a, &transcript_dir, &cwd, tools)
            }
            None => (None, None),
        };
        // Its agent reaches its model host without the person granting it.
        if let (Some(a), Some(raw_agent)) = (agent.as_mut(), &m.agent) {
            self.agent_egress(o, raw_agent, a, &mut access);
        }
        self.member_within_parent(tree, name, o, &access);
        let m = expanded.as_ref().unwrap_or(m);
        let login = agent
            .as_ref()
            .filter(|a| a.login == AgentLogin::Subscription)
            .and_then(|a| AgentKind::parse(&a.name))
            .map(AgentKind::login);
        for (field, why) in rules::login_problems(&access, login) {
            self.problems.push(o.value_problem(field, why));
        }
        let (image, image_build) = self.member_runs(t, name, o, m);
        if let Some(b) = &image_build {
            self.note_build(format!("{}/{name}", t.team.name), o, b);
        }
        let snapshot_writes = self.member_snapshot_writes(o, m, &access);
        self.member_env(o, m, &access);
        let resources = self.resources(o, &m.resources);
        let user = self.member_user(tree, o, m);
        let runtime = self.member_runtime(t, o, m, &access);
        self.admit(o, resources.memory_bytes);
        let member = model::Member {
            name: name.to_string(),
            user,
            parent: tree
                .parents
                .get(name)
                .cloned()
                .unwrap_or(Parent::MainSession(String::new())),
            depth: tree.depth.get(name).copied().unwrap_or(1),
            access,
            image,
            // What ateam builds is on the engine or built: never pulled.
            image_pull_policy: match image_build {
                Some(_) => model::PullPolicy::Never,
                None => m
                    .image_pull_policy
                    .or(t.spec.image_pull_policy)
                    .unwrap_or_default(),
            },
            image_build,
            command: m.command.clone(),
            cwd,
            env: m.env.clone(),
            secret_env: m.secret_env.clone(),
            memory_bytes: resources.memory_bytes,
            pids: resources.pids,
            nano_cpus: resources.nano_cpus,
            restart: m.restart,
            labels: o.labels.clone(),
            transcript_dir,
            workspace,
            agent,
            snapshot_writes,
            origin: model::Origin::Manifest,
            share_writes: m.share_writes,
            runtime,
        };
        let at = o.value_problem("spec.access", String::new());
        self.writers
            .extend(Writer::of(&t.team.name, &member, Some(at)));
        member
    }

    /// The member's grant (its agent's model host included) must be the same as or narrower
    /// than its parent member's (the parent's agent's model host included).
    fn member_within_parent(&mut self, tree: &Tree, name: &str, o: &Parsed, access: &AccessGrant) {
        let Some(Parent::Member(p)) = tree.parents.get(name) else {
            return;
        };
        let parent_grant = match tree.t.members.get(p.as_str()) {
            Some((po, pm)) => self.effective_grant(po, pm, tree.grant_of(pm)),
            None => AccessGrant::empty(),
        };
        if let Err((field, why)) = narrower(access, &parent_grant) {
            self.problems.push(o.value_problem(
                "spec.access",
                format!("grant `{}` {why} (`{p}`, grant `{}`: {field}); a member's access must be the same as or narrower than its parent's", access.name, parent_grant.name),
            ));
        }
    }

    /// What the member runs: its image (returned; the team's when it names none), a command
    /// that names a program, and an egress socket path that fits.
    fn member_runs(
        &mut self,
        t: &TeamObjects,
        name: &str,
        o: &Parsed,
        m: &raw::MemberSpec,
    ) -> (String, Option<model::ImageBuild>) {
        let own = m
            .image
            .clone()
            .or_else(|| t.spec.image.clone().map(raw::ImageSpec::Name));
        let image = match own {
            Some(raw::ImageSpec::Name(i)) => {
                if let Err(e) = check_image(&i) {
                    self.problems.push(o.value_problem("spec.image", e));
                }
                (i, None)
            }
            Some(raw::ImageSpec::Defined(d)) => match self.defined_image(o, &d) {
                Some(Defined::Name(i)) => (i, None),
                Some(Defined::Build(tag, b)) => (tag, Some(b)),
                None => (String::new(), None),
            },
            // The Team's own did not fit (reported there): no second word for it here.
            None if self.broken.contains(&(Kind::Team, t.team.name.clone())) => {
                (String::new(), None)
            }
            None => {
                self.problems.push(o.problem(
                    "spec",
                    "no image: set spec.image here or a default spec.image on the Team",
                ));
                (String::new(), None)
            }
        };
        let problems = &mut *self.problems;
        let socket = egress_socket_path(&self.host.state_dir, &t.team.name, name);
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
        image
    }

    /// Where the member starts: inside its grants, workspace or transcript folder, as only
    /// those are mounted; by default its workspace, else its first written folder, else its
    /// first read one, else its transcript folder.
    fn member_cwd(
        &mut self,
        o: &Parsed,
        m: &raw::MemberSpec,
        access: &AccessGrant,
        transcript_dir: &Path,
        workspace: Option<&model::Workspace>,
    ) -> PathBuf {
        let ws = workspace.map(|w| w.path.as_path());
        let Some(c) = &m.cwd else {
            return ws
                .or(access.write.first().map(PathBuf::as_path))
                .or(access.read.first().map(PathBuf::as_path))
                .unwrap_or(transcript_dir)
                .to_path_buf();
        };
        let p = resolve(c, &o.src.dir, &self.host.home);
        let made = within(&p, transcript_dir) || ws.is_some_and(|w| within(&p, w));
        let inside = access
            .read
            .iter()
            .chain(&access.write)
            .any(|g| within(&p, g))
            || made;
        if !inside {
            self.problems.push(o.value_problem(
                "spec.cwd",
                format!(
                    "`{}` is not inside the member's grants, workspace or transcript folder",
                    p.display()
                ),
            ));
        } else if !made && let Err(e) = check_dir(&p) {
            self.problems.push(o.value_problem("spec.cwd", e));
        }
        p
    }

    /// The member's environment: names it may set (some are ateam's, or the proxy's when its
    /// network goes through it), secrets apart from plain values, and every secret its grant
    /// injects declared.
    fn member_env(&mut self, o: &Parsed, m: &raw::MemberSpec, access: &AccessGrant) {
        let problems = &mut *self.problems;
        let proxied = matches!(access.network, Network::Allow(_));
        for k in m.env.keys() {
            if let Err(e) = check_env_name(k) {
                problems.push(o.problem(&format!("spec.env.{k}"), e));
            } else if let Some(why) = reserved_env(k, proxied) {
                problems.push(o.problem(&format!("spec.env.{k}"), why));
            }
        }
        for (i, k) in m.secret_env.iter().enumerate() {
            let field = format!("spec.secretEnv[{i}]");
            if let Err(e) = check_env_name(k) {
                problems.push(o.value_problem(&field, e));
            } else if let Some(why) = reserved_env(k, proxied) {
                problems.push(o.value_problem(&field, why));
            } else if m.env.contains_key(k) {
                problems.push(o.value_problem(&field, format!("`{k}` is in both env and secretEnv; a secret must not also be a plain value")));
            }
        }
        for why in rules::undeclared_secrets(access, &m.secret_env) {
            let field = if m.secret_env.is_empty() {
                "spec.access"
            } else {
                "spec.secretEnv"
            };
            problems.push(o.value_problem(field, why));
        }
    }

    /// The runtime the member runs under: its own `runtime`, else the team's. A member under
    /// gVisor has loopback and its egress socket, never a network of its own: runsc runs with
    /// `--network=none` (docs/gvisor.md), so `network: open` is refused.
    fn member_runtime(
        &mut self,
        t: &TeamObjects,
        o: &Parsed,
        m: &raw::MemberSpec,
        access: &AccessGrant,
    ) -> ContainerRuntime {
        let runtime = m.runtime.or(t.spec.runtime).unwrap_or_default();
        if runtime == ContainerRuntime::Gvisor && access.network == Network::Open {
            let (field, whose) = match m.runtime {
                Some(_) => ("spec.runtime", "its `runtime: gvisor`".to_string()),
                None => (
                    "spec.access",
                    format!("its team's `runtime: gvisor` (Team `{}`)", t.team.name),
                ),
            };
            self.problems.push(o.value_problem(
                field,
                format!(
                    "grant `{}` gives `network: open`, which {whose} cannot run: a member under gVisor reaches the network only through its egress proxy (`network: {{allow: [...]}}`)",
                    access.name
                ),
            ));
        }
        runtime
    }

    /// Whom the member runs as: its own `user`, else the team's.
    fn member_user(&mut self, tree: &Tree, o: &Parsed, m: &raw::MemberSpec) -> Option<UserId> {
        match m.user.as_deref().map(str::parse::<UserId>) {
            Some(Ok(u)) => {
                if u.is_root() && !tree.t.spec.allow_root_user {
                    self.problems
                        .push(o.value_problem("spec.user", root_user_refused(u)));
                }
                Some(u)
            }
            Some(Err(e)) => {
                self.problems.push(o.value_problem("spec.user", e));
                None
            }
            None => tree.user,
        }
    }
}

/// How deep `name` is below its main session, 0 when a parent up its chain did not resolve
/// (reported already); or the chain that makes a cycle.
fn depth_of<'a>(name: &'a str, parents: &'a BTreeMap<&str, Parent>) -> Result<u32, Vec<&'a str>> {
    let mut chain = vec![name];
    let mut cur = name;
    loop {
        match parents.get(cur) {
            Some(Parent::MainSession(_)) => return Ok(chain.len() as u32),
            Some(Parent::Member(p)) => {
                if chain.contains(&p.as_str()) {
                    chain.push(p);
                    return Err(chain);
                }
                chain.push(p);
                cur = p;
            }
            None => return Ok(0),
        }
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

/// The member or session `parent` names. A session taken over still names its heir, unless
/// `Member/` says otherwise or a member has that name.
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
