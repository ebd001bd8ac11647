//! Manifest validation as a user meets it: every file under `tests/broken/` holds one mistake
//! people make, and its header says the exact error the user must see:
//!
//! ```text
//! # mistake: what the user did wrong
//! # error: LINE:COLUMN OBJECT FIELD: text the message must contain
//! ```
//! (`-` for no object or no field; `$DIR` stands for this folder). The problem must be reported at that place, and it must be
//! the only one unless `# problems: N` says otherwise.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ateam::host::Host;
use ateam::manifest::{Problem, Source, read_sources, validate};
use ateam::model::Team;

fn broken_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken")
}

/// A host whose home is inside the fixtures, with 8 GiB of memory. Its state folder is a fixed
/// path outside the checkout (it need not exist): socket paths under it are checked against the
/// 107-byte limit of a Unix socket path, and whether a fixture passes must not depend on how
/// long the path of the checkout is.
fn test_host() -> Host {
    Host {
        uid: 1000,
        gid: 1000,
        state_dir: STATE_DIR.into(),
        engine_dirs: Default::default(),
        home: broken_dir().join("fixtures/home"),
        memory_bytes: 8 << 30,
        sudo_user: None,
    }
}

const STATE_DIR: &str = "/nonexistent-state/ateam";

fn problems_of(path: &Path, host: &Host) -> Vec<Problem> {
    let (sources, mut problems) = read_sources(&[path.to_path_buf()], &mut std::io::empty());
    if let Err(mut p) = validate(&sources, host, &[]) {
        problems.append(&mut p);
    }
    problems
}

struct Expect {
    line: usize,
    column: usize,
    object: Option<String>,
    field: Option<String>,
    text: String,
    count: usize,
}

fn expectation(text: &str) -> Option<Expect> {
    let header = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let error = header("# error:")?;
    let (place, text) = error.split_once(": ")?;
    let mut parts = place.split_whitespace();
    let (line, column) = parts.next()?.split_once(':')?;
    let opt = |s: Option<&str>| s.filter(|s| *s != "-").map(str::to_string);
    Some(Expect {
        line: line.parse().ok()?,
        column: column.parse().ok()?,
        object: opt(parts.next()),
        field: opt(parts.next()),
        text: text.replace("$DIR", &broken_dir().display().to_string()),
        count: header("# problems:").map_or(1, |n| n.parse().expect("# problems: N")),
    })
}

