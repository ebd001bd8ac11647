//! Requests judged by the manifests' rules, without an engine: a team is validated from
//! YAML in a temporary folder, then requests from its member `a` are judged against it.

use std::path::{Path, PathBuf};

use super::*;
use crate::files::Owner;
use crate::host::Host;
use crate::manifest::export::{team_objects, to_yaml};
use crate::manifest::{Problem, Source};
use crate::model::{Model, Network, Origin, Parent, Team};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    host: Host,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["work/sub", "other", "outside", "state", "sessions"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let host = Host {
            uid: 1000,
            gid: 1000,
            home: "/home/nobody-here".into(),
            memory_bytes: 1 << 34,
            state_dir: root.join("state"),
            engine_dirs: Default::default(),
            sudo_user: None,
        };
        Fixture {
            _dir: dir,
            root,
            host,
        }
    }

    fn validate(&self, text: &str) -> Result<Model, Vec<Problem>> {
        let src = Source {
            path: "team.yaml".into(),
            dir: self.root.clone(),
            text: text.into(),
            given: None,
        };
        crate::manifest::validate(&[src], &self.host, &[])
    }

    /// Member `a` writes ./work, reads ./other, allow-lists api.example.com, 256Mi, 64 pids,
    /// 1 CPU; maxMembers 3, maxDepth 2. It shares what it writes (`shareWrites`), so that
    /// its helpers may write inside it.
    fn team(&self, helper_requests: bool) -> Team {
        self.team_sharing(helper_requests, true)
    }

    /// `team`, with `a` sharing what it writes or not.
    fn team_sharing(&self, helper_requests: bool, share: bool) -> Team {
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: t}}
spec: {{image: img:1, sessionDir: ./sessions, maxMembers: 3, maxDepth: 2, helperRequests: {helper_requests}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sh], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], read: [./other], network: {{allow: [api.example.com]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: g, command: [sleep, "1"], resources: {{memory: 256Mi, pids: 64, cpus: 1}}, shareWrites: {share}}}
"#
        );
        self.validate(&yaml).unwrap().teams.remove(0)
    }

    fn path(&self, p: &str) -> String {
        self.root.join(p).display().to_string()
    }

    fn judge(&self, team: &Team, req: &Request) -> Result<Member, Refusal> {
        judge(req, "a", team, &[], &self.host, "2026-01-01T00:00:00Z")
    }
}

fn request(name: &str) -> Request {
    Request {
        name: name.into(),
        ..Default::default()
    }
}

#[test]
fn a_narrower_request_makes_a_member_like_a_manifest_would() {
    let f = Fixture::new();
    let team = f.team(true);
    let mut r = request("helper");
    r.read = vec![f.path("other")];
    r.write = vec![f.path("work/sub")];
    r.network = Some(NetworkSpec::Allow(vec!["api.example.com:443".into()]));
    r.resources.memory = Some(crate::manifest::raw::Quantity::Text("64Mi".into()));
    r.command = Some(vec!["sleep".into(), "100".into()]);
    let m = f.judge(&team, &r).unwrap();
    assert_eq!(m.parent, Parent::Member("a".into()));
    assert_eq!(m.depth, 2);
    assert_eq!(m.image, "img:1");
    assert_eq!(m.access.write, vec![f.root.join("work/sub")]);
    assert_eq!(m.access.read, vec![f.root.join("other")]);
    assert_eq!(
        m.access.network,
        Network::Allow(vec!["api.example.com:443".into()])
    );
    assert_eq!(m.memory_bytes, 64 << 20);
    // What it did not ask for, it has as its requester has it.
    assert_eq!(m.pids, 64);
    assert_eq!(m.nano_cpus, Some(1_000_000_000));
    assert_eq!(m.cwd, f.root.join("work/sub"));
    assert_eq!(m.transcript_dir, f.root.join("sessions/members/helper"));
    assert_eq!(
        m.origin,
        Origin::Requested {
            by: "a".into(),
            at: "2026-01-01T00:00:00Z".into()
        }
    );
}

