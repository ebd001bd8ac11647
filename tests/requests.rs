//! Helper requests, from inside a member with busybox `wget` only, on Docker, rootful Podman
//! and rootless Podman (ateam then runs as the unprivileged user, through runuser, as in
//! tests/egress.rs): a member of a team with `helperRequests: true` asks for a child through
//! `ATEAM_HELPERS_URL` and it runs, shown by `status` with its origin; wider requests (a
//! folder outside its grant, more memory, more network, an image no manifest names, a taken
//! name, over maxMembers) are refused naming the rule; `export` round-trips through
//! `validate` and `diff` finds nothing to do; the child goes (its transcript stays) when its
//! requester leaves the manifests. Attacks of invariant 9b (docs/security.md): names that
//! are not the helper's own (a main session, a removed member's kept transcript, a kept
//! container), the requester chain and maxDepth, loops of requests.
//! Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Engine, rootless_user, text};

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown) and what is
/// this crate's own.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

impl World {
    fn new(engine: Engine, tag: &str) -> World {
        let w = World(common::World::new(engine, "requests", &format!("{tag}-")));
        w.dirs(&["work", "work/sub", "other", "state", "sessions"]);
        if engine == Engine::Rootless {
            w.give(&["", "work", "work/sub", "other", "state", "sessions"]);
        } else {
            // Rootful engines run members as nobody here (ateam runs as root, without sudo):
            // their write grant must be writable by nobody, or apply refuses it.
            use std::os::unix::fs::PermissionsExt;
            std::os::unix::fs::chown(w.root().join("work"), Some(65534), Some(65534)).unwrap();
            let open = std::fs::Permissions::from_mode(0o777);
            std::fs::set_permissions(w.root().join("work/sub"), open).unwrap();
        }
        w
    }

    /// The team: member `a` writes ./work and reads ./other, may reach example.com (so it
    /// has the proxy variables, which busybox wget follows even to loopback without `-Y
    /// off`), 64Mi, 64 pids; it shares what it writes (`shareWrites`), so that its helpers
    /// may write inside it. maxMembers 3. With `with_a` false, `a` is left out.
    fn manifests(&self, with_a: bool) -> String {
        let mut yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true, helperRequests: true, maxMembers: 3}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], read: [./other], network: {{allow: [example.com]}}}}
"#,
            team = self.team
        );
        if with_a {
            yaml.push_str(
                r#"---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec: {parent: lead, access: g, command: [sleep, "100000"], resources: {memory: 64Mi, pids: 64}, shareWrites: true}
"#,
            );
        }
        yaml
    }

    /// The team with the members `members` (name, parent), each as `a` is in `manifests`,
    /// and `limits` in the Team's spec (`maxMembers: 6, maxDepth: 3`).
    fn manifests_with(&self, limits: &str, members: &[(&str, &str)]) -> String {
        let mut yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true, helperRequests: true, {limits}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], read: [./other], network: {{allow: [example.com]}}}}
"#,
            team = self.team
        );
        for (name, parent) in members {
            yaml.push_str(&format!(
                r#"---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: {name}}}
spec: {{parent: {parent}, access: g, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}, shareWrites: true}}
"#
            ));
        }
        yaml
    }

    /// The names of the containers on the engine.
    fn containers(&self) -> Vec<String> {
        self.cli(&["ps", "-a", "--format", "{{.Names}}"])
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    }

    fn container(&self, member: &str) -> String {
        format!("ateam_{}_{member}", self.team)
    }

    /// A command as the user ateam runs as (the rootless user for rootless Podman).
    fn as_ateams_user(&self, program: &str) -> Command {
        if self.engine == Engine::Rootless {
            let (name, _, _) = rootless_user();
            let mut c = Command::new("runuser");
            c.args(["-u", &name, "--", program]);
            c
        } else {
            Command::new(program)
        }
    }

    /// The engine's own CLI.
    fn cli(&self, args: &[&str]) -> String {
        let out = common::engine_command(self.engine, true)
            .args(args)
            .current_dir("/tmp")
            .output()
            .unwrap();
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }

    /// stdout and stderr of a shell script run inside `member`, as the member.
    fn inside(&self, member: &str, script: &str) -> String {
        let out = self.ateam(&[
            "exec", member, "--team", &self.team, "--", "sh", "-c", script,
        ]);
        format!(
            "{}{}[exit {:?}]",
            text(&out.stdout),
            text(&out.stderr),
            out.status.code()
        )
    }

    /// A helper request from inside `member`, as an agent would make it with busybox (`-Y
    /// off`: busybox wget ignores NO_PROXY).
    fn ask(&self, member: &str, json: &str) -> String {
        let json = json.replace('\'', "'\\''");
        self.inside(
            member,
            &format!("wget -Y off -q -O - --post-data '{json}' \"$ATEAM_HELPERS_URL\" 2>&1"),
        )
    }

    fn status(&self) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn row(&self, name: &str) -> Option<serde_json::Value> {
        self.status()["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
    }

    fn requested(&self, name: &str) -> PathBuf {
        self.path("state/teams")
            .join(&self.team)
            .join("requested")
            .join(format!("{name}.json"))
    }
}