#[test]
fn each_broken_manifest_fails_with_its_own_message() {
    let host = test_host();
    let mut files: Vec<PathBuf> = std::fs::read_dir(broken_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 25,
        "the issue asks for at least 25 distinct mistakes, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    let mut messages = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let problems = problems_of(file, &host);
        let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let Some(want) = expectation(&text) else {
            failures.push(format!(
                "{}: no `# error:` header; it reports:\n  {}",
                file.display(),
                shown.join("\n  ")
            ));
            continue;
        };
        let found = problems.iter().find(|p| {
            p.line == want.line
                && p.column == want.column
                && p.object == want.object
                && p.field == want.field
                && p.message.contains(&want.text)
                && p.file == *file
        });
        if found.is_none() || problems.len() != want.count {
            failures.push(format!(
                "{}: expected {} problem(s), one at {}:{} {:?} {:?} containing {:?}; got:\n  {}",
                file.display(),
                want.count,
                want.line,
                want.column,
                want.object,
                want.field,
                want.text,
                shown.join("\n  ")
            ));
        }
        if !messages.insert(want.text.clone()) {
            failures.push(format!(
                "{}: the message {:?} is not distinct",
                file.display(),
                want.text
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_example_team_is_valid() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-team/team.yaml");
    let mut host = test_host();
    host.home = "/nonexistent-home".into();
    host.state_dir = "/nonexistent-home/.local/state/ateam".into();
    let (sources, problems) = read_sources(&[examples], &mut std::io::empty());
    assert!(problems.is_empty(), "{problems:?}");
    let desired = validate(&sources, &host, &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let team = &desired.teams[0];
    let names: Vec<&str> = team.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["reviewer", "tester", "writer"]);
    let tester = team.members.iter().find(|m| m.name == "tester").unwrap();
    assert_eq!(tester.depth, 2, "the tester is nested under the writer");
    let reviewer = team.members.iter().find(|m| m.name == "reviewer").unwrap();
    assert!(reviewer.access.write.is_empty());
    assert_eq!(reviewer.memory_bytes, 512 << 20);
    assert_eq!(reviewer.nano_cpus, Some(500_000_000));
}

/// The GitOps example (examples/gitops: a team per folder, every object naming its team) is
/// valid as a whole, as its CI script checks it.
#[test]
fn the_gitops_example_is_valid() {
    let teams = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops/teams");
    let mut host = test_host();
    host.home = "/nonexistent-home".into();
    host.state_dir = "/nonexistent-home/.local/state/ateam".into();
    let (sources, problems) = read_sources(&[teams], &mut std::io::empty());
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(sources.len(), 4, "a team per folder, in several files");
    let desired = validate(&sources, &host, &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let members = |t: &Team| t.members.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    let teams: Vec<(&str, Vec<String>)> = desired
        .teams
        .iter()
        .map(|t| (t.name.as_str(), members(t)))
        .collect();
    assert_eq!(
        teams,
        [
            ("docs", vec!["writer".to_string()]),
            ("web", vec!["fixer".to_string(), "reviewer".to_string()])
        ]
    );
    // Transcripts stay out of the repository: the default folder under the home.
    assert_eq!(
        desired.teams[1].session_dir,
        Path::new("/nonexistent-home/.local/share/ateam/web")
    );
}

/// The workspaces example: two writers with repositories of their own made from the
/// checkout it sits in (`../..`), and a reviewer that reads it. Judged in a fresh repository
/// of its own, as a checkout of this one would have it (a CI checkout may be a worktree).
#[test]
fn the_workspaces_example_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap();
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@x", "init", "-q"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(out.status.success());
    let here = repo.join("examples/workspaces");
    std::fs::create_dir_all(&here).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workspaces/team.yaml");
    std::fs::copy(&example, here.join("team.yaml")).unwrap();
    // HEAD must name a commit.
    let out = std::process::Command::new("git")
        .current_dir(&repo)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@x",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut host = test_host();
    host.home = "/nonexistent-home".into();
    host.state_dir = "/nonexistent-home/.local/state/ateam".into();
    let (sources, problems) = read_sources(&[here.join("team.yaml")], &mut std::io::empty());
    assert!(problems.is_empty(), "{problems:?}");
    let desired = validate(&sources, &host, &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let t = &desired.teams[0];
    let ws = |name: &str| {
        let m = t.members.iter().find(|m| m.name == name).unwrap();
        (m.workspace.clone().unwrap(), m.cwd.clone())
    };
    let (alice, cwd) = ws("alice");
    assert_eq!(alice.repo, repo);
    assert_eq!(alice.objects, repo.join(".git/objects"));
    assert_eq!(alice.branch, "ateam/pair/alice");
    assert_eq!(alice.path, t.session_dir.join("workspaces/alice"));
    assert_eq!(cwd, alice.path, "a writer works in its workspace");
    assert_eq!(ws("bob").0.branch, "bob/try-2");
    let reviewer = t.members.iter().find(|m| m.name == "reviewer").unwrap();
    assert!(reviewer.workspace.is_none() && reviewer.access.write.is_empty());
}

/// A team named `name` with one member of `memory` that reads `read`, transcripts in
/// `session_dir` (paths relative to tests/broken).
fn team_yaml(name: &str, session_dir: &str, read: &str, memory: &str) -> String {
    format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {name}}}
spec: {{image: ateam-demo:latest, sessionDir: {session_dir}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [claude], cwd: fixtures/repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{read: [{read}]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: m}}
spec: {{parent: lead, access: g, resources: {{memory: {memory}}}}}
"
    )
}

fn check(yaml: &str, host: &Host, applied: &[Team]) -> Result<Team, Vec<Problem>> {
    let src = Source {
        path: broken_dir().join("team.yaml"),
        dir: broken_dir(),
        text: yaml.to_string(),
        given: None,
    };
    validate(&[src], host, applied).map(|mut d| d.teams.remove(0))
}

/// What the store holds is judged with the manifests: its transcripts folders are never
/// granted, its grants never hold a new transcripts folder, its members' memory counts.
#[test]
fn the_teams_in_the_store_are_judged_with_the_manifests() {
    let host = test_host(); // 8GiB: caps may add up to 6GiB
    let stored = check(
        &team_yaml("a", "fixtures/docs", "fixtures/repo", "5Gi"),
        &host,
        &[],
    )
    .unwrap();
    let applied = [stored];
    for (yaml, refusal) in [
        (
            team_yaml("b", "fixtures/b-sessions", "fixtures/docs", "64Mi"),
            Some(
                "spec.read[0]: `$DIR/fixtures/docs` is $DIR/fixtures/docs, the transcripts folder of team `a`",
            ),
        ),
        (
            team_yaml("b", "fixtures/repo/sessions", "", "64Mi"),
            Some(
                "spec.sessionDir: `$DIR/fixtures/repo/sessions` would be reached by `$DIR/fixtures/repo`, a folder team `a` grants its members (AccessGrant `g`)",
            ),
        ),
        (
            team_yaml("b", "fixtures/docs", "fixtures/repo", "64Mi"),
            Some(
                "spec.sessionDir: `$DIR/fixtures/docs` is $DIR/fixtures/docs, the transcripts folder of team `a`; each team needs",
            ),
        ),
        (
            team_yaml("b", "fixtures/b-sessions", "fixtures/repo", "2Gi"),
            Some(
                "spec.resources.memory: members' memory caps add up to 7GiB with this one (5GiB of it in teams applied before: team `a`), more than 75%",
            ),
        ),
        (
            team_yaml("b", "fixtures/b-sessions", "fixtures/repo", "1Gi"),
            None,
        ),
        // Team a applied again replaces its stored self: neither its memory nor its
        // transcripts folder stand in its way.
        (
            team_yaml("a", "fixtures/docs", "fixtures/repo", "6Gi"),
            None,
        ),
    ] {
        let got = check(&yaml, &host, &applied).map_err(|p| {
            p.iter()
                .map(|p| format!("{}: {}", p.field.as_deref().unwrap_or("-"), p.message))
                .collect::<Vec<_>>()
        });
        match refusal {
            None => assert!(got.is_ok(), "{yaml}\n{:?}", got.err()),
            Some(r) => {
                let r = r.replace("$DIR", &broken_dir().display().to_string());
                let problems = got.expect_err(&yaml);
                assert!(
                    problems.len() == 1 && problems[0].contains(&r),
                    "want {r:?}, got {problems:#?}"
                );
            }
        }
    }
}

/// A copy of a manifest beside it in the folder (`team copy.yaml`, as a file manager names
/// it) is one mistake: one problem at the first object it repeats, naming both files and
/// lines and how many more it repeats, and no follow-on problems ("several teams", a
/// transcripts folder shared, memory counted twice).
#[test]
fn a_copy_of_a_manifest_in_the_folder_is_one_problem() {
    let dir = tempfile::tempdir().unwrap();
    let team = team_yaml("t", "fixtures/docs", "fixtures/repo", "4Gi");
    // Paths in the copy resolve against the fixtures, as in the original.
    let yaml = team.replace(
        "fixtures/",
        &format!("{}/fixtures/", broken_dir().display()),
    );
    std::fs::write(dir.path().join("team.yaml"), &yaml).unwrap();
    std::fs::write(dir.path().join("team copy.yaml"), &yaml).unwrap();
    let problems = problems_of(dir.path(), &test_host());
    let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(problems.len(), 1, "{shown:#?}");
    let p = &problems[0];
    assert_eq!(p.file, dir.path().join("team.yaml"));
    assert_eq!((p.line, p.column), (3, 12));
    assert_eq!(p.object.as_deref(), Some("Team/t"));
    assert_eq!(
        p.message,
        format!(
            "Team/t is defined twice; the first is at {copy}:3; so are 3 more objects of this file, first defined in {copy} (a copy of the same manifests? keep one)",
            copy = dir.path().join("team copy.yaml").display()
        )
    );
}

/// The same file named twice, or a folder and a file in it, is read once: its objects are
/// not defined twice.
#[test]
fn a_file_named_twice_is_read_once() {
    let file = broken_dir().join("fixtures/../21-duplicate-member.yaml");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-team");
    let (sources, problems) = read_sources(
        &[
            example.clone(),
            example.join("team.yaml"),
            example.join("./team.yaml"),
        ],
        &mut std::io::empty(),
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(sources.len(), 1);
    let (sources, _) = read_sources(&[file.clone(), file], &mut std::io::empty());
    assert_eq!(sources.len(), 1);
}

/// What was applied before decides two refusals: a Member turned into a MainSession without
/// `promotedFrom`, and a removed MainSession whose members still report to it (a handover
/// needs `takesOver`, which also lets their `parent` keep the old name).
#[test]
fn promotion_and_handover_are_said_in_so_many_words() {
    let host = test_host();
    let head = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: ateam-demo:latest}
";
    let session = |name: &str, extra: &str| {
        format!(
            "---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: {name}}}
spec: {{command: [claude], cwd: fixtures/repo{extra}}}
"
        )
    };
    let member = |name: &str, parent: &str| {
        format!(
            "---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: {name}}}
spec: {{parent: {parent}}}
"
        )
    };
    let before = check(
        &format!(
            "{head}{}{}{}",
            session("lead", ""),
            member("a", "lead"),
            member("b", "a")
        ),
        &host,
        &[],
    )
    .unwrap();
    let applied = [before];
    let problems = |yaml: String| -> Vec<String> {
        match check(&yaml, &host, &applied) {
            Ok(_) => vec![],
            Err(p) => p
                .iter()
                .map(|p| format!("{}: {}", p.field.as_deref().unwrap_or("-"), p.message))
                .collect(),
        }
    };
    // a becomes a MainSession: refused without promotedFrom...
    let p = problems(format!(
        "{head}{}{}{}",
        session("lead", ""),
        session("a", ""),
        member("b", "a")
    ));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(
        p[0].starts_with("metadata.name: `a` was a Member of team `t`")
            && p[0].contains("say so with `promotedFrom: a`"),
        "{p:#?}"
    );
    // ...accepted with it; b, whose parent was the member a, now works for the session a.
    let t = check(
        &format!(
            "{head}{}{}{}",
            session("lead", ""),
            session("a", ", promotedFrom: a"),
            member("b", "a")
        ),
        &host,
        &applied,
    )
    .unwrap();
    assert_eq!(
        t.members[0].parent,
        ateam::model::Parent::MainSession("a".into())
    );
    assert_eq!(t.sessions[1].transcript_dir, t.session_dir.join("a"));

    // lead removed while a and b report to it (a directly): refused, naming them...
    let p = problems(format!(
        "{head}{}{}{}",
        session("lead2", ""),
        member("a", "lead"),
        member("b", "a")
    ));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(
        p[0].contains("MainSession `lead` is removed, and members report to it: a;")
            && p[0].contains("`takesOver: lead`"),
        "{p:#?}"
    );
    // ...unless another session takes over: the members' `parent: lead` leads to it.
    let t = check(
        &format!(
            "{head}{}{}{}",
            session("lead2", ", takesOver: lead"),
            member("a", "lead"),
            member("b", "a")
        ),
        &host,
        &applied,
    )
    .unwrap();
    let a = t.members.iter().find(|m| m.name == "a").unwrap();
    assert_eq!(a.parent, ateam::model::Parent::MainSession("lead2".into()));
    assert_eq!(t.sessions[0].takes_over.as_deref(), Some("lead"));
}

/// A folder a team was applied from stays out of every write grant, also of another team
/// applied later from elsewhere: that team's member would write the first team's intent.
#[test]
fn a_write_grant_over_where_a_stored_team_was_applied_from_is_refused() {
    let host = test_host();
    let dir = broken_dir();
    let a = team_yaml("a", "fixtures/docs", "fixtures/repo", "64Mi");
    let mut stored = check(&a, &host, &[]).unwrap();
    stored.manifests = vec![dir.join("fixtures/repo/deploy/team.yaml")];
    let b = |list: &str| {
        team_yaml("b", "fixtures/b-sessions", "fixtures/docs", "64Mi").replace(
            "spec: {read: [fixtures/docs]}",
            &format!("spec: {{{list}: [fixtures/repo]}}"),
        )
    };
    let problems = check(&b("write"), &host, std::slice::from_ref(&stored)).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.field.as_deref() == Some("spec.write[0]")
                && p.message.contains("where team `a` was applied from")),
        "{problems:#?}"
    );
    // Reading them is no one's intent but the person's.
    check(&b("read"), &host, &[stored]).unwrap();
}

/// A team applied again from other -f paths is read from those: the folder it was applied
/// from before may now be granted (its manifests moved), while a run without -f paths
/// (standard input, a helper's request) keeps it forbidden.
#[test]
fn a_team_applied_again_from_elsewhere_may_grant_where_it_was() {
    let host = test_host();
    let dir = broken_dir();
    let yaml = team_yaml("a", "fixtures/docs", "fixtures/docs", "64Mi").replace(
        "spec: {read: [fixtures/docs]}",
        "spec: {write: [fixtures/repo]}",
    );
    let mut stored = check(&yaml, &host, &[]).unwrap();
    stored.manifests = vec![dir.join("fixtures/repo/team.yaml")];
    let applied = std::slice::from_ref(&stored);
    let src = |given: Option<PathBuf>| Source {
        path: dir.join("team.yaml"),
        dir: dir.clone(),
        text: yaml.clone(),
        given,
    };
    let err = validate(&[src(None)], &host, applied).unwrap_err();
    assert!(
        err.iter()
            .any(|p| p.message.contains("where team `a` was applied from")),
        "{err:#?}"
    );
    validate(&[src(Some(dir.join("team.yaml")))], &host, applied).unwrap();
}

/// The map form of an allow entry: every kind of rule, read into the model (the host also
/// in the allow list), and written back by `export` in the same form, which reads again
/// into the same grant.
#[test]
fn hosts_with_rules_are_read_and_exported_in_their_map_form() {
    let dir = tempfile::tempdir().unwrap();
    let ca = rcgen::generate_simple_self_signed(vec!["test-ca".into()]).unwrap();
    let ca_path = dir.path().join("test-ca.pem");
    std::fs::write(&ca_path, ca.cert.pem()).unwrap();
    let yaml = format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: t}}