/// One writer per folder holds for helpers too: a helper writes inside its requester's
/// folder only when the requester shares it (`shareWrites`), and then shares it as well.
#[test]
fn a_helper_writes_where_its_requester_does_only_when_the_requester_shares() {
    let f = Fixture::new();
    let mut r = request("helper");
    r.write = vec![f.path("work/sub")];
    let e = f.judge(&f.team_sharing(true, false), &r).unwrap_err();
    assert_eq!((e.status, e.rule.as_str()), (422, "one-writer"), "{e:?}");
    assert_eq!(e.field.as_deref(), Some("write"), "{e:?}");
    assert!(
        e.message.contains(&format!(
            "member `t/helper` writes `{}`, inside `{}`, which `t/a` (<helper request>:",
            f.path("work/sub"),
            f.path("work")
        )),
        "{e:?}"
    );
    let m = f.judge(&f.team_sharing(true, true), &r).unwrap();
    assert!(m.share_writes);
    // Reading its requester's folder writes nothing.
    let mut r = request("reader");
    r.read = vec![f.path("work")];
    assert!(
        !f.judge(&f.team_sharing(true, false), &r)
            .unwrap()
            .share_writes
    );
}

#[track_caller]
fn refused(f: &Fixture, team: &Team, r: &Request, rule: &str, words: &str) -> Refusal {
    let e = f.judge(team, r).unwrap_err();
    assert_eq!(e.rule, rule, "{e:?}");
    assert!(e.message.contains(words), "{e:?}");
    e
}

#[test]
fn wider_requests_are_refused_with_the_rule_they_break() {
    let f = Fixture::new();
    let team = f.team(true);

    let mut r = request("h");
    r.read = vec![f.path("outside")];
    let e = refused(
        &f,
        &team,
        &r,
        "narrower-than-requester",
        "its parent may not read",
    );
    assert_eq!(e.status, 422);
    assert_eq!(e.field.as_deref(), Some("read[0]"));

    // Read access does not give write access.
    let mut r = request("h");
    r.write = vec![f.path("other")];
    let e = refused(&f, &team, &r, "narrower-than-requester", "may not write");
    assert_eq!(e.field.as_deref(), Some("write[0]"));

    let mut r = request("h");
    r.network = Some(NetworkSpec::Open);
    refused(&f, &team, &r, "narrower-than-requester", "more network");

    let mut r = request("h");
    r.network = Some(NetworkSpec::Allow(vec!["evil.example.com".into()]));
    let e = refused(&f, &team, &r, "narrower-than-requester", "evil.example.com");
    assert_eq!(e.field.as_deref(), Some("network.allow[0]"));

    let mut r = request("h");
    r.resources.memory = Some(crate::manifest::raw::Quantity::Text("512Mi".into()));
    let e = refused(
        &f,
        &team,
        &r,
        "resources-within-requester",
        "more than the requester's",
    );
    assert_eq!(e.field.as_deref(), Some("resources.memory"));

    let mut r = request("h");
    r.resources.pids = Some(65);
    refused(&f, &team, &r, "resources-within-requester", "pids 65");

    let mut r = request("h");
    r.resources.cpus = Some(crate::manifest::raw::Quantity::Text("1500m".into()));
    refused(&f, &team, &r, "resources-within-requester", "cpus 1.5");

    // An image no manifest names: the host would fetch it for the member.
    let mut r = request("h");
    r.image = Some("registry.evil.example/leak-secret:1".into());
    let e = refused(&f, &team, &r, "image-from-manifests", "not an image");
    assert_eq!(e.field.as_deref(), Some("image"));
    let mut r = request("h");
    r.image = Some("img:1".into());
    assert!(f.judge(&team, &r).is_ok());

    // The manifests' own rules, for free: a bad name, a path that is not a folder.
    refused(&f, &team, &request("Bad_Name"), "name", "not a valid name");
    let mut r = request("h");
    r.read = vec![f.path("work/missing")];
    refused(&f, &team, &r, "grant-paths", "missing");
    let mut r = request("h");
    r.read = vec!["work".into()];
    refused(&f, &team, &r, "absolute-paths", "not an absolute path");
    let mut r = request("h");
    r.env.insert("ATEAM_ROLE".into(), "x".into());
    refused(&f, &team, &r, "manifest-rules", "set by ateam itself");
}

