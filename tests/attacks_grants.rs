//! Attacks on the invariant "a grant reaches only what it names, judged across the whole
//! store", each driving the real `ateam` binary as a user (or an attacker writing manifests)
//! would:
//!
//! - a grant that is another name (a bind mount) of a team's transcripts folder, or that holds
//!   such a mount, in the same apply or of a team applied before;
//! - a grant that contains a container engine's data root or socket folder;
//! - a `sessionDir` that is exactly a shared or system folder (`/tmp`, `/run`, `$HOME`...);
//! - memory caps that fit one team but not the store's teams together;
//! - a file system mounted below a read-only grant, which the engines leave writable.
//!
//! Cases that need no engine run in every `cargo nextest run`. Cases that apply a team are
//! `#[ignore]`d engine tests, run by scripts/test.sh on Docker and rootful Podman. Bind and
//! tmpfs mounts need root, as the engine tests do.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Lab {
    dir: tempfile::TempDir,
    /// `docker` or `podman`, for cases that apply; None: no engine may be reached.
    engine: Option<&'static str>,
    /// Teams this lab applied, deleted on drop.
    teams: std::cell::RefCell<Vec<String>>,
    /// Mounts this lab made, unmounted on drop (innermost first).
    mounts: std::cell::RefCell<Vec<PathBuf>>,
}

impl Lab {
    fn new(engine: Option<&'static str>) -> Lab {
        Lab::new_in(engine, &std::env::temp_dir())
    }