spec: {{image: ateam-demo:latest}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [claude], cwd: fixtures/repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec:
  network:
    allow:
      - api.example.org
      - host: api.anthropic.com
        credentials: {{header: x-api-key, secret: ANTHROPIC_API_KEY}}
      - host: github.com
        git: {{repositories: [acme/shop], push: false}}
        credentials: {{basic: {{username: x-access-token, secret: GITHUB_TOKEN}}}}
      - host: api.github.com
        http: [{{methods: [GET], paths: ['/repos/acme/shop/**']}}]
      - host: host.ateam.internal:8443
        upstreamCA: {}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: m}}
spec: {{parent: lead, access: g, secretEnv: [ANTHROPIC_API_KEY, GITHUB_TOKEN]}}
",
        ca_path.display()
    );
    let team = check(&yaml, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let g = &team.grants[0];
    assert_eq!(
        g.network,
        ateam::model::Network::Allow(
            [
                "api.example.org",
                "api.anthropic.com",
                "github.com",
                "api.github.com",
                "host.ateam.internal:8443"
            ]
            .map(String::from)
            .to_vec()
        )
    );
    let hosts: Vec<&str> = g.intercept.iter().map(|i| i.host.as_str()).collect();
    assert_eq!(
        hosts,
        [
            "api.anthropic.com",
            "github.com",
            "api.github.com",
            "host.ateam.internal:8443"
        ]
    );
    assert_eq!(
        g.intercept[0].credentials,
        Some(ateam::core::intercept::Credential::Header {
            header: "x-api-key".into(),
            secret: "ANTHROPIC_API_KEY".into()
        })
    );
    assert_eq!(
        g.intercept[1].git.as_ref().unwrap().repositories,
        ["acme/shop"]
    );
    assert_eq!(g.intercept[2].http[0].paths, ["/repos/acme/shop/**"]);
    assert_eq!(
        g.intercept[3].upstream_ca.as_deref(),
        Some(ca.cert.pem().as_str())
    );
    // The member's secretEnv still declares what is injected.
    assert_eq!(
        team.members[0].secret_env,
        ["ANTHROPIC_API_KEY", "GITHUB_TOKEN"]
    );

    let exported =
        ateam::manifest::export::to_yaml(&ateam::manifest::export::team_objects(&team)).unwrap();
    assert!(exported.contains("x-api-key"), "{exported}");
    assert!(
        !exported.contains("- api.anthropic.com"),
        "not flattened: {exported}"
    );
    let again =
        check(&exported, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}\n{exported}"));
    assert_eq!(again.grants[0], *g);
}

