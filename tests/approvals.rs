//! Pending approvals from inside members, on Docker, rootful and rootless Podman (ateam then
//! runs as the unprivileged user, through runuser, as in tests/attacks*.rs): a refused request
//! becomes a pending approval (`ateam approvals`, `status`); what status never offers is
//! shown and cannot be approved; deny once dismisses; allow always writes the manifest file
//! the grant came from (the rest of it byte for byte, comments kept), applies it without a new
//! container and leaves `diff` clean; deny always writes the grant's `deny` list the same way
//! and is never asked again; a destination both allowed and denied is refused; and nothing is
//! written while a member (here one of another state folder) can write the manifests' folder. The proxy never connects anywhere:
//! the names asked for are refused by the list, then (allowed) by their loopback address.
//! Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

mod common;
use common::{Engine, rootless_user, text};

/// A name the host resolves to 127.0.0.1 (scripts/engines.sh puts it into /etc/hosts): once
/// allowed, the proxy still refuses it for its address, so no test traffic leaves.
const NAME: &str = "loopback.ateam.test";
const PORT: u16 = 18093;

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown) and what is
/// this crate's own.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

fn manifest_text(team: &str) -> String {
    format!(
        r#"# The team's manifests: ateam may add to an allow list, and to nothing else.
apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ../sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ../work}}
---
# a's grant: keep it narrow
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net-a}}
spec:
  read: [../work]     # what it reads
  network:
    allow:
      - example.com   # the docs
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: net-a, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
"#
    )
}

impl World {
    fn new(engine: Engine) -> World {
        let w = World(common::World::new(engine, "approvals", "appr-"));
        w.dirs(&[
            "work",
            "state",
            "state2",
            "sessions",
            "sessions2",
            "m",
            "other",
        ]);
        std::fs::write(w.manifest(), manifest_text(&w.team)).unwrap();
        // The person's own folders, as the person made them: on rootless Podman the
        // unprivileged user's (its state folder, its manifests, which it may edit).
        w.give(&[
            "",
            "work",
            "state",
            "state2",
            "sessions",
            "sessions2",
            "m",
            "other",
            "m/team.yaml",
        ]);
        w
    }

    /// The person's uid: root's, or the rootless user's.
    fn person(&self) -> u32 {
        match self.engine {
            Engine::Rootless => rootless_user().1,
            _ => 0,
        }
    }

    /// The uid of a member with no `user`: 65534 when ateam runs as root and the Team's
    /// folder is root's; the user itself on rootless Podman (`userns=keep-id`).
    fn member_uid(&self) -> u32 {
        match self.engine {
            Engine::Rootless => rootless_user().1,
            _ => 65534,
        }
    }

    /// `ateam top` as the engine's user, in a terminal of the test's own.
    fn top(&self) -> common::terminal::Terminal {
        let mut c = common::ateam_command(self.engine, &self.root().join("state"));
        c.arg("top");
        let command = format!("{}; sleep 100000", common::shell_line(&c));
        common::terminal::Terminal::new(&self.root(), 120, 30, &command)
    }

    fn manifest(&self) -> PathBuf {
        self.root().join("m/team.yaml")
    }