#[test]
fn team_limits_hold_for_requested_members() {
    let f = Fixture::new();
    let mut team = f.team(true);
    // maxDepth 2: `a` is at depth 1, its helper at 2, the helper's own would be at 3.
    let child = f.judge(&team, &request("h1")).unwrap();
    team.members.push(child);
    let e = judge(
        &request("h2"),
        "h1",
        &team,
        &[],
        &f.host,
        "2026-01-01T00:00:01Z",
    )
    .unwrap_err();
    assert_eq!(e.rule, "maxDepth", "{e:?}");
    // maxMembers 3: a, h1, and one more.
    let more = f.judge(&team, &request("h3")).unwrap();
    team.members.push(more);
    let e = f.judge(&team, &request("h4")).unwrap_err();
    assert_eq!(e.rule, "maxMembers", "{e:?}");
    assert!(e.message.contains("more than maxMembers 3"), "{e:?}");
    // A name that is taken.
    let e = f.judge(&team, &request("h1")).unwrap_err();
    assert_eq!((e.status, e.rule.as_str()), (409, "unique-name"));
}

#[test]
fn a_team_without_helper_requests_refuses_them() {
    let f = Fixture::new();
    let e = f.judge(&f.team(false), &request("h")).unwrap_err();
    assert_eq!((e.status, e.rule.as_str()), (403, "helperRequests"));
}

#[test]
fn records_merge_while_their_requester_is_wanted() {
    let f = Fixture::new();
    let team = f.team(true);
    let child = f.judge(&team, &request("h1")).unwrap();
    let owner = Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    save(&f.host.state_dir, "t", &child, owner).unwrap();
    let desired = Model {
        teams: vec![team.clone()],
    };
    let (merged, dropped) = merge(&desired, &f.host.state_dir);
    assert!(dropped.is_empty());
    assert_eq!(merged.teams[0].members.len(), 2);
    assert_eq!(merged.teams[0].members[1], child);
    // Without its requester, it is dropped, and says why.
    let mut without = team.clone();
    without.members.clear();
    let (merged, dropped) = merge(
        &Model {
            teams: vec![without],
        },
        &f.host.state_dir,
    );
    assert!(merged.teams[0].members.is_empty());
    assert_eq!(dropped.len(), 1);
    assert!(dropped[0].why.contains("requester `a` is no longer wanted"));
    // A requester narrowed since: dropped too.
    let mut narrowed = team.clone();
    narrowed.members[0].access.network = Network::None;
    let mut wide = child.clone();
    wide.access.network = Network::Allow(vec!["api.example.com".into()]);
    save(&f.host.state_dir, "t", &wide, owner).unwrap();
    let (_, dropped) = merge(
        &Model {
            teams: vec![narrowed],
        },
        &f.host.state_dir,
    );
    assert!(dropped[0].why.contains("narrowed"), "{dropped:?}");
    // Its requester promoted to a main session of the same name: kept, working for it.
    let mut promoted = team.clone();
    let a = promoted.members.remove(0);
    let mut session = promoted.sessions[0].clone();
    session.name = a.name.clone();
    session.promoted_from = Some(a.name.clone());
    promoted.sessions.push(session);
    let (merged, dropped) = merge(
        &Model {
            teams: vec![promoted],
        },
        &f.host.state_dir,
    );
    assert!(dropped.is_empty(), "{dropped:?}");
    assert_eq!(
        merged.teams[0].members[0].parent,
        Parent::MainSession("a".into())
    );
    assert_eq!(merged.teams[0].members[0].depth, 1);
    // Requests turned off, or no room left: dropped.
    let mut off = team.clone();
    off.helper_requests = false;
    let (_, dropped) = merge(&Model { teams: vec![off] }, &f.host.state_dir);
    assert!(dropped[0].why.contains("no longer allows"), "{dropped:?}");
    let mut full = team.clone();
    full.max_members = 1;
    let (_, dropped) = merge(&Model { teams: vec![full] }, &f.host.state_dir);
    assert!(dropped[0].why.contains("maxMembers 1"), "{dropped:?}");
    forget(&f.host.state_dir, "t", "h1").unwrap();
    assert!(records(&f.host.state_dir, "t").is_empty());
}