    /// A lab in `parent`, for cases where the lab must not lie inside /tmp.
    fn new_in(engine: Option<&'static str>, parent: &Path) -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("ateam-attack-")
            .tempdir_in(parent)
            .unwrap();
        Lab {
            dir,
            engine,
            teams: Default::default(),
            mounts: Default::default(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// One store for every team of the lab: the point is what teams applied before do.
    fn state(&self) -> PathBuf {
        self.root().join("state")
    }

    fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.root().join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// A unique team name: cases run in parallel, and on two engines.
    fn team_name(&self, tag: &str) -> String {
        let e = self.engine.map_or("n", |e| &e[..1]);
        format!("{tag}{e}{}", std::process::id() % 100000)
    }

    /// Writes `yaml` as `<rel>.yaml` in the lab and returns its path.
    fn manifest(&self, rel: &str, yaml: &str) -> PathBuf {
        let p = self.root().join(format!("{rel}.yaml"));
        std::fs::write(&p, yaml).unwrap();
        p
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ateam"));
        c.env("ATEAM_STATE_DIR", self.state());
        match self.engine {
            Some(e) => {
                c.arg("--backend").arg(e);
                c.env("DOCKER_HOST", var("ATEAM_TEST_DOCKER"))
                    .env("CONTAINER_HOST", var("ATEAM_TEST_PODMAN_ROOTFUL"));
            }
            None => {
                // No engine is reachable: a refusal must come from validation.
                c.arg("--backend").arg("docker");
                c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
                    .env("CONTAINER_HOST", "unix:///nonexistent/podman.sock");
            }
        }
        c.args(args);
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn apply(&self, manifest: &Path) -> Output {
        self.ateam(&["apply", "-f", manifest.to_str().unwrap()])
    }

    /// Applies a team that must be accepted, and remembers it for clean-up.
    fn apply_ok(&self, team: &str, manifest: &Path) {
        self.teams.borrow_mut().push(team.to_string());
        let out = self.apply(manifest);
        assert_eq!(
            out.status.code(),
            Some(0),
            "apply of {team}: {}",
            both(&out)
        );
    }

    /// Applies a team that must be refused: exit 3 or 4, the refusal contains every one of `words`,
    /// and neither a container nor a stored record of the team exists afterwards.
    fn apply_refused(&self, team: &str, manifest: &Path, words: &[&str]) {
        self.teams.borrow_mut().push(team.to_string());
        let out = self.apply(manifest);
        self.assert_refused(team, &out, words);
    }

    /// `out` is a refusal of `team`, as `apply_refused` says.
    fn assert_refused(&self, team: &str, out: &Output, words: &[&str]) {
        let err = text(&out.stderr);
        // 3: refused by validation; 4: refused by apply's checks before any change.
        assert!(
            matches!(out.status.code(), Some(3 | 4)),
            "{team} was not refused: {}",
            both(out)
        );
        for w in words {
            assert!(err.contains(w), "the refusal does not say {w:?}:\n{err}");
        }
        assert!(
            !self.state().join("teams").join(team).exists(),
            "the refused team {team} left state behind"
        );
        let left: Vec<String> = self
            .containers()
            .into_iter()
            .filter(|n| n.starts_with(&format!("ateam-{team}-")))
            .collect();
        assert!(left.is_empty(), "the refused team has containers: {left:?}");
    }

    /// Bind-mounts `from` on `to` (which is created), unmounted when the lab is dropped.
    fn bind(&self, from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        run_ok(Command::new("mount").arg("--bind").arg(from).arg(to));
        self.mounts.borrow_mut().push(to.to_path_buf());
    }

    /// A small tmpfs on `at` (which is created), unmounted when the lab is dropped.
    fn tmpfs(&self, at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=1m,mode=1777", "ateam-attack"])
                .arg(at),
        );
        self.mounts.borrow_mut().push(at.to_path_buf());
    }

    fn engine_cli(&self, args: &[&str]) -> Output {
        let (bin, flag, uri) = match self.engine {
            Some("docker") => ("docker", "-H", var("ATEAM_TEST_DOCKER")),
            Some(_) => ("podman", "--url", var("ATEAM_TEST_PODMAN_ROOTFUL")),
            None => panic!("this lab has no engine"),
        };
        Command::new(bin)
            .arg(flag)
            .arg(uri)
            .args(args)
            .output()
            .unwrap()
    }

    /// Names of every container of this lab's store.
    fn containers(&self) -> Vec<String> {
        if self.engine.is_none() {
            return vec![];
        }
        let filter = format!(
            "label=ateam.dev/store={}",
            ateam::core::layout::store_id(&self.state())
        );
        let out = self.engine_cli(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"]);
        text(&out.stdout).lines().map(str::to_string).collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.engine.is_some() {
            for t in self.teams.borrow().iter() {
                let _ = self.ateam(&["delete", "--team", t]);
            }
            let left = self.containers();
            if !left.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(left.iter().map(String::as_str));
                let _ = self.engine_cli(&args);
            }
        }
        for m in self.mounts.borrow().iter().rev() {
            let _ = Command::new("umount").arg(m).output();
        }
    }
}

fn var(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| {
        panic!("{k} is not set: run scripts/engines.sh and source /run/ateam-ci/env")
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn both(o: &Output) -> String {
    format!("{}\n{}", text(&o.stdout), text(&o.stderr))
}

fn run_ok(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?} failed (these cases run as root): {}",
        both(&out)
    );
}

/// A team whose one member reads `read` and writes `write` (paths as written in YAML,
/// relative to the lab), with transcripts in `session_dir` and the given memory cap.
fn team_yaml(name: &str, session_dir: &str, read: &[&str], write: &[&str], memory: &str) -> String {
    let list = |v: &[&str]| {
        v.iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {name}}}
spec: {{image: ateam-demo:latest, sessionDir: '{session_dir}'}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{team: {name}, command: [sh]}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{team: {name}, read: [{}], write: [{}]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: m}}
spec: {{team: {name}, parent: lead, access: g, resources: {{memory: {memory}, pids: 64}}}}
",
        list(read),
        list(write)
    )
}

fn host_memory() -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

// ------------------------------------------------------------------- no engine needed

/// Team b's grant is a bind mount of team a's transcripts folder, both in one apply: by name
/// the grant is elsewhere, by device and inode it is the same folder.
#[test]
fn a_bind_mount_alias_of_a_session_dir_in_the_same_apply_is_refused() {
    let lab = Lab::new(None);
    let sessions = lab.mkdir("a/sessions");
    lab.mkdir("a/work");
    let alias = lab.root().join("b/alias");
    lab.bind(&sessions, &alias);
    let (a, b) = (lab.team_name("aliasa"), lab.team_name("aliasb"));
    let yaml = format!(
        "{}---\n{}",
        team_yaml(&a, "./a/sessions", &["./a/work"], &[], "64Mi"),
        team_yaml(&b, "./b/sessions", &["./b/alias"], &[], "64Mi")
    );
    let m = lab.manifest("both", &yaml);
    lab.apply_refused(
        &b,
        &m,
        &[
            "spec.read[0]",
            &format!("`{}` is {}", alias.display(), sessions.display()),
            "same device and inode",
        ],
    );
    assert!(!lab.state().exists(), "a refused apply created the store");
}

/// One writer per folder, judged as grants are: team b's member writes team a's member's
/// folder under another name (a bind mount of it, or of a folder inside it), both in one
/// apply. By name the folders are apart; by device and inode, or by the mount table, they
/// are one.
#[test]
fn two_writers_of_one_folder_through_a_bind_mount_are_refused() {
    let lab = Lab::new(None);
    let work = lab.mkdir("a/work");
    lab.mkdir("a/work/src");
    let alias = lab.root().join("b/alias");
    lab.bind(&work, &alias);
    let src_alias = lab.root().join("b/src");
    lab.bind(&work.join("src"), &src_alias);
    let (a, b) = (lab.team_name("writera"), lab.team_name("writerb"));
    for (folder, words) in [
        (
            "./b/alias",
            format!(
                "member `{b}/m` writes `{}`, which `{a}/m` (",
                alias.display()
            ),
        ),
        (
            "./b/src",
            format!(
                "member `{b}/m` writes `{}`, and `{a}/m` (",
                src_alias.display()
            ),
        ),
    ] {
        let yaml = format!(
            "{}---\n{}",
            team_yaml(&a, "./a/sessions", &[], &["./a/work"], "64Mi"),
            team_yaml(&b, "./b/sessions", &[], &[folder], "64Mi")
        );
        let m = lab.manifest("both", &yaml);
        let how = if folder == "./b/alias" {
            format!(
                "writes too as `{}` (the same device and inode)",
                work.display()
            )
        } else {
            format!(
                "the mount at `{}` shows one as the other",
                src_alias.display()
            )
        };
        lab.apply_refused(
            &b,
            &m,
            &["spec.access", &words, &how, "one writer per folder"],
        );
        // Both saying they share it, it is theirs to share.
        let shared = yaml.replace("pids: 64}}", "pids: 64}, shareWrites: true}");
        let out = lab.ateam(&[
            "validate",
            "-f",
            lab.manifest("both", &shared).to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    }
}

/// The grant does not name the alias but its parent: the member would see the transcripts
/// through the bind mount below the granted folder.
#[test]
fn a_grant_holding_a_bind_mount_of_a_session_dir_is_refused() {
    let lab = Lab::new(None);
    let sessions = lab.mkdir("a/sessions");
    let alias = lab.root().join("b/shared/alias");
    lab.bind(&sessions, &alias);
    let b = lab.team_name("holder");
    // Team a is only there for its sessionDir; team b is the one applied here.
    let m = lab.manifest(
        "b",
        &team_yaml(
            &b,
            &sessions.display().to_string(),
            &["./b/shared"],
            &[],
            "64Mi",
        ),
    );
    // Its own sessionDir is the one aliased: its member would read every transcript.
    lab.apply_refused(
        &b,
        &m,
        &[
            "spec.read[0]",
            &format!("through the mount at {}", alias.display()),
            &sessions.display().to_string(),
        ],
    );
}

/// A grant of `/var/lib` holds Docker's and Podman's data roots (whether or not the engines
/// run now): a member with it could rewrite images or read other containers' files.
#[test]
fn a_grant_containing_an_engine_data_root_is_refused() {
    let lab = Lab::new(None);
    let t = lab.team_name("dataroot");
    let m = lab.manifest(
        "t",
        &team_yaml(&t, "./sessions", &["/var/lib"], &[], "64Mi"),
    );
    lab.apply_refused(
        &t,
        &m,
        &["spec.read[0]", "`/var/lib` contains /var/lib/docker"],
    );
}

/// DOCKER_HOST names a socket in a folder of its own: whoever can write there controls the
/// engine, so the folder is never granted, under any name.
#[test]
fn a_grant_of_the_docker_host_socket_folder_is_refused() {
    let lab = Lab::new(None);
    let engine = lab.mkdir("engine");
    std::fs::write(engine.join("docker.sock"), "").unwrap();
    let alias = lab.root().join("alias");
    lab.bind(&engine, &alias);
    let t = lab.team_name("sockdir");
    let m = lab.manifest(
        "t",
        &team_yaml(&t, "./sessions", &["./engine"], &["./alias"], "64Mi"),
    );
    let out = lab
        .cmd(&["apply", "-f", m.to_str().unwrap()])
        .env(
            "DOCKER_HOST",
            format!("unix://{}/docker.sock", engine.display()),
        )
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "invalid: {}", both(&out));
    for w in [
        format!(
            "spec.read[0]: `{}` is {}",
            engine.display(),
            engine.display()
        ),
        format!(
            "spec.write[0]: `{}` is {}",
            alias.display(),
            engine.display()
        ),
        "DOCKER_HOST".to_string(),
    ] {
        assert!(err.contains(&w), "the refusal does not say {w:?}:\n{err}");
    }
    assert!(!lab.state().exists(), "a refused apply created the store");
}

/// `/tmp`, `/run`, `/`, `/proc` and the home folder are refused as a sessionDir themselves,
/// not only the folders around them: members' transcript folders would be created in a place
/// every user (or the system) shares, or a member's grant rules could not keep them apart.
#[test]
fn a_session_dir_that_is_exactly_a_forbidden_folder_is_refused() {
    // Outside /tmp, so that the state folder and the grant are not what is refused.
    let lab = Lab::new_in(None, Path::new(env!("CARGO_TARGET_TMPDIR")));
    let home = lab.mkdir("home");
    lab.mkdir("work");
    for dir in ["/tmp", "/run", "/proc", "/dev", "/sys", "/", "~"] {
        let shown = if dir == "~" {
            home.display().to_string()
        } else {
            dir.to_string()
        };
        let t = lab.team_name("sessexact");
        let m = lab.manifest("t", &team_yaml(&t, dir, &["./work"], &[], "64Mi"));
        let out = lab
            .cmd(&["apply", "-f", m.to_str().unwrap()])
            .env("HOME", &home)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(3),
            "sessionDir {dir}: {}",
            both(&out)
        );
        assert!(
            err.contains(&format!("spec.sessionDir: `{shown}` is ")),
            "sessionDir {dir}: {err}"
        );
        assert!(err.contains("1 problem found"), "sessionDir {dir}: {err}");
        assert!(!lab.state().exists(), "sessionDir {dir} created the store");
    }
}

// ------------------------------------------------------------ cases that apply a team

/// Team a is applied; team b, applied next into the same store, grants a bind mount of team
/// a's transcripts folder. The manifests of b alone look harmless.
fn an_alias_of_an_applied_teams_session_dir_is_refused(engine: &'static str) {
    let lab = Lab::new(Some(engine));
    let sessions = lab.mkdir("a/sessions");
    lab.mkdir("a/work");
    let a = lab.team_name("storea");
    let ma = lab.manifest(
        "a",
        &team_yaml(&a, "./a/sessions", &["./a/work"], &[], "64Mi"),
    );
    lab.apply_ok(&a, &ma);

    let alias = lab.root().join("b/alias");
    lab.bind(&sessions, &alias);
    let b = lab.team_name("storeb");
    let mb = lab.manifest(
        "b",
        &team_yaml(&b, "./b/sessions", &["./b/alias"], &[], "64Mi"),
    );
    lab.apply_refused(
        &b,
        &mb,
        &[
            &format!("`{}` is {}", alias.display(), sessions.display()),
            &format!("team `{a}`"),
        ],
    );
    // By its own name too: the store, not only this apply, holds the transcripts folders.
    let direct = lab.manifest(
        "b2",
        &team_yaml(&b, "./b/sessions", &["./a/sessions"], &[], "64Mi"),
    );
    lab.apply_refused(&b, &direct, &[&format!("`{0}` is {0}", sessions.display())]);
}

/// The converse: team b's transcripts folder would lie inside a folder that team a, applied
/// before, grants to its member.
fn a_session_dir_inside_an_applied_teams_grant_is_refused(engine: &'static str) {
    let lab = Lab::new(Some(engine));
    let shared = lab.mkdir("shared");
    let a = lab.team_name("granta");
    let ma = lab.manifest(
        "a",
        &team_yaml(&a, "./a/sessions", &["./shared"], &[], "64Mi"),
    );
    lab.apply_ok(&a, &ma);
    let b = lab.team_name("grantb");
    let mb = lab.manifest("b", &team_yaml(&b, "./shared/sessions", &[], &[], "64Mi"));
    lab.apply_refused(
        &b,
        &mb,
        &[
            "spec.sessionDir",
            &shared.display().to_string(),
            &format!("team `{a}`"),
        ],
    );
}

/// Each team alone stays under 75% of the host's memory; together they do not.
fn admission_counts_the_teams_applied_before(engine: &'static str) {
    let lab = Lab::new(Some(engine));
    lab.mkdir("work");
    let cap = format!("{}Mi", (host_memory() * 2 / 5) >> 20); // 40% each
    let a = lab.team_name("mema");
    let ma = lab.manifest("a", &team_yaml(&a, "./a", &["./work"], &[], &cap));
    lab.apply_ok(&a, &ma);
    let b = lab.team_name("memb");
    let mb = lab.manifest("b", &team_yaml(&b, "./b", &["./work"], &[], &cap));
    lab.apply_refused(
        &b,
        &mb,
        &[
            "spec.resources.memory",
            "more than 75%",
            &format!("team `{a}`"),
        ],
    );
    // Applying team a again replaces its stored record: it is not counted twice.
    let out = lab.apply(&ma);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// A tmpfs mounted below a read-only grant: neither Docker 20.10 (API 1.41) nor Podman 4.3
/// makes a read-only bind mount read-only below its first level, so the member could write
/// there. Apply must refuse, before any container exists.
fn a_tmpfs_below_a_read_only_grant_is_refused(engine: &'static str) {
    let lab = Lab::new(Some(engine));
    lab.mkdir("ro");
    let sub = lab.root().join("ro/sub");
    lab.tmpfs(&sub);
    let t = lab.team_name("rotmpfs");
    let m = lab.manifest("t", &team_yaml(&t, "./sessions", &["./ro"], &[], "64Mi"));
    lab.teams.borrow_mut().push(t.clone());
    let out = lab.apply(&m);
    if out.status.success() {
        let probe = format!("echo x > {}/written && echo WROTE", sub.display());
        let exec = lab.ateam(&["exec", "m", "--team", &t, "--", "sh", "-c", &probe]);
        panic!(
            "apply accepted a read-only grant with a tmpfs below it; a write there from inside {}: {}",
            if text(&exec.stdout).contains("WROTE") {
                "succeeded"
            } else {
                "failed"
            },
            both(&exec)
        );
    }
    lab.assert_refused(&t, &out, &[&sub.display().to_string(), "read-only", engine]);
}

/// The measurement behind `runtime::pin::read_only_is_recursive`: each engine, asked for a
/// read-only bind mount as ateam asks for it, leaves a tmpfs below it writable. If an engine
/// starts to make it recursive, this fails: then the refusal above may be lifted for it.
fn the_engines_read_only_bind_mounts_are_not_recursive(engine: &'static str) {
    let lab = Lab::new(Some(engine));
    let ro = lab.mkdir("ro");
    let sub = ro.join("sub");
    lab.tmpfs(&sub);
    let mount = match engine {
        "docker" => vec![
            "--mount".to_string(),
            format!("type=bind,src={0},dst={0},readonly", ro.display()),
        ],
        _ => vec![
            "-v".to_string(),
            format!("{0}:{0}:ro,rbind,rprivate", ro.display()),
        ],
    };
    let name = lab.team_name("rroprobe");
    let probe = format!(
        "touch {0}/top 2>/dev/null && echo TOP; touch {1}/inner && echo INNER",
        ro.display(),
        sub.display()
    );
    let image = var("ATEAM_TEST_IMAGE");
    let mut args = vec!["run", "--rm", "--name", &name, "--network", "none"];
    args.extend(mount.iter().map(String::as_str));
    args.extend([image.as_str(), "sh", "-c", &probe]);
    let out = lab.engine_cli(&args);
    let said = text(&out.stdout);
    assert!(
        !said.contains("TOP"),
        "the grant itself was writable: {}",
        both(&out)
    );
    assert!(
        said.contains("INNER"),
        "{engine} kept the tmpfs below a read-only bind mount read-only: read-only is recursive now; {}",
        both(&out)
    );
}

macro_rules! on_engines {
    ($($case:ident),* $(,)?) => {
        mod docker {
            $(
                #[test]
                #[ignore = "needs container engines: run scripts/test.sh"]
                fn $case() {
                    super::$case("docker");
                }
            )*
        }
        mod podman {
            $(
                #[test]
                #[ignore = "needs container engines: run scripts/test.sh"]
                fn $case() {
                    super::$case("podman");
                }
            )*
        }
    };
}

on_engines!(
    an_alias_of_an_applied_teams_session_dir_is_refused,
    a_session_dir_inside_an_applied_teams_grant_is_refused,
    admission_counts_the_teams_applied_before,
    a_tmpfs_below_a_read_only_grant_is_refused,
    the_engines_read_only_bind_mounts_are_not_recursive,
);

/// The test engines keep their data under /var/lib/ateam-ci (scripts/engines.sh starts
/// dockerd with `--data-root /var/lib/ateam-ci/docker`): ateam learns that from the running
/// daemon, not from a list, and refuses a grant that holds it. No container is made, but the
/// engines must run.
#[test]
#[ignore = "needs container engines: run scripts/test.sh"]
fn a_grant_containing_a_running_engines_data_root_is_refused() {
    let lab = Lab::new(None);
    let t = lab.team_name("running");
    let m = lab.manifest(
        "t",
        &team_yaml(&t, "./sessions", &["/var/lib/ateam-ci"], &[], "64Mi"),
    );
    lab.apply_refused(
        &t,
        &m,
        &[
            "spec.read[0]",
            "`/var/lib/ateam-ci` contains /var/lib/ateam-ci/docker",
        ],
    );
}