fn a_member_asks_for_helpers(engine: Engine) {
    let w = World::new(engine, "req");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);

    // A child within its grant: made, running, and shown with its origin.
    let work = w.path("work/sub").display().to_string();
    let got = w.ask(
        "a",
        &format!(r#"{{"name": "kid", "command": ["sleep", "100000"], "write": ["{work}"], "resources": {{"memory": "32Mi"}}}}"#),
    );
    assert!(
        got.contains("\"created\": \"kid\"") && got.contains("\"state\": \"running\""),
        "{engine:?}: {got}"
    );
    let kid = w.row("kid").expect("kid has a status row");
    assert_eq!(kid["state"], "running", "{engine:?}: {kid}");
    assert_eq!(kid["parent"], "a");
    assert_eq!(kid["origin"]["kind"], "requested");
    assert_eq!(kid["origin"]["requestedBy"], "a");
    assert_eq!(w.row("a").unwrap()["origin"]["kind"], "manifest");
    let table = w.ok(&["status", &w.team]);
    assert!(table.contains("kid: requested by a at "), "{table}");
    assert!(table.contains("a: asked for helpers kid"), "{table}");
    // The child runs with what it asked for, no more: it writes its folder, not the rest.
    let got = w.inside(
        "kid",
        &format!(
            "touch {work}/k && echo wrote; touch {}/x 2>/dev/null || echo refused",
            w.path("work").display()
        ),
    );
    assert!(
        got.contains("wrote") && got.contains("refused"),
        "{engine:?}: {got}"
    );
    assert!(w.path("work/sub/k").exists() && !w.path("work/x").exists());
    let record = std::fs::metadata(w.requested("kid")).expect("the request is recorded");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(record.permissions().mode() & 0o777, 0o600);

    // Wider requests are refused, naming the rule they break.
    for (json, rule, words) in [
        (
            r#"{"name": "k2", "read": ["/etc"]}"#.to_string(),
            "narrower-than-requester",
            "may not read",
        ),
        (
            format!(
                r#"{{"name": "k2", "write": ["{}"]}}"#,
                w.path("other").display()
            ),
            "narrower-than-requester",
            "may not write",
        ),
        (
            r#"{"name": "k2", "resources": {"memory": "1Gi"}}"#.into(),
            "resources-within-requester",
            "more than the requester",
        ),
        (
            r#"{"name": "k2", "network": "open"}"#.into(),
            "narrower-than-requester",
            "more network",
        ),
        (
            r#"{"name": "k2", "network": {"allow": ["evil.example.com"]}}"#.into(),
            "narrower-than-requester",
            "does not cover",
        ),
        (
            r#"{"name": "k2", "image": "registry.example/leak:1"}"#.into(),
            "image-from-manifests",
            "not an image",
        ),
        (
            r#"{"name": "kid"}"#.into(),
            "unique-name",
            "already has a member",
        ),
        (
            r#"{"name": "Not_A_Name"}"#.into(),
            "name",
            "not a valid name",
        ),
        (
            r#"{"name": "k2", "sudo": true}"#.into(),
            "request-shape",
            "unknown field",
        ),
    ] {
        let got = w.ask("a", &json);
        assert!(
            got.contains(&format!("({rule})")) && got.contains(words),
            "{engine:?}: {json}: {got}"
        );
        assert!(!w.requested("k2").exists());
    }
    // A third member fits maxMembers 3; a fourth does not.
    let got = w.ask("a", r#"{"name": "k3", "command": ["sleep", "100000"]}"#);
    assert!(got.contains("\"created\": \"k3\""), "{engine:?}: {got}");
    let got = w.ask("a", r#"{"name": "k4"}"#);
    assert!(
        got.contains("(maxMembers)") && got.contains("more than maxMembers 3"),
        "{engine:?}: {got}"
    );
    // What it asked for, it can list.
    let got = w.inside("a", "wget -Y off -q -O - \"$ATEAM_HELPERS_URL\"");
    assert!(
        got.contains("\"kid\"") && got.contains("\"k3\""),
        "{engine:?}: {got}"
    );

    // Export: the team as it stands, requested members included; it validates, and an
    // apply of it would change nothing.
    let export = w.path("export.yaml");
    w.ok(&["export", "--team", &w.team, "-o", export.to_str().unwrap()]);
    let text_of = std::fs::read_to_string(&export).unwrap();
    assert!(
        text_of.contains("name: kid") && text_of.contains("ateam.dev/requested-by"),
        "{text_of}"
    );
    let valid = w.ok(&["validate", "-f", export.to_str().unwrap()]);
    assert!(valid.contains("3 member(s)"), "{valid}");
    let diff = w.ateam(&["diff", "-f", export.to_str().unwrap()]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{engine:?}: {}{}",
        text(&diff.stdout),
        text(&diff.stderr)
    );
    assert!(
        text(&diff.stdout).contains("no changes"),
        "{}",
        text(&diff.stdout)
    );

    // A dead helper server is drift: status and diff see it; the controller starts it again.
    let pid_file = w
        .path("state/teams")
        .join(&w.team)
        .join("members/a/helpers/server.pid");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let killed = Command::new("kill").arg(pid.trim()).status().unwrap();
    assert!(killed.success());
    // It ends on SIGTERM in its own time: wait until status sees it down.
    common::eventually(Duration::from_secs(30), || {
        w.row("a").is_some_and(|a| a["state"] == "helpers down")
    });
    let a = w.row("a").unwrap();
    assert_eq!(a["state"], "helpers down", "{engine:?}: {a}");
    assert_eq!(a["drifted"], true, "{engine:?}: {a}");
    assert!(
        a["detail"]
            .as_str()
            .is_some_and(|d| d.contains("+ helper server of a")),
        "{engine:?}: {a}"
    );
    // The controller, even pruning, keeps them: they are desired.
    let once = w.ateam(&[
        "controller",
        "-f",
        team.to_str().unwrap(),
        "--once",
        "--prune",
    ]);
    assert_eq!(
        once.status.code(),
        Some(0),
        "{engine:?}: {}{}",
        text(&once.stdout),
        text(&once.stderr)
    );
    assert_eq!(w.row("kid").unwrap()["state"], "running", "{engine:?}");
    assert_eq!(w.row("k3").unwrap()["state"], "running", "{engine:?}");
    let got = w.inside("a", "wget -Y off -q -O - \"$ATEAM_HELPERS_URL\"");
    assert!(got.contains("\"kid\""), "{engine:?}: {got}");

    // The requester leaves the manifests: its helpers go with it (no --prune needed), their
    // records too; their transcripts stay.
    let without = w.write("team.yaml", &w.manifests(false));
    let diff = text(&w.ateam(&["diff", "-f", without.to_str().unwrap()]).stdout);
    assert!(
        diff.contains("a helper no longer wanted: its requester `a` is no longer wanted"),
        "{engine:?}: diff names why the helpers go: {diff}"
    );
    let _ = w.ateam(&["apply", "-f", without.to_str().unwrap()]);
    let names = w.cli(&["ps", "-a", "--format", "{{.Names}}"]);
    for kid in ["kid", "k3"] {
        assert!(
            !names
                .lines()
                .any(|l| l.trim() == format!("ateam_{}_{kid}", w.team)),
            "{engine:?}: {kid} outlived its requester: {names}"
        );
        assert!(!w.requested(kid).exists(), "{kid}'s record is left");
        assert!(
            w.path("sessions/members").join(kid).is_dir(),
            "{kid}'s transcript is gone"
        );
    }
    // Their helper servers, and the requester's, are stopped, their sockets gone.
    for m in ["a", "kid", "k3"] {
        let socket = w
            .path("state/teams")
            .join(&w.team)
            .join("members")
            .join(m)
            .join("ctl/helpers.sock");
        assert!(!socket.exists(), "{engine:?}: {} is left", socket.display());
    }
    assert!(w.path("work/sub/k").exists());
}

/// Removes a container the test made by hand, however the test ends.
struct HandMade<'a>(&'a World, String);

impl Drop for HandMade<'_> {
    fn drop(&mut self) {
        let _ = self.0.cli(&["rm", "-f", &self.1]);
    }
}

