//! `ateam fork` on Docker, rootful and rootless Podman: a fork of a running member gets its
//! own copies of the write grant, transcript and HOME and its own proxy; the two go on apart
//! (neither sees the other's edits); a link or FIFO the origin planted in its grant is copied
//! as a link or left out, never followed or opened; apply keeps the fork; a taken name is
//! refused before anything is copied; `--drop` removes the fork and keeps its copies. The real
//! binary, judged from outside (the engine's CLI, the files, the proxies) and from inside.
//! Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

#[macro_use]
mod common;
use common::{Engine, eventually, text};

/// A web server on the host's loopback that answers every request with `body`.
fn serve(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = c.read(&mut buf);
            let _ = write!(
                c,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// The common world (its team, on this crate's manifests).
struct World {
    w: common::World,
}

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.w
    }
}

impl World {
    /// A team whose member `a` writes `work` and reaches `127.0.0.1:<allowed>` alone.
    fn new(engine: Engine, tag: &str, allowed: u16) -> World {
        let w = World {
            w: common::World::new(engine, "fork", tag),
        };
        w.dirs(&["work", "state", "sessions", "elsewhere"]);
        w.give(&["", "work", "state", "sessions", "elsewhere"]);
        if w.rootless_person().is_none() {
            // Members run as nobody (ateam runs as root here): their write grant is theirs.
            for d in ["work", "elsewhere"] {
                std::os::unix::fs::chown(w.path(d), Some(65534), Some(65534)).unwrap();
            }
        }
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], network: {{allow: ["127.0.0.1:{allowed}"]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: g, restart: Always, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
"#,
            team = w.team
        );
        w.write("team.yaml", &yaml);
        w
    }

    fn apply(&self) -> String {
        self.ok(&["apply", "-f", "team.yaml"])
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

    /// The names of the team's containers on the engine, as the engine lists them.
    fn containers(&self) -> Vec<String> {
        let label = format!("label=ateam.dev/team={}", self.team);
        let out = self
            .engine_cli()
            .args(["ps", "-a", "--filter", &label, "--format", "{{.Names}}"])
            .output()
            .unwrap();
        text(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    fn proxy_pid(&self, member: &str) -> Option<i32> {
        let dir = self
            .state()
            .join("teams")
            .join(&self.team)
            .join("members")
            .join(member);
        std::fs::read_to_string(dir.join("egress/proxy.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn row(&self, member: &str) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == member)
            .cloned()
            .unwrap()
    }
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A fork of a running member: its own copies and proxy, and the two go on apart.
fn a_fork_gets_its_own_copies_and_the_two_go_on_apart(engine: Engine) {
    let allowed = serve("allowed-endpoint");
    let other = serve("other-endpoint");
    let w = World::new(engine, "fk", allowed);
    w.apply();
    let work = w.path("work");
    let got = w.inside(
        "a",
        &format!(
            "echo kept > $HOME/note && echo origin > {0}/file && mkdir {0}/sub && echo deep > {0}/sub/f && ln -s /etc {0}/link && mkfifo {0}/pipe && echo ok",
            work.display()
        ),
    );
    assert!(got.contains("ok"), "{engine:?}: {got}");
    let said = w.ok(&["fork", "a", "--as", "b", "--team", &w.team]);
    assert!(
        said.contains("forked from a") && said.contains("HOME"),
        "{engine:?}: {said}"
    );
    let row = w.row("b");
    assert_eq!(row["state"], "running", "{engine:?}: {row}");
    assert_eq!(row["origin"]["kind"], "forked", "{engine:?}: {row}");
    assert_eq!(row["origin"]["forkedFrom"], "a", "{engine:?}: {row}");
    assert_eq!(
        w.row("a")["state"],
        "running",
        "{engine:?}: the origin runs on"
    );
    // Its own copy: HOME, the files, the link kept as a link, the FIFO left out.
    let got = w.inside(
        "b",
        "cd $ATEAM_WRITE_DIRS && cat $HOME/note file sub/f && readlink link && ls -a && echo fork > file && echo new > only-b",
    );
    assert!(
        got.contains("kept\norigin\ndeep\n/etc\n") && !got.contains("pipe"),
        "{engine:?}: {got}"
    );
    assert!(
        !got.contains("[exit Some(1)]"),
        "{engine:?}: the fork writes its copy: {got}"
    );
    // The origin's files are as it left them; its own edit does not reach the fork.
    assert_eq!(
        std::fs::read_to_string(work.join("file")).unwrap(),
        "origin\n"
    );
    assert!(!work.join("only-b").exists(), "{engine:?}");
    w.inside("a", &format!("echo later > {}/file", work.display()));
    let got = w.inside("b", "cat $ATEAM_WRITE_DIRS/file");
    assert!(got.starts_with("fork\n"), "{engine:?}: {got}");
    // On the host, the copy holds a link, not /etc's files.
    let copy = w.path("sessions/forks/b/0-work");
    let link = std::fs::symlink_metadata(copy.join("link")).unwrap();
    assert!(link.file_type().is_symlink(), "{engine:?}");
    assert!(
        !copy.join("pipe").exists(),
        "{engine:?}: a FIFO is never copied"
    );
    // Its own proxy, with the origin's allow list.
    let (pa, pb) = (w.proxy_pid("a").unwrap(), w.proxy_pid("b").unwrap());
    assert_ne!(pa, pb, "{engine:?}");
    let got = w.inside(
        "b",
        &format!("wget -q -O - http://127.0.0.1:{allowed}/ 2>&1"),
    );
    assert!(got.contains("allowed-endpoint"), "{engine:?}: {got}");
    let got = w.inside("b", &format!("wget -q -O - http://127.0.0.1:{other}/ 2>&1"));
    assert!(got.contains("403"), "{engine:?}: {got}");
    // An apply keeps it: a fork is desired while its origin is.
    let applied = w.apply();
    assert!(
        applied.to_lowercase().contains("no changes"),
        "{engine:?}: {applied}"
    );
    // Dropped: its container and proxy go, its copies stay.
    let said = w.ok(&["fork", "--drop", "b", "--team", &w.team]);
    assert!(said.contains("dropped"), "{engine:?}: {said}");
    let names = w.containers();
    assert_eq!(names.len(), 1, "{engine:?}: {names:?}");
    assert!(
        eventually(Duration::from_secs(5), || !alive(pb)),
        "{engine:?}: its proxy stopped"
    );
    assert!(alive(pa), "{engine:?}: the origin's proxy runs on");
    assert!(
        copy.join("file").exists(),
        "{engine:?}: its copies are kept"
    );
}

/// A name something has or had is refused before anything is copied.
fn a_taken_name_is_refused_before_anything_is_copied(engine: Engine) {
    let w = World::new(engine, "fn", 9);
    w.apply();
    for (name, words) in [
        ("a", "is taken"),
        ("lead", "is taken"),
        ("Not_A_Name", "not a valid name"),
    ] {
        let out = w.ateam(&["fork", "a", "--as", name, "--team", &w.team]);
        let err = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{engine:?}: {name}: {err}");
        assert!(err.contains(words), "{engine:?}: {name}: {err}");
    }
    assert!(
        !w.path("sessions/forks").exists(),
        "{engine:?}: nothing was copied"
    );
    assert_eq!(w.containers().len(), 1, "{engine:?}");
}

on_every_engine!(docker:
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
    a_taken_name_is_refused_before_anything_is_copied,
);
on_every_engine!(podman:
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
    a_taken_name_is_refused_before_anything_is_copied,
);
on_every_engine!(rootless_podman:
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
    a_taken_name_is_refused_before_anything_is_copied,
);