/// `agent:` expands to the agent's command, variables and key (declared for the grant that
/// injects it); export writes `agent:` back, and that export judges to the same member.
#[test]
fn an_agent_expands_and_exports_as_written() {
    let yaml = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: ateam-demo:latest, sessionDir: fixtures/docs}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [claude], cwd: fixtures/repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  network: {allow: [{host: api.openai.com, credentials: {bearer: OPENAI_API_KEY}}]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec:
  parent: lead
  access: g
  agent: {name: codex, task: fix the test, model: gpt-x, args: [--json]}
  env: {RUST_LOG: debug}
";
    let team = check(yaml, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let m = &team.members[0];
    let command = m.command.clone().unwrap();
    // The pinned build, from the host's agent cache, mounted read-only where the command
    // runs it.
    assert_eq!(&command[..2], ["/opt/ateam-agent/codex", "exec"]);
    let agent = m.agent.as_ref().unwrap();
    assert_eq!(agent.version.as_deref(), Some("0.171.0"));
    assert_eq!(
        agent.dir.as_deref(),
        Some(
            test_host()
                .home
                .join(".cache/ateam/agents/codex-0.171.0-e13d67afb0533cc6-2")
                .as_path()
        )
    );
    assert_eq!(m.env["GIT_AUTHOR_NAME"], "codex");
    assert_eq!(
        &command[command.len() - 4..],
        ["-m", "gpt-x", "--json", "fix the test"]
    );
    assert_eq!(
        m.secret_env,
        ["OPENAI_API_KEY"],
        "its key, declared for the grant"
    );
    assert_eq!(m.env["RUST_LOG"], "debug");
    assert_eq!(
        m.env["CODEX_HOME"],
        m.transcript_dir.join("codex").display().to_string()
    );
    let exported =
        ateam::manifest::export::to_yaml(&ateam::manifest::export::team_objects(&team)).unwrap();
    assert!(
        exported.contains("agent:") && !exported.contains("CODEX_HOME"),
        "{exported}"
    );
    let again =
        check(&exported, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}\n{exported}"));
    assert_eq!(again.members[0].command, m.command);
    assert_eq!(again.members[0].env, m.env);
    assert_eq!(again.members[0].agent, m.agent);
    assert!(
        !exported.contains("version:"),
        "the pin is ateam's: {exported}"
    );

    // A version of the person's, with its checksum: written back as said.
    let sum = "ab".repeat(32);
    let theirs = yaml.replace(
        "args: [--json]}",
        &format!("args: [--json], version: 0.180.0, sha256: {sum}}}"),
    );
    let team = check(&theirs, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let a = team.members[0].agent.clone().unwrap();
    assert_eq!(a.version.as_deref(), Some("0.180.0"));
    assert!(
        a.dir
            .unwrap()
            .ends_with(format!("codex-0.180.0-{}-2", &sum[..16])),
    );
    let exported =
        ateam::manifest::export::to_yaml(&ateam::manifest::export::team_objects(&team)).unwrap();
    let again =
        check(&exported, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}\n{exported}"));
    assert_eq!(again.members[0].agent, team.members[0].agent);
}

/// `agent.login: subscription` with a grant that injects the login: no key in `secretEnv`,
/// the placeholder in the agent's variable; export writes `login:` and `{login: claude}`
/// back, and that export judges to the same member and grant.
#[test]
fn a_login_member_expands_and_exports_as_written() {
    let yaml = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: ateam-demo:latest, sessionDir: fixtures/docs}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [claude], cwd: fixtures/repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  network: {allow: [{host: api.anthropic.com, credentials: {login: claude}}]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec:
  parent: lead
  access: g
  agent: {name: claude, task: fix the test, login: subscription}
";
    let team = check(yaml, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let m = &team.members[0];
    assert!(m.secret_env.is_empty(), "{:?}", m.secret_env);
    assert_eq!(
        m.env["CLAUDE_CODE_OAUTH_TOKEN"],
        "sk-ant-oat01-ateam-placeholder"
    );
    let exported =
        ateam::manifest::export::to_yaml(&ateam::manifest::export::team_objects(&team)).unwrap();
    assert!(
        exported.contains("login: subscription")
            && exported.contains("login: claude")
            && !exported.contains("CLAUDE_CODE_OAUTH_TOKEN"),
        "{exported}"
    );
    let again =
        check(&exported, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}\n{exported}"));
    assert_eq!(again.members[0].env, m.env);
    assert_eq!(again.members[0].agent, m.agent);
    assert_eq!(again.grants[0], team.grants[0]);
}

/// `agent:` grants its model host by itself, with the key or login injected there and its
/// `modelCA`: a member with no grant reaches it; a grant that names it already is kept as
/// written (not doubled); export writes the grant without it and `agent:` with it, and that
/// export judges to the same members. A child agent stays within its parent's grant with its
/// parent's agent's host counted; one whose model host its parent does not reach is refused.
#[test]
fn an_agent_grants_its_model_host_itself() {
    let ca = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/agents/claude/model-ca.pem"),
    )
    .unwrap();
    let pem = ca.trim_end().replace('\n', "\n      ");
    let yaml = format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: t}}
spec: {{image: ateam-demo:latest, sessionDir: fixtures/docs}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [claude], cwd: fixtures/repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec:
  network: {{allow: [github.com, {{host: api.openai.com, credentials: {{bearer: OPENAI_API_KEY}}}}]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec:
  parent: lead
  agent:
    name: claude
    task: fix the test
    modelUrl: https://host.ateam.internal:8790
    modelCA: |
      {pem}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: b}}
spec:
  parent: lead
  access: g
  agent: {{name: codex, task: fix the test}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: c}}
spec:
  parent: Member/a
  agent: {{name: claude, task: help, modelUrl: https://host.ateam.internal:8790}}
"
    );
    let team = check(&yaml, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let a = &team.members[0];
    assert_eq!(
        a.access.network,
        ateam::model::Network::Allow(vec!["host.ateam.internal:8790".into()])
    );
    let i = &a.access.intercept[0];
    assert_eq!(
        i.credentials,
        Some(ateam::core::intercept::Credential::Header {
            header: "x-api-key".into(),
            secret: "ANTHROPIC_API_KEY".into()
        })
    );
    assert_eq!(i.upstream_ca.as_deref().map(str::trim), Some(ca.trim()));
    assert_eq!(a.secret_env, ["ANTHROPIC_API_KEY"]);
    assert_eq!(
        a.agent.as_ref().unwrap().model_host.as_deref(),
        Some("host.ateam.internal:8790")
    );
    // The person's entry for api.openai.com is kept as written, not doubled.
    let b = &team.members[1];
    assert_eq!(b.access, team.grants[0]);
    assert_eq!(b.agent.as_ref().unwrap().model_host, None);
    // The child of `a` reaches the same model host: within `a`'s grant.
    assert_eq!(team.members[2].access.network, a.access.network);

    let exported =
        ateam::manifest::export::to_yaml(&ateam::manifest::export::team_objects(&team)).unwrap();
    assert!(
        exported.contains("modelCA:") && !exported.contains("b-2") && !exported.contains("g-2"),
        "{exported}"
    );
    let again =
        check(&exported, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}\n{exported}"));
    for (x, y) in again.members.iter().zip(&team.members) {
        assert_eq!(x.access, y.access, "{}", x.name);
        assert_eq!(x.agent, y.agent, "{}", x.name);
    }

    // A child agent whose model host its parent's grant does not reach is refused there.
    let wider = yaml.replace(
        "task: help, modelUrl: https://host.ateam.internal:8790",
        "task: help",
    );
    let problems = check(&wider, &test_host(), &[]).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].object.as_deref(), Some("Member/c"));
    assert!(
        problems[0].message.contains("api.anthropic.com"),
        "{problems:#?}"
    );
    // A modelUrl ateam cannot read a host from: at its field.
    let bad = yaml.replace(
        "modelUrl: https://host.ateam.internal:8790\n",
        "modelUrl: https://u:p@x/\n",
    );
    let problems = check(&bad, &test_host(), &[]).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.field.as_deref() == Some("spec.agent.modelUrl")),
        "{problems:#?}"
    );
}

