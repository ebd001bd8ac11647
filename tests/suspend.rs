//! `ateam suspend`, `ateam resume` and `ateam fork` on Docker, rootful and rootless Podman: a suspended
//! member's container, proxy and memory are gone and its HOME, grant and transcript are kept;
//! apply and a running controller keep it down; `resume` brings it back through its gate with
//! HOME as it was, and its proxy allows exactly what it allowed; a grant swapped for a symlink
//! while it was suspended holds the resume at the gate. And `ateam fork`: a fork of a running
//! member gets its own copies of the write grant, transcript and HOME and its own proxy; the
//! two go on apart; a link or FIFO the origin planted is copied as a link or left out; apply
//! keeps the fork; a taken name is refused before anything is copied; `--drop` removes it and
//! keeps its copies. The real binary, judged from outside (the engine's CLI, the proxy's pid,
//! the files) and from inside (busybox in the member). Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

#[macro_use]
mod common;
use common::{Engine, eventually, text};

/// The common world and what is this crate's own: a controller it may run.
struct World {
    w: common::World,
    controller: Option<Child>,
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
            w: common::World::new(engine, "suspend", tag),
            controller: None,
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

    fn member_dir(&self, member: &str) -> PathBuf {
        self.state()
            .join("teams")
            .join(&self.team)
            .join("members")
            .join(member)
    }

    fn proxy_pid(&self, member: &str) -> Option<i32> {
        std::fs::read_to_string(self.member_dir(member).join("egress/proxy.pid"))
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

    /// `ateam controller` in a process group of its own: on rootless Podman it runs under
    /// `runuser`, and the group reaches it where a kill of the child would not.
    fn start_controller(&mut self) {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(self.path("controller.log")).unwrap();
        let child = self
            .command()
            .args(["controller", "-f", "team.yaml"])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.controller = Some(child);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let group = format!("-{}", c.id());
            let _ = std::process::Command::new("kill")
                .args(["-TERM", "--", &group])
                .status();
            let _ = c.wait();
        }
    }
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Suspend frees the member (container, proxy, memory) and keeps HOME, grant and transcript;
/// apply keeps it down and calls that no drift; resume brings HOME back through the gate,
/// and its proxy allows exactly what it allowed.
fn suspend_keeps_the_state_and_resume_brings_it_back(engine: Engine) {
    let allowed = common::serve("allowed-endpoint");
    let other = common::serve("other-endpoint");
    let w = World::new(engine, "sr", allowed);
    w.apply();
    let got = w.inside("a", &format!(
        "echo kept > $HOME/note && mkdir -p $HOME/.cache/x && echo deep > $HOME/.cache/x/y && echo mine > {}/file && wget -q -O - http://127.0.0.1:{allowed}/",
        w.path("work").display()
    ));
    assert!(got.contains("allowed-endpoint"), "{engine:?}: {got}");
    let proxy = w.proxy_pid("a").expect("a proxy runs");
    let container = w.containers();
    assert_eq!(container.len(), 1, "{engine:?}: {container:?}");

    let said = w.ok(&["suspend", "a", "--team", &w.team]);
    assert!(
        said.contains("suspended: its HOME kept in") && said.contains("freed"),
        "{engine:?}: {said}"
    );
    assert!(w.containers().is_empty(), "{engine:?}: the container went");
    assert!(
        eventually(Duration::from_secs(5), || !alive(proxy)),
        "{engine:?}: its proxy stopped"
    );
    assert!(
        !w.member_dir("a").join("ctl/egress.sock").exists(),
        "{engine:?}: nothing listens for it while it is suspended"
    );
    let row = w.row("a");
    assert_eq!(row["state"], "suspended", "{engine:?}: {row}");
    assert_eq!(row["drifted"], false, "{engine:?}: {row}");
    assert_eq!(
        std::fs::read_to_string(w.path("work/file")).unwrap(),
        "mine\n",
        "{engine:?}: its grant is as it left it"
    );
    // An apply keeps it down, and says nothing changed; a second suspend changes nothing.
    let applied = w.apply();
    assert!(
        applied.to_lowercase().contains("no changes"),
        "{engine:?}: {applied}"
    );
    assert!(w.containers().is_empty(), "{engine:?}");
    let again = w.ateam(&["suspend", "a", "--team", &w.team]);
    assert_ne!(again.status.code(), Some(0), "{engine:?}");
    assert!(
        text(&again.stderr).contains("suspended already"),
        "{engine:?}: {}",
        text(&again.stderr)
    );

    let said = w.ok(&["resume", "a", "--team", &w.team]);
    assert!(said.contains("resumed"), "{engine:?}: {said}");
    assert_eq!(w.row("a")["state"], "running", "{engine:?}");
    let got = w.inside(
        "a",
        "cat $HOME/note $HOME/.cache/x/y; ls -a $ATEAM_SESSION_DIR",
    );
    assert!(
        got.contains("kept\ndeep\n") && !got.contains(".ateam-suspended-home.tar"),
        "{engine:?}: HOME is back, its archive gone: {got}"
    );
    let got = w.inside(
        "a",
        &format!("wget -q -O - http://127.0.0.1:{allowed}/ 2>&1"),
    );
    assert!(got.contains("allowed-endpoint"), "{engine:?}: {got}");
    let got = w.inside("a", &format!("wget -q -O - http://127.0.0.1:{other}/ 2>&1"));
    assert!(
        got.contains("403") && !got.contains("other-endpoint"),
        "{engine:?}: {got}"
    );
    let again = w.ateam(&["resume", "a", "--team", &w.team]);
    assert!(
        text(&again.stderr).contains("is not suspended"),
        "{engine:?}: {}",
        text(&again.stderr)
    );
}

/// A running controller does not undo a suspension, and brings nothing up until resume.
fn a_controller_keeps_a_suspended_member_down(engine: Engine) {
    let mut w = World::new(engine, "sc", 9);
    w.start_controller();
    assert!(
        eventually(Duration::from_secs(60), || w.containers().len() == 1),
        "{engine:?}: the controller brings the member up"
    );
    assert!(
        eventually(Duration::from_secs(30), || w.row("a")["state"] == "running"),
        "{engine:?}"
    );
    w.ok(&["suspend", "a", "--team", &w.team]);
    // The controller sees the container go (an engine event) and looks again.
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        w.containers().is_empty(),
        "{engine:?}: the controller left it down: {:?}",
        w.containers()
    );
    w.ok(&["resume", "a", "--team", &w.team]);
    assert_eq!(w.containers().len(), 1, "{engine:?}");
    assert!(
        eventually(Duration::from_secs(30), || w.row("a")["state"] == "running"),
        "{engine:?}"
    );
}