/// The team with members `a` and `old`, applied (maxMembers 6, maxDepth 3).
fn names_world(engine: Engine, tag: &str) -> (World, &'static str) {
    let w = World::new(engine, tag);
    let limits = "maxMembers: 6, maxDepth: 3";
    let team = w.write(
        "team.yaml",
        &w.manifests_with(limits, &[("a", "lead"), ("old", "lead")]),
    );
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    (w, limits)
}

/// Attack (c) of invariant 2 (docs/security.md, 9b): a member asks for a helper named like
/// the team's main session, stopped by its person: the root helper server must not start
/// it, nor record a helper of that name.
fn a_helper_may_not_take_a_main_sessions_name(engine: Engine) {
    let (w, _) = names_world(engine, "nms");
    let socket = w
        .path("state/teams")
        .join(&w.team)
        .join("sessions/lead/tmux.sock");
    let killed = w
        .as_ateams_user("tmux")
        .arg("-S")
        .arg(&socket)
        .arg("kill-server")
        .output()
        .unwrap();
    assert!(killed.status.success(), "{}", text(&killed.stderr));
    // tmux's server goes after `kill-server` has returned: wait until status sees it gone.
    common::eventually(Duration::from_secs(30), || {
        w.row("lead").is_some_and(|r| r["state"] != "running")
    });
    assert_ne!(w.row("lead").unwrap()["state"], "running", "{engine:?}");
    let got = w.ask("a", r#"{"name": "lead", "command": ["sleep", "100000"]}"#);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let lead = w.row("lead").unwrap();
    assert_ne!(
        lead["state"], "running",
        "{engine:?}: a helper request started the person's main session: {lead}"
    );
    assert!(
        got.contains("409") && got.contains("(session-name)"),
        "{engine:?}: a helper took the main session's name: {got}"
    );
    assert!(!w.requested("lead").exists());
}

/// Attack (a) of invariant 2: a helper named like a member that was removed but whose
/// transcript was kept would mount that transcript, and copy its secret where its asker
/// reads.
fn a_helper_may_not_take_a_removed_members_name(engine: Engine) {
    let (w, limits) = names_world(engine, "nmr");
    let transcript = w.path("sessions/members/old");
    let got = w.inside(
        "old",
        &format!("echo s3cret-of-old > {}/notes", transcript.display()),
    );
    assert!(got.contains("[exit Some(0)]"), "{engine:?}: {got}");
    let team = w.write("team.yaml", &w.manifests_with(limits, &[("a", "lead")]));
    w.ok(&["apply", "--prune", "-f", team.to_str().unwrap()]);
    assert!(!w.containers().contains(&w.container("old")), "{engine:?}");
    assert!(transcript.join("notes").exists(), "the transcript is kept");
    let sub = w.path("work/sub");
    let leak = sub.join("leak");
    let steal = format!(
        r#"{{"name": "old", "write": ["{sub}"], "command": ["sh", "-c", "cat {notes} > {leak}; sleep 100000"]}}"#,
        sub = sub.display(),
        notes = transcript.join("notes").display(),
        leak = leak.display()
    );
    let got = w.ask("a", &steal);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let leaked = std::fs::read_to_string(&leak).unwrap_or_default();
    assert!(
        !leaked.contains("s3cret"),
        "{engine:?}: the asker read a removed member's transcript: {leaked}"
    );
    assert!(
        got.contains("409") && got.contains("(remembered-name)"),
        "{engine:?}: a helper took a removed member's name: {got}"
    );
    assert!(!w.containers().contains(&w.container("old")), "{engine:?}");
    assert!(!w.requested("old").exists());
}

/// Attack (b) of invariant 2: containers a person kept with the name ateam would give the
/// helper (a removed member's orphan, left by an apply without `--prune`; one made by hand)
/// must be neither replaced nor adopted, by the request or by the applies after it.
fn a_helper_may_not_take_a_kept_containers_name(engine: Engine) {
    let (w, limits) = names_world(engine, "nmc");
    let team = w.write("team.yaml", &w.manifests_with(limits, &[("a", "lead")]));
    // Exit 1: it leaves the orphan, as asked.
    let _ = w.ateam(&["apply", "-f", team.to_str().unwrap()]);
    let id_of = |name: &str| w.cli(&["inspect", "--format", "{{.Id}}", name]);
    let orphan = w.container("old");
    let orphan_id = id_of(&orphan);
    assert!(w.containers().contains(&orphan), "{engine:?}: {orphan_id}");
    let kept = w.container("kept");
    let made = w.cli(&[
        "create",
        "--name",
        &kept,
        "ateam-demo:latest",
        "sleep",
        "100000",
    ]);
    let _guard = HandMade(&w, kept.clone());
    let kept_id = id_of(&kept);
    assert!(!kept_id.trim().is_empty(), "{engine:?}: {made}");
    let sleep = r#""command": ["sleep", "100000"]"#;
    let asked_old = w.ask("a", &format!(r#"{{"name": "old", {sleep}}}"#));
    let asked_kept = w.ask("a", &format!(r#"{{"name": "kept", {sleep}}}"#));
    // The person's next apply, as before: nothing of theirs is touched.
    let _ = w.ateam(&["apply", "-f", team.to_str().unwrap()]);
    assert_eq!(
        id_of(&orphan),
        orphan_id,
        "{engine:?}: the kept orphan was replaced: {asked_old}"
    );
    assert_eq!(
        id_of(&kept),
        kept_id,
        "{engine:?}: the person's container was replaced: {asked_kept}"
    );
    assert!(
        asked_old.contains("409")
            && (asked_old.contains("(remembered-name)") || asked_old.contains("(container-name)")),
        "{engine:?}: a helper took the name of a kept orphan: {asked_old}"
    );
    assert!(
        asked_kept.contains("409") && asked_kept.contains("(container-name)"),
        "{engine:?}: a helper took the name of a container a person kept: {asked_kept}"
    );
    assert!(!w.requested("old").exists() && !w.requested("kept").exists());
    // A name nobody holds is still given.
    let got = w.ask("a", &format!(r#"{{"name": "fresh", {sleep}}}"#));
    assert!(got.contains("\"created\": \"fresh\""), "{engine:?}: {got}");
}

/// Attacks (d) of invariant 2: a helper's chain of requesters is the real one, maxDepth
/// counts all of it as it is now, and every helper goes when a link of its chain goes.
fn helper_chains_are_real(engine: Engine) {
    let w = World::new(engine, "chn");
    let limits = "maxMembers: 6, maxDepth: 3";
    let team = w.write(
        "team.yaml",
        &w.manifests_with(limits, &[("a", "lead"), ("b", "lead")]),
    );
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    // a (depth 1) -> kid (2) -> k2 (3) -> k3 (4) is refused.
    let sleep = r#""command": ["sleep", "100000"]"#;
    let got = w.ask("a", &format!(r#"{{"name": "kid", {sleep}}}"#));
    assert!(got.contains("\"created\": \"kid\""), "{engine:?}: {got}");
    let got = w.ask("kid", &format!(r#"{{"name": "k2", {sleep}}}"#));
    assert!(got.contains("\"created\": \"k2\""), "{engine:?}: {got}");
    let got = w.ask("k2", &format!(r#"{{"name": "k3", {sleep}}}"#));
    assert!(got.contains("(maxDepth)"), "{engine:?}: {got}");
    assert_eq!(w.row("k2").unwrap()["parent"], "kid");

    // a moves under b: kid is at depth 3 now, and k2 would be at 4. It goes.
    let team = w.write(
        "team.yaml",
        &w.manifests_with(limits, &[("b", "lead"), ("a", "b")]),
    );
    let _ = w.ateam(&["apply", "-f", team.to_str().unwrap()]);
    let names = w.containers();
    assert!(
        !names.contains(&w.container("k2")),
        "{engine:?}: a helper outlived maxDepth once its chain grew: {names:?}"
    );
    assert!(names.contains(&w.container("kid")), "{names:?}");
    assert!(!w.requested("k2").exists());

    // kid asks again (depth 4 now: refused). b (depth 1) asks kb, kb asks kb2.
    let got = w.ask("kid", &format!(r#"{{"name": "k4", {sleep}}}"#));
    assert!(got.contains("(maxDepth)"), "{engine:?}: {got}");
    let got = w.ask("b", &format!(r#"{{"name": "kb", {sleep}}}"#));
    assert!(got.contains("\"created\": \"kb\""), "{engine:?}: {got}");
    let got = w.ask("kb", &format!(r#"{{"name": "kb2", {sleep}}}"#));
    assert!(got.contains("\"created\": \"kb2\""), "{engine:?}: {got}");
    // The first requesters leave the manifests: every helper below them goes in the same
    // apply, their records too; transcripts stay.
    let team = w.write("team.yaml", &w.manifests_with(limits, &[("c", "lead")]));
    let _ = w.ateam(&["apply", "-f", team.to_str().unwrap()]);
    let names = w.containers();
    for gone in ["kid", "k2", "kb", "kb2"] {
        assert!(
            !names.contains(&w.container(gone)),
            "{engine:?}: {gone} outlived its chain: {names:?}"
        );
        assert!(!w.requested(gone).exists());
        assert!(w.path("sessions/members").join(gone).is_dir());
    }
}

/// CPU time (user + system) of process `pid`, in seconds.
/// A request's refusal goes back to the member, and the checks of a grant path run as the
/// helper server's user (often root): before, a folder outside the requester's grants got
/// `does not exist`, `is not a directory` or `may not read` as the host had it, and a link
/// the member planted in its grant was answered with where it resolves as root (or nothing,
/// for a missing target). So a member could learn what exists anywhere on the host. Now
/// every such answer is one answer, by name.
fn a_refusal_never_says_what_exists_on_the_host(engine: Engine) {
    let w = World::new(engine, "orc");
    for d in ["hidden", "hidden/present"] {
        std::fs::create_dir(w.path(d)).unwrap();
    }
    w.write("hidden/file", "x");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let hidden = w.path("hidden").display().to_string();
    let answer = |field: &str, path: &str, name: &str| {
        let got = w.ask(
            "a",
            &format!(r#"{{"name": "h", "command": ["sleep", "1"], "{field}": ["{path}"]}}"#),
        );
        assert!(got.contains(" 422 "), "{engine:?}: {path}: {got}");
        got.replace(name, "NAME")
    };
    for field in ["read", "write"] {
        let present = answer(field, &format!("{hidden}/present"), "present");
        assert!(
            present.contains("(narrower-than-requester)"),
            "{engine:?}: {present}"
        );
        for name in ["absent", "file"] {
            let other = answer(field, &format!("{hidden}/{name}"), name);
            assert_eq!(
                other, present,
                "{engine:?}: a member tells `{name}` from a folder outside its grants"
            );
        }
    }
    // Links planted in its grant, to what exists and to what does not.
    let sub = w.path("work/sub").display().to_string();
    let made = w.inside(
        "a",
        &format!("ln -s {hidden}/present {sub}/to-present && ln -s {hidden}/absent {sub}/to-absent && echo made"),
    );
    assert!(made.contains("made"), "{engine:?}: {made}");
    let present = answer("write", &format!("{sub}/to-present"), "present");
    let absent = answer("write", &format!("{sub}/to-absent"), "absent");
    assert!(
        present.contains("goes through the symlink"),
        "{engine:?}: {present}"
    );
    assert_eq!(
        absent, present,
        "{engine:?}: the answer to a link says whether its target exists"
    );
    assert!(!w.requested("h").exists());
}

/// A helper's grant names folders its member chose, and `status` shows their names: a folder
/// named with a terminal's escape (a title, a colour) and a bidi override was printed as it
/// is. Such a folder is now refused, and `status` shows any folder name escaped.
fn a_folder_a_member_names_never_steers_status(engine: Engine) {
    let w = World::new(engine, "esc");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let sub = w.path("work/sub").display().to_string();
    let made = w.inside(
        "a",
        &format!(r#"mkdir "{sub}/x$(printf '\033]0;PWNED\007\342\200\256')y" && echo made"#),
    );
    assert!(made.contains("made"), "{engine:?}: {made}");
    let got = w.ask(
        "a",
        &format!(
            r#"{{"name": "h", "command": ["sleep", "100000"], "write": ["{sub}/x\u001b]0;PWNED\u0007\u202ey"]}}"#
        ),
    );
    let shown = w.ok(&["status", &w.team]);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{202e}'),
        "{engine:?}: status prints what the member named as it is: {shown:?}"
    );
    assert!(
        got.contains(" 422 ") && got.contains("bidirectional"),
        "{engine:?}: {got}"
    );
    assert!(!w.requested("h").exists());
}

/// `ateam export` writes a requested helper's command and environment back as YAML for a
/// person to read and commit; YAML escapes control characters but leaves a bidi override
/// as it is, so a command could read as another than the one that runs (Trojan Source).
/// Such a request is now refused, and nothing of it reaches the export.
fn a_helpers_command_reads_as_it_runs(engine: Engine) {
    let w = World::new(engine, "bidi");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let got = w.ask(
        "a",
        r#"{"name": "h", "command": ["sh", "-c", "sleep 100000 #\u202e; rm -rf ~ \u2066"], "env": {"NOTE": "a\u2067b"}}"#,
    );
    let export = w.ok(&["export", "--team", &w.team]);
    for c in ['\u{202e}', '\u{2066}', '\u{2067}'] {
        assert!(
            !export.contains(c),
            "{engine:?}: {c:?} in the export:\n{export}"
        );
    }
    assert!(
        got.contains(" 422 ") && got.contains("(plain-text)"),
        "{engine:?}: {got}"
    );
    assert!(!w.requested("h").exists());
}

/// ateam is upgraded while a team runs: its binary is replaced by a new file, and the member's
/// egress proxy and helper server still run the old one. They still answer, so nothing said
/// so; a request then started no helper. Now `status` says they are down and `apply` starts
/// them again from the new binary, and a request works.
#[allow(unsafe_code, reason = "set_var in a test process nextest runs alone")]
fn servers_of_a_replaced_binary_are_started_again(engine: Engine) {
    use std::os::unix::fs::PermissionsExt;
    let bin_dir = tempfile::Builder::new()
        .prefix("ateam-upgrade-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("ateam");
    let install = || {
        let next = bin_dir.path().join("ateam.next");
        std::fs::copy(common::ateam_bin(), &next).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&next, &bin).unwrap();
    };
    install();
    // nextest runs each test in a process of its own: this test's commands use the copy.
    unsafe { std::env::set_var("ATEAM_TEST_BIN", &bin) };
    let w = World::new(engine, "upgrade");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let member = w.path("state/teams").join(&w.team).join("members/a");
    // A server writes its own pid file as it starts: wait for it.
    let pid = |f: &str| -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(p) = std::fs::read_to_string(member.join(f))
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return p;
            }
            assert!(Instant::now() < deadline, "{engine:?}: no {f}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let gone = |pid: u32| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() > deadline {
                let what = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                return Err(text(&what).replace('\0', " "));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    };
    let before = (pid("egress/proxy.pid"), pid("helpers/server.pid"));
    let synced = w.ateam(&["status", &w.team, "--exit-code"]);
    assert_eq!(
        synced.status.code(),
        Some(0),
        "{engine:?}: {}",
        text(&synced.stdout)
    );
    install();
    let stale = w.ateam(&["status", &w.team, "--exit-code"]);
    assert_eq!(
        stale.status.code(),
        Some(1),
        "{engine:?}: servers of the replaced binary taken for live: {}",
        text(&stale.stdout)
    );
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let after = (pid("egress/proxy.pid"), pid("helpers/server.pid"));
    assert!(
        after.0 != before.0 && after.1 != before.1,
        "{engine:?}: {before:?} -> {after:?}"
    );
    for old in [before.0, before.1] {
        if let Err(what) = gone(old) {
            panic!("{engine:?}: the old server {old} still runs: {what}");
        }
    }
    let synced = w.ateam(&["status", &w.team, "--exit-code"]);
    assert_eq!(
        synced.status.code(),
        Some(0),
        "{engine:?}: {}",
        text(&synced.stdout)
    );
    let work = w.path("work/sub").display().to_string();
    let got = w.ask(
        "a",
        &format!(r#"{{"name": "kid", "command": ["sleep", "100000"], "write": ["{work}"], "resources": {{"memory": "32Mi"}}}}"#),
    );
    assert!(got.contains("\"created\": \"kid\""), "{engine:?}: {got}");
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    ticks / text(&out.stdout).trim().parse::<f64>().unwrap()
}

/// Attack (e) of invariant 2 and 5: four loops of refused requests from inside a member for
/// 10 s. The root helper server's CPU stays bounded, the loops get 429, and `apply
/// --no-wait` works meanwhile (refusals never hold the store's lock).
fn request_loops_are_slowed_and_cheap(engine: Engine) {
    let w = World::new(engine, "lop");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let pid_file = w
        .path("state/teams")
        .join(&w.team)
        .join("members/a/helpers/server.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let loops = r#"ask() { while :; do wget -Y off -q -O /dev/null --post-data '{"name": "k2", "read": ["/etc"]}' "$ATEAM_HELPERS_URL" 2>>/tmp/asked-$1; done; }
for i in 1 2 3 4; do ask $i & done
sleep 10; kill $(jobs -p); wait
echo "refused: $(cat /tmp/asked-* | grep -c '(narrower-than-requester)')"
echo "429: $(cat /tmp/asked-* | grep -c ' 429 ')"
echo "all: $(cat /tmp/asked-* | wc -l)""#;
    let before = cpu_seconds(pid);
    let started = std::time::Instant::now();
    let mut c = common::ateam_command(engine, &w.root().join("state"));
    c.args(["exec", "a", "--team", &w.team, "--", "sh", "-c", loops])
        .current_dir(w.root())
        .stdin(Stdio::null());
    let inside = std::thread::spawn(move || c.output().unwrap());
    std::thread::sleep(std::time::Duration::from_secs(3));
    let mut applies = Vec::new();
    for _ in 0..3 {
        let out = w.ateam(&["apply", "--no-wait", "-f", team.to_str().unwrap()]);
        applies.push((out.status.code(), text(&out.stderr)));
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let out = inside.join().unwrap();
    let cpu = cpu_seconds(pid) - before;
    let secs = started.elapsed().as_secs_f64();
    let said = text(&out.stdout);
    eprintln!(
        "{engine:?}: helper server CPU {cpu:.2} s in {secs:.1} s ({:.0} % of a core); {said}",
        100.0 * cpu / secs
    );
    for (code, err) in &applies {
        assert_eq!(
            *code,
            Some(0),
            "{engine:?}: apply --no-wait failed while a member asked in a loop: {err}"
        );
    }
    assert!(
        said.lines()
            .any(|l| l.starts_with("429: ") && l != "429: 0"),
        "{engine:?}: no request was rate-limited: {said}{}",
        text(&out.stderr)
    );
    assert!(
        cpu / secs < 0.2,
        "{engine:?}: the helper server used {:.0} % of a core under a loop of requests",
        100.0 * cpu / secs
    );
}

/// The helper server on its own, without an engine: idle clients do not stop it serving
/// others, a fifth connection at once is turned away, a huge body is refused from its
/// length, and a request for a team not applied is refused.
#[test]
fn the_helper_server_withstands_hostile_clients() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().canonicalize().unwrap().join("state");
    let member = state.join("teams/t/members/m");
    std::fs::create_dir_all(member.join("ctl")).unwrap();
    std::fs::create_dir_all(member.join("helpers")).unwrap();
    let bin = common::ateam_bin();
    let me = format!("{}:{}", rustix_ids().0, rustix_ids().1);
    /// Kills the server however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Killed(
        Command::new(bin)
            .arg("--state-dir")
            .arg(&state)
            .args([
                "helper-server",
                "--team",
                "t",
                "--member",
                "m",
                "--socket-owner",
                &me,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let socket = member.join("ctl/helpers.sock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while UnixStream::connect(&socket).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let ask = |req: &str| {
        let mut c = UnixStream::connect(&socket).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = c.write_all(req.as_bytes());
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    };
    // Three clients that say nothing hold three of the four places...
    let idle: Vec<UnixStream> = (0..3)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    // ...and the fourth is served at once.
    let got = ask("GET /helpers HTTP/1.1\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
    assert!(got.contains("\"helpers\": []"), "{got}");
    // With four held, a fifth is turned away.
    let fourth = UnixStream::connect(&socket).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let got = ask("GET /helpers HTTP/1.1\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    drop(fourth);
    drop(idle);
    // The server frees their places as it sees them close, in its own time: until then it
    // turns a client away (503). Ask again until it has room.
    let mut got = String::new();
    common::eventually(Duration::from_secs(30), || {
        got = ask("POST /helpers HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n");
        !got.starts_with("HTTP/1.1 503")
    });
    assert!(got.starts_with("HTTP/1.1 413"), "{got}");
    let got = ask("POST /helpers HTTP/1.1\r\nContent-Length: 5\r\n\r\n{nope");
    assert!(
        got.starts_with("HTTP/1.1 400") && got.contains("request-shape"),
        "{got}"
    );
    let body = r#"{"name": "k"}"#;
    let got = ask(&format!(
        "POST /helpers HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    assert!(
        got.starts_with("HTTP/1.1 403") && got.contains("team `t` is no longer applied"),
        "{got}"
    );
    let got = ask("DELETE /other HTTP/1.1\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 404"), "{got}");
}

/// The container id of member `name`, as status shows it.
fn container_id(w: &World, name: &str) -> String {
    w.row(name).unwrap()["containerId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A request wider than its requester by a host is an approval of the requester's grant:
/// the member is told its id; the person allows it always (the manifest edited, the
/// requester's container the same), and the member's next request passes.
fn a_wider_helper_request_is_an_approval(engine: Engine) {
    let w = World::new(engine, "rqa");
    let team = w.write("team.yaml", &w.manifests(true));
    w.ok(&["apply", "-f", team.to_str().unwrap()]);
    let before = container_id(&w, "a");
    let req = r#"{"name": "h", "command": ["sleep", "100000"], "network": {"allow": ["loopback.ateam.test"]}}"#;
    let got = w.ask("a", req);
    assert!(
        got.contains("narrower-than-requester") && got.contains("asked the person"),
        "{engine:?}: {got}"
    );
    let listed = w.ok(&["approvals", "--team", &w.team, "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let p = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["want"]["entry"] == "loopback.ateam.test")
        .unwrap_or_else(|| panic!("{engine:?}: {listed:#}"))
        .clone();
    assert_eq!(
        (p["member"].as_str(), p["helper"].as_str()),
        (Some("a"), Some("h"))
    );
    assert!(p["notApprovable"].is_null(), "{engine:?}: {p:#}");
    let id = p["id"].as_str().unwrap();
    assert!(
        got.contains(id),
        "{engine:?}: the member is told {id}: {got}"
    );
    assert!(w.row("h").is_none());

    let said = w.ok(&["approvals", "allow", id, "--always"]);
    assert!(said.contains("loopback.ateam.test"), "{engine:?}: {said}");
    let text = std::fs::read_to_string(&team).unwrap();
    assert!(text.contains("loopback.ateam.test"), "{engine:?}: {text}");
    assert_eq!(container_id(&w, "a"), before, "{engine:?}: a was replaced");

    let got = w.ask("a", req);
    assert!(got.contains("\"created\""), "{engine:?}: {got}");
    assert!(w.row("h").is_some(), "{engine:?}: no helper h");
    let listed = w.ok(&["approvals", "--team", &w.team, "-o", "json"]);
    assert!(!listed.contains(id), "{engine:?}: still pending: {listed}");
}

fn rustix_ids() -> (u32, u32) {
    let out = Command::new("id").arg("-u").output().unwrap();
    let uid = text(&out.stdout).trim().parse().unwrap();
    let out = Command::new("id").arg("-g").output().unwrap();
    (uid, text(&out.stdout).trim().parse().unwrap())
}

macro_rules! on_every_engine {
    ($($engine:ident => $e:expr),* $(,)?) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_member_asks_for_helpers() {
                    super::a_member_asks_for_helpers($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_helper_may_not_take_a_main_sessions_name() {
                    super::a_helper_may_not_take_a_main_sessions_name($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_helper_may_not_take_a_removed_members_name() {
                    super::a_helper_may_not_take_a_removed_members_name($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_helper_may_not_take_a_kept_containers_name() {
                    super::a_helper_may_not_take_a_kept_containers_name($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn helper_chains_are_real() {
                    super::helper_chains_are_real($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_refusal_never_says_what_exists_on_the_host() {
                    super::a_refusal_never_says_what_exists_on_the_host($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_folder_a_member_names_never_steers_status() {
                    super::a_folder_a_member_names_never_steers_status($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_helpers_command_reads_as_it_runs() {
                    super::a_helpers_command_reads_as_it_runs($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn servers_of_a_replaced_binary_are_started_again() {
                    super::servers_of_a_replaced_binary_are_started_again($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_wider_helper_request_is_an_approval() {
                    super::a_wider_helper_request_is_an_approval($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn request_loops_are_slowed_and_cheap() {
                    super::request_loops_are_slowed_and_cheap($e);
                }
            }
        )*
    };
}

on_every_engine!(
    docker => super::Engine::Docker,
    podman => super::Engine::Podman,
    rootless_podman => super::Engine::Rootless,
);