    fn ateam_in(&self, state: &str, args: &[&str]) -> Output {
        common::ateam_command(self.engine, &self.root().join(state))
            .args(args)
            .current_dir(self.root())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn inside(&self, member: &str, script: &str) -> String {
        let out = self.ateam(&[
            "exec", member, "--team", &self.team, "--", "sh", "-c", script,
        ]);
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }

    fn pending(&self) -> Vec<serde_json::Value> {
        let out = self.ok(&["approvals", "--team", &self.team, "-o", "json"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The last line of member `a`'s egress log: its proxy's last decision.
    fn last_egress(&self) -> String {
        let out = self.ateam(&["logs", "a", "--team", &self.team, "--egress"]);
        text(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    }

    /// `path`'s owner uid and permission bits.
    fn owner_mode(path: &Path) -> (u32, u32) {
        use std::os::unix::fs::MetadataExt;
        let meta =
            std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (meta.uid(), meta.mode() & 0o7777)
    }

    /// A file of member `a`'s below the state folder.
    fn member_file(&self, rel: &str) -> PathBuf {
        self.root()
            .join("state/teams")
            .join(&self.team)
            .join("members/a")
            .join(rel)
    }

    fn container(&self) -> String {
        let out = self.ok(&["status", &self.team, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "a")
            .unwrap()["containerId"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// The second team, in `state2`; the common world ends the first.
impl Drop for World {
    fn drop(&mut self) {
        let _ = self.ateam_in(
            "state2",
            &["delete", "--team", &format!("{}-w", self.team), "--purge"],
        );
    }
}

/// A team of a second state folder whose member writes the first team's manifests folder:
/// its own validation cannot know that folder, so only the write's own check stands.
fn other_store_writing(w: &World, folder: &Path) -> PathBuf {
    let file = w.root().join("other/team.yaml");
    let yaml = format!(
        r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}-w}}
spec: {{image: ateam-demo:latest, sessionDir: ../sessions2, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ../work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: writes}}
spec: {{write: ["{folder}"]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: writer}}
spec: {{parent: lead, access: writes, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
"#,
        team = w.team,
        folder = folder.display()
    );
    std::fs::write(&file, yaml).unwrap();
    let uid = w.person();
    std::os::unix::fs::chown(&file, Some(uid), Some(uid)).unwrap();
    file
}

fn approvals_from_inside_a_member(engine: Engine) {
    let w = World::new(engine);
    let manifest = w.manifest();
    w.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let before = w.container();
    let original = std::fs::read_to_string(&manifest).unwrap();
    let (id, docker_id) = two_refusals_are_pending(&w);
    never_what_status_would_not_offer(&w, &id, &docker_id, &original);
    nothing_written_while_a_member_writes_there(&w, &id, &original);
    let expected = allowed_always(&w, &id, &original, &before);
    denied_always(&w, &expected, &before);
}

/// A refused name and a refused CONNECT to the Docker API of the host's loopback, from
/// inside member `a`: two pending approvals, in `approvals`, `status` and `events`; their
/// ids (the name's, the Docker API's).
fn two_refusals_are_pending(w: &World) -> (String, String) {
    let engine = w.engine;
    // Refused: a name its list does not have, and the Docker API of the host's loopback.
    let got = w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    assert!(got.contains("403"), "{engine:?}: {got}");
    let got = w.inside(
        "a",
        "printf 'CONNECT 127.0.0.1:2375 HTTP/1.1\\r\\n\\r\\n' | nc 127.0.0.1 3128 2>&1",
    );
    assert!(got.contains("403"), "{engine:?}: {got}");

    let pending = w.pending();
    assert_eq!(pending.len(), 2, "{engine:?}: {pending:#?}");
    let find = |entry: &str| {
        pending
            .iter()
            .find(|p| p["want"]["entry"] == entry)
            .unwrap_or_else(|| panic!("{engine:?}: no approval for {entry}: {pending:#?}"))
            .clone()
    };
    let name = find(&format!("{NAME}:{PORT}"));
    let docker = find("127.0.0.1:2375");
    assert_eq!(name["member"], "a");
    assert_eq!(name["grant"], "net-a");
    assert_eq!(name["notApprovable"], serde_json::Value::Null);
    assert!(
        docker["notApprovable"]
            .as_str()
            .unwrap()
            .contains("Docker API"),
        "{docker:#?}"
    );
    let (id, docker_id) = (
        name["id"].as_str().unwrap().to_string(),
        docker["id"].as_str().unwrap().to_string(),
    );
    // `status` shows them, by id, and `events` has an event of each.
    let status = w.ok(&["status", &w.team]);
    assert!(
        status.contains(&id) && status.contains(&docker_id),
        "{status}"
    );
    let events = w.ok(&["events", &w.team]);
    let pending_events: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("approval-pending"))
        .collect();
    assert_eq!(pending_events.len(), 2, "{engine:?}: {events}");
    assert!(
        pending_events
            .iter()
            .any(|l| l.contains(&id) && l.contains("--once|--always"))
            && pending_events
                .iter()
                .any(|l| l.contains(&docker_id) && l.contains("not approvable")),
        "{engine:?}: {events}"
    );
    (id, docker_id)
}

/// What status never offers is not approved from here (exit 4, nothing written); deny once
/// dismisses it, and the name's ask `id` alone is left.
fn never_what_status_would_not_offer(w: &World, id: &str, docker_id: &str, original: &str) {
    let engine = w.engine;
    let out = w.ateam(&["approvals", "allow", docker_id, "--always"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Docker API"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(w.manifest()).unwrap(), original);
    // Deny once dismisses it.
    w.ok(&["approvals", "deny", docker_id, "--once"]);
    let left: Vec<String> = w
        .pending()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, [id], "{engine:?}");
}

/// A member (of another state folder) can write the manifests' folder: allow always writes
/// nothing (exit 4). The folder is the person's again after.
fn nothing_written_while_a_member_writes_there(w: &World, id: &str, original: &str) {
    let engine = w.engine;
    let other = other_store_writing(w, &w.root().join("m"));
    // The writer's uid may write the folder, as its grant says (rootless: the user's own).
    let uid = w.member_uid();
    std::os::unix::fs::chown(w.root().join("m"), Some(uid), Some(uid)).unwrap();
    let out = w.ateam_in("state2", &["apply", "-f", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = w.ateam(&["approvals", "allow", id, "--always"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("writable"),
        "{engine:?}: {}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(w.manifest()).unwrap(), original);
    let out = w.ateam_in(
        "state2",
        &["delete", "--team", &format!("{}-w", w.team), "--purge"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let uid = w.person();
    std::os::unix::fs::chown(w.root().join("m"), Some(uid), Some(uid)).unwrap();
}

/// Allow always: one line more in the allow list, the rest of the file as it was, and still
/// the person's file (owner and mode kept: the rootless user's on rootless Podman); applied
/// hot (container `before` stays), `diff` clean, the next try past the list. The file now.
fn allowed_always(w: &World, id: &str, original: &str, before: &str) -> String {
    let engine = w.engine;
    let manifest = w.manifest();
    let (owner, mode) = World::owner_mode(&manifest);
    assert_eq!(owner, w.person(), "{engine:?}");
    let said = w.ok(&["approvals", "allow", id, "--always"]);
    assert!(said.contains("added"), "{said}");
    assert_eq!(World::owner_mode(&manifest), (owner, mode), "{engine:?}");
    let now = std::fs::read_to_string(&manifest).unwrap();
    let expected = original.replace(
        "      - example.com   # the docs\n",
        &format!("      - example.com   # the docs\n      - {NAME}:{PORT}\n"),
    );
    assert_eq!(now, expected, "{engine:?}");
    // Applied hot: the same container, and nothing left to do.
    assert_eq!(w.container(), before, "{engine:?}: a new container");
    let out = w.ateam(&["diff", "-f", manifest.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{engine:?}: diff after allow always:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(w.pending().is_empty(), "{engine:?}: {:#?}", w.pending());
    // The next try passes the list: refused now for its address alone (nothing connects).
    let got = w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    assert!(got.contains("403"), "{engine:?}: {got}");
    let last = w.last_egress();
    assert!(
        last.contains("loopback address") && !last.contains("not in this member's allow list"),
        "{engine:?}: {last}"
    );
    expected
}

/// Deny always: written into the grant's deny list (made, as the spec's own style), the same
/// container, nothing left to do, and never asked again; a name both allowed and denied
/// (edited by hand, `expected` the file before) is refused by the proxy for the deny.
fn denied_always(w: &World, expected: &str, before: &str) {
    let engine = w.engine;
    let manifest = w.manifest();
    let m = manifest.to_str().unwrap();
    let other = "nope.ateam.test:18094";
    w.inside("a", &format!("wget -q -O - http://{other}/ 2>&1"));
    // Beside it, the name allowed above and refused for its address: shown, not approvable.
    let pending = w.pending();
    assert_eq!(pending.len(), 2, "{engine:?}: {pending:#?}");
    let asked = pending
        .iter()
        .find(|p| p["want"]["entry"] == other)
        .unwrap();
    let deny_id = asked["id"].as_str().unwrap().to_string();
    let said = w.ok(&["approvals", "deny", &deny_id, "--always"]);
    assert!(said.contains("deny list"), "{said}");
    let line = format!("      - {NAME}:{PORT}\n");
    let denied = expected.replace(&line, &format!("{line}  deny:\n    - {other}\n"));
    assert_eq!(
        std::fs::read_to_string(&manifest).unwrap(),
        denied,
        "{engine:?}"
    );
    assert_eq!(w.container(), before, "{engine:?}: a new container");
    assert_eq!(
        w.ateam(&["diff", "-f", m]).status.code(),
        Some(0),
        "{engine:?}"
    );
    w.inside("a", &format!("wget -q -O - http://{other}/ 2>&1"));
    let approvable: Vec<_> = w
        .pending()
        .into_iter()
        .filter(|p| p["notApprovable"].is_null())
        .collect();
    assert!(approvable.is_empty(), "{engine:?}: {:#?}", w.pending());
    assert_eq!(w.pending().len(), 1, "{engine:?}: {:#?}", w.pending());
    let last = w.last_egress();
    assert!(last.contains("deny list"), "{engine:?}: {last}");

    // Denied and allowed at once: refused, by the proxy, with no new container.
    let both = denied.replace(
        &format!("    - {other}\n"),
        &format!("    - {other}\n    - {NAME}:{PORT}\n"),
    );
    std::fs::write(&manifest, both).unwrap();
    w.ok(&["apply", "-f", m]);
    assert_eq!(w.container(), before, "{engine:?}: a new container");
    let got = w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    assert!(got.contains("403"), "{engine:?}: {got}");
    let last = w.last_egress();
    assert!(
        last.contains(&format!("{NAME}:{PORT} is in this member's deny list")),
        "{engine:?}: {last}"
    );
    // Denied, so not even shown as refused for its address any more.
    assert!(w.pending().is_empty(), "{engine:?}: {:#?}", w.pending());
}

/// Allow once lets the member's next try through, for its present start only; it changes no
/// manifest and leaves `diff` clean; a restart (a new start) ends it. And the member sees no
/// file of the answers, nor can it make one where its proxy reads them.
fn allowed_once_is_gone_at_the_next_start(engine: Engine) {
    let w = World::new(engine);
    let manifest = w.manifest();
    let m = manifest.to_str().unwrap();
    w.ok(&["apply", "-f", m]);
    let original = std::fs::read_to_string(&manifest).unwrap();
    let last_line = |w: &World| w.last_egress();
    let knock = |w: &World| w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    knock(&w);
    assert!(
        last_line(&w).contains("not in this member's allow list"),
        "{}",
        last_line(&w)
    );
    let pending = w.pending();
    assert_eq!(pending.len(), 1, "{engine:?}: {pending:#?}");
    let id = pending[0]["id"].as_str().unwrap().to_string();

    let said = w.ok(&["approvals", "allow", &id, "--once"]);
    assert!(said.contains("until its next start"), "{said}");
    // The record is the person's (the rootless user's on rootless Podman), what the proxy
    // reads is the proxy's, as its policy is (the member's uid: 65534 here as root, the
    // rootless user on rootless Podman); neither is anyone else's to read.
    let record = World::owner_mode(&w.member_file("approvals.json"));
    assert_eq!(record, (w.person(), 0o600), "{engine:?}: approvals.json");
    for file in ["egress/policy.json", "egress/once.json"] {
        let got = World::owner_mode(&w.member_file(file));
        assert_eq!(got, (w.member_uid(), 0o600), "{engine:?}: {file}");
    }
    assert!(w.pending().is_empty(), "{engine:?}: {:#?}", w.pending());
    // The next try passes the list (refused for its loopback address alone).
    knock(&w);
    let last = last_line(&w);
    assert!(
        last.contains("loopback address") && !last.contains("allow list"),
        "{engine:?}: {last}"
    );
    // No manifest changed, nothing to apply.
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), original);
    let out = w.ateam(&["diff", "-f", m]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{engine:?}: {}",
        text(&out.stdout)
    );
    // The member has no answer of its own to give: nothing of them where it can look or write.
    let inside = w.inside(
        "a",
        "ls -a /.ateam; touch /.ateam/once.json 2>&1; touch /.ateam/approvals.json 2>&1",
    );
    assert!(
        !inside.contains("approvals.json\n") && inside.matches("Read-only").count() == 2,
        "{engine:?}: {inside}"
    );

    // A new start: the allow once is gone, and the ask is pending again.
    w.ok(&["restart", "a", "--team", &w.team]);
    knock(&w);
    assert!(
        last_line(&w).contains("not in this member's allow list"),
        "{engine:?}: {}",
        last_line(&w)
    );
    let again = w.pending();
    assert_eq!(again.len(), 1, "{engine:?}: {again:#?}");
    assert_eq!(again[0]["id"], id.as_str());
}

/// `ateam top` in a real terminal (tmux): the selected member's pending approval is in its
/// detail, `p` asks how to answer it, and `o` allows it once, as `approvals allow --once`.
fn top_answers_an_approval(engine: Engine) {
    let w = World::new(engine);
    let m = w.manifest();
    w.ok(&["apply", "-f", m.to_str().unwrap()]);
    w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    let pending = w.pending();
    assert_eq!(pending.len(), 1, "{engine:?}: {pending:#?}");
    let id = pending[0]["id"].as_str().unwrap().to_string();
    let t = w.top();
    let row = format!("{}/a ", w.team);
    let s = t.wait_until("member a's row", |s| s.lines().any(|l| l.starts_with(&row)));
    // Rows come by name: a is above lead; select it.
    let lines: Vec<&str> = s.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with(&format!("{}/", w.team)))
        .unwrap();
    let at = lines.iter().position(|l| l.starts_with(&row)).unwrap();
    for _ in first..at {
        t.keys(&["Down"]);
    }
    t.wait_for(&format!("pending approval (p answers): {id}"));
    t.keys(&["p"]);
    t.wait_for("o allow once");
    t.keys(&["o"]);
    t.wait_for(&format!("{id} of {}/a: allowed once", w.team));
    t.keys(&["q"]);
    assert!(w.pending().is_empty(), "{engine:?}: {:#?}", w.pending());
    let out = w.ateam(&["logs", "a", "--team", &w.team, "--egress"]);
    assert_eq!(out.status.code(), Some(0));
    w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    let logs = text(
        &w.ateam(&["logs", "a", "--team", &w.team, "--egress"])
            .stdout,
    );
    assert!(
        logs.lines()
            .last()
            .unwrap_or_default()
            .contains("loopback address"),
        "{engine:?}: {logs}"
    );
}

/// A member under another member is never offered more than its parent has: the ask is
/// shown, and neither allow once nor allow always grants it; its parent may be.
fn an_approval_never_exceeds_the_parents_grant(engine: Engine) {
    let w = World::new(engine);
    let nested = format!(
        "{}---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net-b}}
spec: {{read: [../work], network: {{allow: [example.com]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: b}}
spec: {{parent: a, access: net-b, command: [sleep, \"100000\"], resources: {{memory: 64Mi, pids: 64}}}}
",
        manifest_text(&w.team)
    );
    let manifest = w.manifest();
    std::fs::write(&manifest, &nested).unwrap();
    w.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    for m in ["a", "b"] {
        w.inside(m, &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    }
    let pending = w.pending();
    assert_eq!(pending.len(), 2, "{engine:?}: {pending:#?}");
    let of = |m: &str| pending.iter().find(|p| p["member"] == m).unwrap().clone();
    let why = of("b")["notApprovable"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("parent `a`") && why.contains("net-a"),
        "{engine:?}: {why}"
    );
    assert!(of("a")["notApprovable"].is_null(), "{:#?}", of("a"));
    let b = of("b")["id"].as_str().unwrap().to_string();
    for how in ["--once", "--always"] {
        let out = w.ateam(&["approvals", "allow", &b, how]);
        assert_eq!(
            out.status.code(),
            Some(4),
            "{engine:?}: {how}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("parent `a`"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), nested);
    assert!(
        !w.root()
            .join(format!("state/teams/{}/members/b/egress/once.json", w.team))
            .exists()
    );
}

/// A learning run: for its bounded time the member gets past its list for what the person
/// could approve (never a local address's Docker port), each pass an ask; the proposal is a
/// diff of the manifests, nothing written; after it, the list holds again.
fn a_learning_run_proposes_what_was_used(engine: Engine) {
    let w = World::new(engine);
    let manifest = w.manifest();
    let m = manifest.to_str().unwrap();
    let original = std::fs::read_to_string(&manifest).unwrap();
    let said = w.ok(&["apply", "-f", m, "--learn", "10s"]);
    // The run ends 10 s after the apply's end, which is before this.
    let applied = std::time::Instant::now();
    assert!(said.contains("learning until"), "{said}");
    let last_line = |w: &World| w.last_egress();
    let knock = |w: &World| w.inside("a", &format!("wget -q -O - http://{NAME}:{PORT}/ 2>&1"));
    // Past the list (refused for its loopback address alone: nothing leaves this machine).
    knock(&w);
    let last = last_line(&w);
    assert!(
        last.contains("loopback address") && !last.contains("allow list"),
        "{engine:?}: {last}"
    );
    // What could never be approved is never learned.
    w.inside(
        "a",
        "printf 'CONNECT 127.0.0.1:2375 HTTP/1.1\\r\\n\\r\\n' | nc 127.0.0.1 3128 2>&1",
    );
    assert!(
        last_line(&w).contains("not in this member's allow list"),
        "{engine:?}: {}",
        last_line(&w)
    );
    let pending = w.pending();
    let learned = pending
        .iter()
        .find(|p| p["want"]["entry"] == format!("{NAME}:{PORT}"))
        .unwrap_or_else(|| panic!("{engine:?}: {pending:#?}"));
    assert!(learned["notApprovable"].is_null(), "{learned:#?}");
    // The proposal: a diff of the manifest, one line added; nothing written.
    let out = w.ateam(&["approvals", "--team", &w.team, "--proposal"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let diff = text(&out.stdout);
    assert!(
        diff.contains(&format!("--- {m}\n"))
            && diff.contains(&format!("+      - {NAME}:{PORT}\n"))
            && diff.lines().filter(|l| l.starts_with('+')).count() == 2,
        "{engine:?}: {diff}"
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), original);
    // Over: the list holds again.
    let left = Duration::from_secs(11).saturating_sub(applied.elapsed());
    std::thread::sleep(left);
    knock(&w);
    assert!(
        last_line(&w).contains("not in this member's allow list"),
        "{engine:?}: {}",
        last_line(&w)
    );
    // A run longer than an hour is refused before anything is applied.
    let out = w.ateam(&["apply", "-f", m, "--learn", "2h"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

macro_rules! on_every_engine {
    ($($engine:ident => $e:expr),* $(,)?) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn approvals_from_inside_a_member() {
                    super::approvals_from_inside_a_member($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn allowed_once_is_gone_at_the_next_start() {
                    super::allowed_once_is_gone_at_the_next_start($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn top_answers_an_approval() {
                    super::top_answers_an_approval($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn an_approval_never_exceeds_the_parents_grant() {
                    super::an_approval_never_exceeds_the_parents_grant($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_learning_run_proposes_what_was_used() {
                    super::a_learning_run_proposes_what_was_used($e);
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