#[test]
fn a_fork_merges_beside_its_origin_whatever_the_helper_rules_and_goes_with_it() {
    let f = Fixture::new();
    let team = f.team(false);
    let mut fork = team.members[0].clone();
    fork.name = "a2".into();
    fork.parent = Parent::MainSession("someone-else".into());
    fork.access.write = vec![f.root.join("sessions/forks/a2/0-work")];
    fork.origin = Origin::Forked {
        from: "a".into(),
        at: "2026-12-07T05:00:00Z".into(),
    };
    let owner = Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    save(&f.host.state_dir, "t", &fork, owner).unwrap();
    // helperRequests is off, and its grant is no part of its origin's: a fork is kept,
    // beside its origin (its parent and depth, whatever the record says).
    let desired = Model {
        teams: vec![team.clone()],
    };
    let (merged, dropped) = merge(&desired, &f.host.state_dir);
    assert!(dropped.is_empty(), "{dropped:?}");
    let kept = &merged.teams[0].members[1];
    assert_eq!(kept.name, "a2");
    assert_eq!(kept.parent, Parent::MainSession("lead".into()));
    assert_eq!(kept.depth, team.members[0].depth);
    assert_eq!(kept.origin.describe(), "forked from a");
    // Without its origin, it goes, and says why; with no room, it is dropped too.
    let mut without = team.clone();
    without.members.clear();
    let (merged, dropped) = merge(
        &Model {
            teams: vec![without],
        },
        &f.host.state_dir,
    );
    assert!(merged.teams[0].members.is_empty());
    assert!(
        dropped[0]
            .why
            .contains("forked from, `a`, is no longer wanted"),
        "{dropped:?}"
    );
    let mut full = team.clone();
    full.max_members = 1;
    let (_, dropped) = merge(&Model { teams: vec![full] }, &f.host.state_dir);
    assert!(dropped[0].why.contains("maxMembers 1"), "{dropped:?}");
    // A manifest that now names a member of its name wins.
    let mut named = team.clone();
    let mut other = team.members[0].clone();
    other.name = "a2".into();
    named.members.push(other);
    let (_, dropped) = merge(&Model { teams: vec![named] }, &f.host.state_dir);
    assert!(
        dropped[0].why.contains("a manifest now names"),
        "{dropped:?}"
    );
}

#[test]
fn an_export_validates_back_to_the_same_team() {
    let f = Fixture::new();
    let mut team = f.team(true);
    let mut r = request("h1");
    r.write = vec![f.path("work/sub")];
    r.resources.cpus = Some(crate::manifest::raw::Quantity::Text("250m".into()));
    team.members.push(f.judge(&team, &r).unwrap());
    let text = to_yaml(&team_objects(&team)).unwrap();
    let again = f
        .validate(&text)
        .unwrap_or_else(|p| panic!("{p:#?}\n{text}"));
    let mut back = again.teams[0].clone();
    // Origin is not a manifest's to say (the annotation only records it) and the grant
    // list now holds the requested member's grant: otherwise the very same.
    assert_eq!(back.members[1].origin, Origin::Manifest);
    back.members[1].origin = team.members[1].origin.clone();
    assert_eq!(back.members, team.members);
    assert_eq!(back.sessions, team.sessions);
    assert_eq!(back.grants.len(), 2);
    assert!(
        text.contains(crate::manifest::export::REQUESTED_BY),
        "{text}"
    );
    assert_eq!(
        crate::plan::spec::desired_state(&again, &f.host).members,
        crate::plan::spec::desired_state(
            &Model {
                teams: vec![team.clone()]
            },
            &f.host
        )
        .members
    );
}

#[test]
fn an_export_keeps_grants_apart_whose_names_clash() {
    let f = Fixture::new();
    let mut team = f.team(true);
    let mut r = request("h1");
    r.write = vec![f.path("work/sub")];
    let child = f.judge(&team, &r).unwrap();
    // A manifest grant that took the requested grant's name since, with other folders.
    let mut other = team.grants[0].clone();
    other.name = child.access.name.clone();
    team.grants.push(other);
    team.members.push(child.clone());
    let text = to_yaml(&team_objects(&team)).unwrap();
    let again = f
        .validate(&text)
        .unwrap_or_else(|p| panic!("{p:#?}\n{text}"));
    let back = &again.teams[0].members[1];
    assert_eq!(back.access.name, format!("{}-2", child.access.name));
    assert_eq!(back.access.write, child.access.write);
    assert_eq!(back.access.read, child.access.read);
}