/// `image: {build: ...}` and `{devcontainer: ...}` name the image by the hash of what the
/// build reads: the same definition the same tag, a changed file another; the build's pull
/// policy is Never (nothing to pull); export writes the definition back, and that export
/// judges to the same image.
#[test]
fn an_image_its_repository_defines_is_named_by_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(repo.join(".devcontainer")).unwrap();
    std::fs::write(
        repo.join(".devcontainer/Dockerfile"),
        "FROM ateam-toolchain:bookworm\nCOPY a.txt /a\n",
    )
    .unwrap();
    std::fs::write(
        repo.join(".devcontainer/devcontainer.json"),
        "// x\n{\"build\": {\"dockerfile\": \"Dockerfile\", \"context\": \"..\"},}",
    )
    .unwrap();
    std::fs::write(repo.join("a.txt"), "1").unwrap();
    let yaml = format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: t}}
spec: {{sessionDir: fixtures/docs}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [claude], cwd: fixtures/repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec:
  parent: lead
  image: {{devcontainer: {r}/.devcontainer/devcontainer.json}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: b}}
spec:
  parent: lead
  image: {{build: {{context: {r}, dockerfile: .devcontainer/Dockerfile}}}}
",
        r = repo.display()
    );
    let team = check(&yaml, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    let (a, b) = (&team.members[0], &team.members[1]);
    assert!(a.image.starts_with("ateam-build:"), "{}", a.image);
    assert_eq!(a.image, b.image, "one definition, one tag");
    let build = a.image_build.as_ref().unwrap();
    assert_eq!(build.bases, ["ateam-toolchain:bookworm"]);
    assert_eq!(build.context, repo);
    assert_eq!(build.dockerfile, ".devcontainer/Dockerfile");
    assert_eq!(a.image_pull_policy, ateam::model::PullPolicy::Never);
    let exported =
        ateam::manifest::export::to_yaml(&ateam::manifest::export::team_objects(&team)).unwrap();
    assert!(exported.contains("devcontainer:"), "{exported}");
    let again =
        check(&exported, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}\n{exported}"));
    assert_eq!(again.members[0].image, a.image);
    assert_eq!(again.members[1].image_build, b.image_build);
    // A changed file of the context: another tag.
    std::fs::write(repo.join("a.txt"), "2").unwrap();
    let changed = check(&yaml, &test_host(), &[]).unwrap_or_else(|p| panic!("{p:#?}"));
    assert_ne!(changed.members[0].image, a.image);

    // A member that may write what an image is built from: refused at that image.
    std::fs::create_dir_all(repo.join("src")).unwrap();
    let writer = format!(
        "{yaml}---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: w}}
spec: {{write: [{r}/src]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: c}}
spec: {{parent: lead, access: w, image: ateam-demo:latest}}
",
        r = repo.display()
    );
    let problems = check(&writer, &test_host(), &[]).unwrap_err();
    assert_eq!(problems.len(), 2, "{problems:#?}");
    for (p, who) in problems.iter().zip(["Member/a", "Member/b"]) {
        assert_eq!(p.object.as_deref(), Some(who));
        assert_eq!(p.field.as_deref(), Some("spec.image"));
        assert!(
            p.message.contains("which member t/c may write"),
            "{}",
            p.message
        );
    }
}