/// A grant swapped for a symlink while the member was suspended: the resume is held at the
/// gate's checks, nothing of the member runs, and the suspension can be tried again.
fn a_grant_swapped_while_suspended_holds_the_resume(engine: Engine) {
    let w = World::new(engine, "st", 9);
    w.apply();
    w.ok(&["suspend", "a", "--team", &w.team]);
    std::fs::rename(w.path("work"), w.path("work-real")).unwrap();
    std::os::unix::fs::symlink(w.path("elsewhere"), w.path("work")).unwrap();
    let out = w.ateam(&["resume", "a", "--team", &w.team]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{engine:?}: {err}");
    assert!(err.contains("not resumed"), "{engine:?}: {err}");
    assert!(
        err.contains("symlink") || err.contains("symbolic link"),
        "{engine:?}: the reason names the link: {err}"
    );
    let running = w
        .engine_cli()
        .args([
            "ps",
            "--filter",
            &format!("label=ateam.dev/team={}", w.team),
            "--format",
            "{{.Names}}",
        ])
        .output()
        .unwrap();
    assert!(
        text(&running.stdout).trim().is_empty(),
        "{engine:?}: nothing of the member runs: {}",
        text(&running.stdout)
    );
}

/// A fork of a running member: its own copies and proxy, and the two go on apart.
fn a_fork_gets_its_own_copies_and_the_two_go_on_apart(engine: Engine) {
    let allowed = common::serve("allowed-endpoint");
    let other = common::serve("other-endpoint");
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
    suspend_keeps_the_state_and_resume_brings_it_back,
    a_controller_keeps_a_suspended_member_down,
    a_grant_swapped_while_suspended_holds_the_resume,
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
    a_taken_name_is_refused_before_anything_is_copied,
);
on_every_engine!(podman:
    suspend_keeps_the_state_and_resume_brings_it_back,
    a_controller_keeps_a_suspended_member_down,
    a_grant_swapped_while_suspended_holds_the_resume,
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
    a_taken_name_is_refused_before_anything_is_copied,
);
on_every_engine!(rootless_podman:
    suspend_keeps_the_state_and_resume_brings_it_back,
    a_controller_keeps_a_suspended_member_down,
    a_grant_swapped_while_suspended_holds_the_resume,
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
    a_taken_name_is_refused_before_anything_is_copied,
);
// Under gVisor: the state is the same files, taken and put back by the member's own `tar`
// inside its sandbox, and the resumed start is judged by the gate's gVisor checks.
on_every_engine!(docker_gvisor:
    suspend_keeps_the_state_and_resume_brings_it_back,
    a_grant_swapped_while_suspended_holds_the_resume,
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
);
on_every_engine!(podman_gvisor:
    suspend_keeps_the_state_and_resume_brings_it_back,
    a_grant_swapped_while_suspended_holds_the_resume,
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
);
on_every_engine!(rootless_podman_gvisor:
    suspend_keeps_the_state_and_resume_brings_it_back,
    a_grant_swapped_while_suspended_holds_the_resume,
    a_fork_gets_its_own_copies_and_the_two_go_on_apart,
);