#[test]
fn a_helper_may_not_take_a_name_the_store_or_a_session_holds() {
    let f = Fixture::new();
    let team = f.team(true);
    // A main session's name: the helper's plan would start the person's session.
    let e = refused(&f, &team, &request("lead"), "session-name", "main session");
    assert_eq!(e.status, 409);
    // What the store or the session folder remembers.
    assert!(remembered(&f.host.state_dir, &team, "fresh").is_ok());
    std::fs::create_dir_all(f.root.join("sessions/members/old")).unwrap();
    std::fs::create_dir_all(f.root.join("state/teams/t/members/gone/ctl")).unwrap();
    std::os::unix::fs::symlink("/etc", f.root.join("sessions/members/planted")).unwrap();
    std::fs::create_dir_all(f.root.join("state/teams/t/requested")).unwrap();
    std::fs::write(f.root.join("state/teams/t/requested/late.json"), "{}").unwrap();
    for (name, words) in [
        ("old", "transcript folder"),
        ("gone", "remembers a member"),
        ("planted", "transcript folder"),
        ("late", "still recorded"),
    ] {
        let e = remembered(&f.host.state_dir, &team, name).unwrap_err();
        assert_eq!(
            (e.status, e.rule.as_str()),
            (409, "remembered-name"),
            "{e:?}"
        );
        assert!(e.message.contains(words), "{name}: {e:?}");
    }
}

#[test]
fn a_helpers_chain_is_followed_link_by_link() {
    let f = Fixture::new();
    let mut team = f.team(true);
    team.max_depth = 3;
    team.max_members = 6;
    let owner = Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    let at = "2026-01-01T00:00:00Z";
    let h1 = f.judge(&team, &request("h1")).unwrap();
    // Its own helper, asked in the same second, with a name that sorts before it.
    let mut with_h1 = team.clone();
    with_h1.members.push(h1.clone());
    let h0 = judge(&request("h0"), "h1", &with_h1, &[], &f.host, at).unwrap();
    assert_eq!(h0.depth, 3);
    save(&f.host.state_dir, "t", &h1, owner).unwrap();
    save(&f.host.state_dir, "t", &h0, owner).unwrap();
    let names =
        |d: &Model| -> Vec<String> { d.teams[0].members.iter().map(|m| m.name.clone()).collect() };
    let desired = |t: &Team| Model {
        teams: vec![t.clone()],
    };
    let (merged, dropped) = merge(&desired(&team), &f.host.state_dir);
    assert!(dropped.is_empty(), "{dropped:?}");
    assert_eq!(names(&merged), ["a", "h1", "h0"]);
    // The first requester goes: every helper below it goes in the same merge.
    let mut without = team.clone();
    without.members.clear();
    let (merged, dropped) = merge(&desired(&without), &f.host.state_dir);
    assert!(merged.teams[0].members.is_empty());
    let mut gone: Vec<&str> = dropped.iter().map(|d| d.member.as_str()).collect();
    gone.sort();
    assert_eq!(gone, ["h0", "h1"], "{dropped:?}");
    // The requester moved deeper since: depths are the chain's now, not as recorded.
    let mut deeper = team.clone();
    deeper.members[0].depth = 2;
    let (merged, dropped) = merge(&desired(&deeper), &f.host.state_dir);
    assert_eq!(names(&merged), ["a", "h1"]);
    assert_eq!(merged.teams[0].members[1].depth, 3);
    assert!(
        dropped[0].member == "h0" && dropped[0].why.contains("depth 4"),
        "{dropped:?}"
    );
    // A record named like a main session (an older ateam accepted those) is dropped, and
    // its helpers are not taken for the session's.
    let mut lead = h1.clone();
    lead.name = "lead".into();
    save(&f.host.state_dir, "t", &lead, owner).unwrap();
    let mut under = h0.clone();
    under.name = "under".into();
    under.origin = Origin::Requested {
        by: "lead".into(),
        at: at.into(),
    };
    save(&f.host.state_dir, "t", &under, owner).unwrap();
    let (merged, dropped) = merge(&desired(&team), &f.host.state_dir);
    assert_eq!(names(&merged), ["a", "h1", "h0"]);
    let why = |n: &str| dropped.iter().find(|d| d.member == n).unwrap().why.clone();
    assert!(
        why("lead").contains("main session has this name"),
        "{dropped:?}"
    );
    assert!(why("under").contains("requester `lead`"), "{dropped:?}");
}