/// A member that does not declare a secret its grant injects is refused even when another
/// member of the same grant declares it: every member holds its own placeholder.
#[test]
fn every_member_of_a_grant_declares_its_injected_secrets() {
    let yaml = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: ateam-demo:latest}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [claude], cwd: fixtures/repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  network: {allow: [{host: api.openai.com, credentials: {bearer: OPENAI_API_KEY}}]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec: {parent: lead, access: g, secretEnv: [OPENAI_API_KEY]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: b}
spec: {parent: lead, access: g, secretEnv: [OTHER]}
";
    let problems = check(yaml, &test_host(), &[]).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].object.as_deref(), Some("Member/b"));
    assert_eq!(problems[0].field.as_deref(), Some("spec.secretEnv"));
    assert!(problems[0].message.contains("injects `OPENAI_API_KEY`"));
}

/// A member of `writers_team`: its name, parent, the folder it writes and the one it reads
/// (relative to the team's folder; "" for none), and whether it shares what it writes.
type W<'a> = (&'a str, &'a str, &'a str, &'a str, bool);

/// Team `team` in `dir`, each member with an AccessGrant of its own (`g-<member>`), in block
/// style so that `line_of` finds each member's `access`.
fn writers_team(team: &str, members: &[W]) -> String {
    let mut y = format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: sessions-{team}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [claude], cwd: .}}