/// A helper's request is judged against the folders its team was applied from (kept in the
/// stored team): a member whose own grant holds them (applied before 9c, or the manifests
/// moved there since) cannot get a helper that writes them.
#[test]
fn a_request_to_write_where_the_team_was_applied_from_is_refused() {
    let f = Fixture::new();
    let mut team = f.team(true);
    team.manifests = vec![f.root.join("work/sub/team.yaml")];
    let mut r = request("helper");
    r.write = vec![f.path("work/sub")];
    let e = judge(
        &r,
        "a",
        &team,
        &[team.clone()],
        &f.host,
        "2026-01-01T00:00:00Z",
    )
    .unwrap_err();
    assert_eq!(e.rule, "grant-paths", "{e:?}");
    assert!(
        e.message.contains("where team `t` was applied from"),
        "{e:?}"
    );
    // Beside them, the same request is granted.
    team.manifests = vec![f.root.join("other/team.yaml")];
    judge(
        &r,
        "a",
        &team,
        &[team.clone()],
        &f.host,
        "2026-01-01T00:00:00Z",
    )
    .unwrap();
}

#[test]
fn a_refusal_never_says_what_exists_outside_the_requesters_grants() {
    let f = Fixture::new();
    let team = f.team(true);
    std::fs::create_dir(f.root.join("outside/there")).unwrap();
    std::fs::write(f.root.join("outside/file"), "x").unwrap();
    std::os::unix::fs::symlink(f.root.join("outside/there"), f.root.join("work/to-there")).unwrap();
    std::os::unix::fs::symlink(f.root.join("outside/absent"), f.root.join("work/to-absent"))
        .unwrap();
    // What exists, what does not, a file: outside the requester's grants, one answer each,
    // by name only (before, `does not exist` and `is not a directory` told them apart).
    let answer = |field: &str, p: &str| {
        let mut r = request("h");
        match field {
            "read" => r.read = vec![f.path(p)],
            _ => r.write = vec![f.path(p)],
        }
        let e = f.judge(&team, &r).unwrap_err();
        assert_eq!(e.rule, "narrower-than-requester", "{p}: {e:?}");
        assert_eq!(
            e.field.as_deref(),
            Some(&*format!("{field}[0]")),
            "{p}: {e:?}"
        );
        let named = crate::manifest::paths::resolve(&f.path(p), Path::new("/"), Path::new("/"));
        e.message.replace(&named.display().to_string(), "PATH")
    };
    for field in ["read", "write"] {
        let there = answer(field, "outside/there");
        assert_eq!(answer(field, "outside/absent"), there);
        assert_eq!(answer(field, "outside/file"), there);
        assert_eq!(answer(field, "outside/there/../absent/x"), there);
    }
    // A link in its grant is named with its own text, never with where it resolves to.
    let link = |p: &str| {
        let mut r = request("h");
        r.write = vec![f.path(p)];
        let e = f.judge(&team, &r).unwrap_err();
        assert!(e.message.contains("goes through the symlink"), "{e:?}");
        e.message
    };
    let there = link("work/to-there");
    let absent = link("work/to-absent");
    assert!(
        there.contains(&format!("points to `{}`;", f.path("outside/there"))),
        "{there}"
    );
    assert_eq!(
        there.replace("there", "X"),
        absent.replace("absent", "X"),
        "the answers differ by more than the names"
    );
}

#[test]
fn a_requests_text_reads_as_it_runs() {
    let f = Fixture::new();
    let team = f.team(true);
    let mut r = request("h");
    r.command = Some(vec!["sh".into(), "-c".into(), "echo a\n\techo b".into()]);
    assert!(f.judge(&team, &r).is_ok(), "tabs and line ends are fine");
    for (field, text) in [
        ("command[1]", "\u{202e}c- hs"),
        ("command[1]", "x\u{1b}[2Jy"),
        ("command[1]", "a\u{feff}b"),
        ("env.X", "v\u{2028}w"),
        ("cwd", "/w\u{2066}"),
    ] {
        let mut r = request("h");
        match field {
            "env.X" => {
                r.env.insert("X".into(), text.into());
            }
            "cwd" => r.cwd = Some(text.into()),
            _ => r.command = Some(vec!["sh".into(), text.into()]),
        }
        let e = refused(&f, &team, &r, "plain-text", "shown escaped");
        assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
        assert!(!crate::core::untrusted::steering(&e.message), "{e:?}");
    }
}

/// The team's own problems (here: a folder its member reads was removed since the apply)
/// name the person's paths; the member that asks hears that its team does not validate,
/// never those paths.
#[test]
fn a_refusal_for_the_teams_own_problems_names_none_of_the_persons_paths() {
    let f = Fixture::new();
    let team = f.team(true);
    std::fs::remove_dir_all(f.root.join("other")).unwrap();
    let e = f.judge(&team, &request("helper")).unwrap_err();
    assert!(
        !e.message.contains(&f.path("")) && e.field.is_none(),
        "the refusal names the person's files: {e:?}"
    );
    assert!(e.message.contains("does not validate"), "{e:?}");
}

/// A requester whose grant injects a bearer token on api.example.com, GET only.
fn ruled_team(f: &Fixture) -> Team {
    let yaml = r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: img:1, sessionDir: ./sessions, helperRequests: true}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sh], cwd: ./work}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  write: [./work]
  network:
    allow:
      - pypi.org
      - host: api.example.com
        credentials: {bearer: API_KEY}
        http: [{methods: [GET], paths: ["/v1/**"]}]
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec: {parent: lead, access: g, secretEnv: [API_KEY], command: [sleep, "1"]}
"#;
    f.validate(yaml).unwrap().teams.remove(0)
}

fn rules_request(json: &str) -> Request {
    serde_json::from_str(&format!(r#"{{"name": "h", "network": {json}}}"#)).unwrap()
}

#[test]
fn a_request_carries_hosts_with_rules_within_its_requesters() {
    let f = Fixture::new();
    let team = ruled_team(&f);
    let r = rules_request(
        r#"{"allow": [{"host": "api.example.com", "credentials": {"bearer": "API_KEY"},
            "http": [{"methods": ["GET"], "paths": ["/v1/models"]}]}]}"#,
    );
    let m = f.judge(&team, &r).unwrap();
    assert_eq!(
        m.access.network,
        Network::Allow(vec!["api.example.com".into()])
    );
    assert_eq!(m.access.intercept.len(), 1);
    assert_eq!(m.access.intercept[0].http[0].paths, ["/v1/models"]);
    assert_eq!(m.secret_env, ["API_KEY"]);

    // Wider rules, a tunnel past the rules, a credential the requester lacks, a CA file.
    for (json, words) in [
        (
            r#"{"allow": [{"host": "api.example.com", "http": [{"methods": ["POST"]}]}]}"#,
            "which no http rule of its parent's covers",
        ),
        (
            r#"{"allow": ["api.example.com"]}"#,
            "tunnels `api.example.com`",
        ),
        (
            r#"{"allow": [{"host": "pypi.org", "credentials": {"bearer": "API_KEY"}}]}"#,
            "injects `API_KEY` into `pypi.org`",
        ),
        (
            r#"{"allow": [{"host": "pypi.org", "upstreamCA": "/etc/ssl/private/x.pem"}]}"#,
            "never names a file on the host",
        ),
    ] {
        let e = f.judge(&team, &rules_request(json)).unwrap_err();
        assert_eq!(e.rule, "narrower-than-requester", "{json}: {e:?}");
        assert!(e.message.contains(words), "{json}: {e:?}");
        assert!(
            e.field
                .as_deref()
                .is_some_and(|f| f.starts_with("network.allow[0]")),
            "{json}: {e:?}"
        );
    }
}

#[test]
fn the_hosts_a_wider_request_wants_are_those_its_requester_lacks() {
    let f = Fixture::new();
    let team = ruled_team(&f);
    let a = team.members.iter().find(|m| m.name == "a").unwrap();
    // pypi.org it has; files.example and *.npm.example it lacks (each once, as entries);
    // api.example.com it reaches with rules, which an entry would not change.
    let r = rules_request(
        r#"{"allow": ["pypi.org", "Files.Example", "files.example", "*.npm.example:8443",
            "api.example.com", {"host": "other.example", "http": [{"methods": ["GET"]}]}]}"#,
    );
    assert_eq!(
        hosts_wanted(&r, a),
        ["files.example", "*.npm.example:8443", "other.example"]
    );
    let e = f.judge(&team, &r).unwrap_err();
    assert_eq!(e.rule, "narrower-than-requester");
    assert!(hosts_wanted(&request("h"), a).is_empty());
    assert!(hosts_wanted(&rules_request(r#""open""#), a).is_empty());
}