"
    );
    for (name, parent, write, read, share) in members {
        y.push_str(&format!(
            "---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g-{name}}}
spec:
  write: [{write}]
  read: [{read}]
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: {name}}}
spec:
  parent: {parent}
  access: g-{name}
  shareWrites: {share}
"
        ));
    }
    y
}

/// The 1-based line of `yaml` that holds `needle`.
fn line_of(yaml: &str, needle: &str) -> usize {
    yaml.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// A folder with `repo/src` and `docs`, and a host whose home and state are elsewhere.
fn writers_dir() -> (tempfile::TempDir, PathBuf, Host) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().canonicalize().unwrap();
    for d in ["repo/src", "docs", "sessions-t", "sessions-s"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let mut host = test_host();
    host.home = "/nonexistent-home".into();
    (t, dir, host)
}

fn judge_in(dir: &Path, host: &Host, yaml: &str, applied: &[Team]) -> Result<Team, Vec<Problem>> {
    let src = Source {
        path: dir.join("team.yaml"),
        dir: dir.to_path_buf(),
        text: yaml.to_string(),
        given: None,
    };
    validate(&[src], host, applied).map(|mut d| d.teams.remove(0))
}

/// One writer per folder: two members writing one folder, or one inside the other, are
/// refused at the later one's `access`, naming both members and the other's line; every pair
/// is one problem.
#[test]
fn two_writers_of_one_folder_are_refused_naming_both() {
    let (_t, dir, host) = writers_dir();
    let file = dir.join("team.yaml").display().to_string();
    let repo = dir.join("repo").display().to_string();
    let yaml = writers_team(
        "t",
        &[
            ("a", "lead", "repo", "", false),
            ("b", "lead", "repo", "", false),
        ],
    );
    let p = judge_in(&dir, &host, &yaml, &[]).unwrap_err();
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(
        (
            p[0].line,
            p[0].column,
            p[0].object.as_deref(),
            p[0].field.as_deref()
        ),
        (
            line_of(&yaml, "access: g-b"),
            11,
            Some("Member/b"),
            Some("spec.access")
        )
    );
    assert_eq!(
        p[0].message,
        format!(
            "member `t/b` writes `{repo}`, which `t/a` ({file}:{}) writes too: one writer per folder; give each member a folder of its own, or set `shareWrites: true` on both",
            line_of(&yaml, "access: g-a")
        )
    );

    // One inside the other, whichever is read first.
    for (a, b, words) in [
        (
            "repo",
            "repo/src",
            format!("member `t/b` writes `{repo}/src`, inside `{repo}`, which `t/a` ({file}:"),
        ),
        (
            "repo/src",
            "repo",
            format!("member `t/b` writes `{repo}`, and `t/a` ({file}:"),
        ),
    ] {
        let yaml = writers_team(
            "t",
            &[("a", "lead", a, "", false), ("b", "lead", b, "", false)],
        );
        let p = judge_in(&dir, &host, &yaml, &[]).unwrap_err();
        assert!(
            p.len() == 1 && p[0].message.starts_with(&words),
            "{words}\n{p:#?}"
        );
    }

    // Every pair, once: three writers of one folder are three problems.
    let yaml = writers_team(
        "t",
        &[
            ("a", "lead", "repo", "", false),
            ("b", "lead", "repo/src", "", false),
            ("c", "lead", "repo", "", false),
        ],
    );
    let p = judge_in(&dir, &host, &yaml, &[]).unwrap_err();
    let pairs: Vec<(&str, bool, bool)> = p
        .iter()
        .map(|p| {
            (
                p.object.as_deref().unwrap(),
                p.message.contains("`t/a`"),
                p.message.contains("`t/b`"),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("Member/b", true, true),
            ("Member/c", true, false),
            ("Member/c", false, true)
        ],
        "{p:#?}"
    );
}

/// Two members may write one folder when both say they share it (`shareWrites`); one saying
/// so is not enough. A child writing inside its parent's folder is a second writer too, and
/// reading a folder is not writing it.
#[test]
fn members_that_both_share_may_write_one_folder() {
    let (_t, dir, host) = writers_dir();
    for (members, refused) in [
        (
            [
                ("a", "lead", "repo", "", true),
                ("b", "lead", "repo", "", true),
            ],
            None,
        ),
        (
            [
                ("a", "lead", "repo", "", true),
                ("b", "lead", "repo/src", "", false),
            ],
            Some("set `shareWrites: true` on both (only `t/a` says so)"),
        ),
        (
            [
                ("a", "lead", "repo", "", false),
                ("b", "a", "repo/src", "", false),
            ],
            Some("member `t/b` writes"),
        ),
        (
            [
                ("a", "lead", "repo", "", true),
                ("b", "a", "repo", "", true),
            ],
            None,
        ),
        (
            [
                ("a", "lead", "repo", "", false),
                ("b", "lead", "docs", "repo", false),
            ],
            None,
        ),
    ] {
        let yaml = writers_team("t", &members);
        let got = judge_in(&dir, &host, &yaml, &[]);
        match refused {
            None => {
                got.unwrap_or_else(|p| panic!("{members:?}: {p:#?}"));
            }
            Some(words) => {
                let p = got.unwrap_err();
                assert!(
                    p.len() == 1
                        && p[0].message.contains(words)
                        && p[0].message.contains("one writer per folder"),
                    "{members:?}: {p:#?}"
                );
            }
        }
    }
}

/// The teams of the store count: a member writing inside a stored team's member's folder is
/// refused, naming the stored team; a team the manifests define again is not judged against
/// its own stored copy.
#[test]
fn a_writer_of_a_stored_team_counts() {
    let (_t, dir, host) = writers_dir();
    let repo = dir.join("repo").display().to_string();
    let stored_yaml = writers_team("s", &[("w", "lead", "repo", "", false)]);
    let stored = judge_in(&dir, &host, &stored_yaml, &[]).unwrap();
    let applied = std::slice::from_ref(&stored);
    let yaml = writers_team("t", &[("m", "lead", "repo/src", "docs", false)]);
    let p = judge_in(&dir, &host, &yaml, applied).unwrap_err();
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].line, line_of(&yaml, "access: g-m"));
    assert!(
        p[0].message.starts_with(&format!(
            "member `t/m` writes `{repo}/src`, inside `{repo}`, which `s/w` (applied in the store) writes: one writer per folder"
        )),
        "{p:#?}"
    );
    // Team s again, as it is or with a second writer of its folder that shares: judged as
    // the manifests say, not against what the store holds of it.
    judge_in(&dir, &host, &stored_yaml, applied).unwrap();
    let again = writers_team(
        "s",
        &[
            ("w", "lead", "repo", "", true),
            ("v", "lead", "repo", "", true),
        ],
    );
    judge_in(&dir, &host, &again, applied).unwrap();
    // Both sharing, across teams.
    let mut sharing = stored.clone();
    sharing.members[0].share_writes = true;
    let yaml = writers_team("t", &[("m", "lead", "repo/src", "", true)]);
    judge_in(&dir, &host, &yaml, &[sharing]).unwrap();
}
