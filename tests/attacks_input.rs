//! Hostile manifests, as an attacker would hand them to the real `ateam` binary: every one must
//! be refused fast, in bounded memory, with an error that names the file (and the line and
//! column where there is one), and nothing on the machine may change.
//!
//! Each child runs with its address space and CPU time capped (see `ateam`), so that a loader
//! that expands input without bound or works too hard fails the test instead of exhausting the
//! machine, and with a hard time limit, so that a loader that blocks fails the test instead of
//! hanging it.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Address space the child may use: far more than any valid run needs (about 200 MiB for the
/// debug binary and its threads), far less than an exploding alias tree takes.
const CHILD_MEMORY_KIB: u64 = 2 << 20;
/// CPU time the child may use, in seconds: the CPU-heaviest valid run here (parsing 4 MiB in a
/// debug build) takes under 0.7 s. Unlike wall time, this does not depend on how busy the
/// machine is, so it is the bound that reliably catches a loader doing too much work.
const CHILD_CPU_SECONDS: u64 = 2;
/// A child still running after this long is taken to hang, and killed.
const HANG: Duration = Duration::from_secs(10);
/// How long a refusal may take: generous, for a debug build with tests running side by side
/// (most take milliseconds; reading and parsing 4 MiB takes about half a second).
const FAST: Duration = Duration::from_secs(3);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Run {
    /// None when killed by a signal (a crash, or our kill after `HANG`).
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout: {}\nstderr: {}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// Runs `ateam args` in the repository root, with `state` as its state folder and no engine
/// reachable, feeding `stdin`. `ulimit -v` caps its memory (MALLOC_ARENA_MAX keeps glibc from
/// reserving an arena per thread, which would count against that cap on many-core machines), and
/// `ulimit -t` its CPU time.
fn ateam(args: &[&str], state: &Path, stdin: Vec<u8>) -> Run {
    let start = Instant::now();
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {CHILD_MEMORY_KIB} && ulimit -t {CHILD_CPU_SECONDS} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_ateam"))
        .args(args)
        .current_dir(root())
        .env("ATEAM_STATE_DIR", state)
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .env("CONTAINER_HOST", "unix:///nonexistent.sock")
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // The child may stop reading early (that is the point of a size cap): ignore EPIPE.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().unwrap()));
    let err = reader(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > HANG {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = start.elapsed();
    writer.join().unwrap();
    Run {
        code: status.and_then(|s| s.code()),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        took,
    }
}

/// Asserts a fast refusal (exit 3: invalid manifests) whose error contains `want`.
fn assert_refused(run: &Run, want: &str) {
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert!(run.took < FAST, "too slow: {}", run.describe());
    assert!(
        run.stderr.contains(want),
        "want {want:?}; {}",
        run.describe()
    );
}

/// A Team alone: valid wherever it is put, with its transcripts beside it.
const TEAM: &str = "apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {name: t}\nspec: {image: x, sessionDir: ./sessions}\n";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn fifo_as_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let fifo = dir.path().join("pipe.yaml");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RWXU).unwrap();
    // Named directly: opening a FIFO for reading blocks until a writer comes; none will.
    let run = ateam(&["validate", "-f", s(&fifo)], &state, vec![]);
    assert_refused(
        &run,
        &format!("{}: not a regular file (a FIFO)", fifo.display()),
    );
    // Found in a folder.
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("team.yaml"), TEAM).unwrap();
    let inner = folder.join("pipe.yml");
    rustix::fs::mkfifoat(rustix::fs::CWD, &inner, rustix::fs::Mode::RWXU).unwrap();
    let run = ateam(&["apply", "-f", s(&folder)], &state, vec![]);
    assert_refused(
        &run,
        &format!("{}: not a regular file (a FIFO)", inner.display()),
    );
    assert!(!state.exists(), "apply created the state folder");
}

#[test]
fn device_or_socket_as_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // A device reads as an empty or endless stream; it is not a manifest either way.
    let run = ateam(&["validate", "-f", "/dev/null"], &state, vec![]);
    assert_refused(&run, "/dev/null: not a regular file (a character device)");
    let sock = dir.path().join("sock.yaml");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let run = ateam(&["validate", "-f", s(dir.path())], &state, vec![]);
    assert_refused(
        &run,
        &format!("{}: not a regular file (a socket)", sock.display()),
    );
}

#[test]
fn symlink_loop_in_folder() {
    // `loop` points back at its own folder: following it would read team.yaml again and again.
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("manifests");
    std::fs::create_dir(&folder).unwrap();
    // Transcripts beside the folder given with -f, not in it (members write there).
    let team = TEAM.replace("./sessions", "../sessions");
    std::fs::write(folder.join("team.yaml"), team).unwrap();
    std::os::unix::fs::symlink(&folder, folder.join("loop")).unwrap();
    std::os::unix::fs::symlink(&folder, folder.join("loop.yaml")).unwrap();
    let run = ateam(
        &["validate", "-f", s(&folder)],
        &dir.path().join("state"),
        vec![],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.took < FAST, "too slow: {}", run.describe());
    assert_eq!(
        run.stdout.trim(),
        "valid: 1 team(s), 0 main session(s), 0 member(s), 0 grant(s)"
    );
    // A symlink to a regular file named on the command line is followed.
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(folder.join("team.yaml"), &link).unwrap();
    let run = ateam(
        &["validate", "-f", s(&link)],
        &dir.path().join("state"),
        vec![],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

/// TEAM padded with a comment to exactly `len` bytes.
fn padded_team(len: usize) -> Vec<u8> {
    let mut text = TEAM.as_bytes().to_vec();
    text.extend_from_slice(b"# ");
    text.resize(len - 1, b'x');
    text.push(b'\n');
    text
}

#[test]
fn oversized_manifest_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, padded_team((4 << 20) + 1)).unwrap();
    let run = ateam(&["apply", "-f", s(&big)], &state, vec![]);
    assert_refused(
        &run,
        &format!(
            "{}: larger than 4 MiB, the limit for one manifest file",
            big.display()
        ),
    );
    assert!(!state.exists(), "apply created the state folder");
    // Exactly at the limit is fine.
    std::fs::write(&big, padded_team(4 << 20)).unwrap();
    let run = ateam(&["validate", "-f", s(&big)], &state, vec![]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

#[test]
fn oversized_manifest_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    // 64 MiB: the loader must stop reading long before the end.
    let run = ateam(
        &["validate", "-f", "-"],
        &dir.path().join("state"),
        padded_team(64 << 20),
    );
    assert_refused(
        &run,
        "<stdin>: larger than 4 MiB, the limit for one manifest file",
    );
}

/// Nine levels of nine aliases each: 9^9 strings once expanded, from under 500 bytes.
const BILLION_LAUGHS: &str = r#"a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"#;

#[test]
fn billion_laughs() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let file = dir.path().join("billion-laughs.yaml");
    std::fs::write(&file, BILLION_LAUGHS).unwrap();
    let run = ateam(
        &["apply", "-f", s(&file), "--backend", "docker"],
        &state,
        vec![],
    );
    // The first `*e` on line 6 is the alias that takes the file past the budget.
    assert_refused(
        &run,
        &format!(
            "{}:6:8: more than 100000 values in one file, counting every use of an alias in full",
            file.display()
        ),
    );
    assert!(!state.exists(), "apply created the state folder");
    assert!(run.took < Duration::from_secs(1), "{}", run.describe());
    // The same with long strings instead of many: one 1 MiB string used a hundred times.
    let text = format!(
        "a: &a \"{}\"\nb: [{}]\n",
        "x".repeat(1 << 20),
        vec!["*a"; 100].join(",")
    );
    std::fs::write(&file, text).unwrap();
    let run = ateam(&["validate", "-f", s(&file)], &state, vec![]);
    // The 8th `*a` takes the text past 8 MiB.
    assert_refused(
        &run,
        &format!(
            "{}:2:23: more than 8 MiB of text in one file, counting every use of an alias in full",
            file.display()
        ),
    );
}

#[test]
fn deeply_nested_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let file = dir.path().join("deep.yaml");
    // A million nested block sequences on one line (2 MiB): a recursive loader overflows its
    // stack. The 65th `- ` starts at column 129.
    std::fs::write(&file, format!("{}x\n", "- ".repeat(1_000_000))).unwrap();
    let run = ateam(&["validate", "-f", s(&file)], &state, vec![]);
    assert_refused(
        &run,
        &format!("{}:1:129: nested more than 64 levels deep", file.display()),
    );
    // The same in flow style.
    std::fs::write(&file, format!("{}{}\n", "[".repeat(200), "]".repeat(200))).unwrap();
    let run = ateam(&["validate", "-f", s(&file)], &state, vec![]);
    assert_refused(
        &run,
        &format!("{}:1:65: nested more than 64 levels deep", file.display()),
    );
}

#[test]
fn utf8_byte_order_mark() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let file = dir.path().join("bom.yaml");
    let with_bom = [b"\xEF\xBB\xBF".as_slice(), TEAM.as_bytes()].concat();
    std::fs::write(&file, &with_bom).unwrap();
    let run = ateam(&["validate", "-f", s(&file)], &state, vec![]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let run = ateam(&["validate", "-f", "-"], &state, with_bom);
    // Standard input resolves the relative sessionDir from the repository root: still valid.
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

#[test]
fn non_utf8_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let file = dir.path().join("latin1.yaml");
    // `é` in Latin-1 on line 3, after `metadata: {name: caf`.
    let text = [
        TEAM.as_bytes(),
        b"---\nkind: Team\nmetadata: {name: caf\xE9}\n",
    ]
    .concat();
    std::fs::write(&file, text).unwrap();
    let offset = TEAM.len() + "---\nkind: Team\nmetadata: {name: caf".len();
    let run = ateam(&["validate", "-f", s(&file)], &state, vec![]);
    assert_refused(
        &run,
        &format!(
            "{}:7:21: not UTF-8: byte 0xe9 at byte offset {offset} does not start or continue a character; save the file as UTF-8",
            file.display()
        ),
    );
    let run = ateam(
        &["validate", "-f", "-"],
        &state,
        b"\xFF\xFEa\0:\0 \0b\0".to_vec(),
    );
    assert_refused(
        &run,
        "<stdin>:1:1: not UTF-8: this is UTF-16 (it starts with a UTF-16 byte-order mark); save the file as UTF-8",
    );
}

#[test]
fn overlong_socket_path() {
    // tmux and the egress proxy listen on Unix sockets, whose path must fit in 108 bytes with
    // its NUL. With a long state folder, the example team's socket paths do not.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s".repeat(80));
    let run = ateam(
        &["validate", "-f", "examples/demo-team/team.yaml"],
        &state,
        vec![],
    );
    assert_refused(
        &run,
        &format!(
            "examples/demo-team/team.yaml:21:3: MainSession/lead: metadata.name: the tmux socket path `{}/teams/demo/sessions/lead/tmux.sock` is {} bytes, longer than the 107 a Unix socket path can hold; use a shorter name or a shorter --state-dir",
            state.display(),
            state.as_os_str().len() + 35
        ),
    );
    assert!(
        run.stderr.contains(&format!(
            "examples/demo-team/team.yaml:103:3: Member/tester: metadata.name: the egress socket path `{}/teams/demo/members/tester/ctl/egress.sock` is {} bytes",
            state.display(),
            state.as_os_str().len() + 42
        )),
        "{}",
        run.describe()
    );
    let run = ateam(
        &["apply", "-f", "examples/demo-team/team.yaml"],
        &state,
        vec![],
    );
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert!(!state.exists(), "apply created the state folder");
    // A state folder that leaves room is fine.
    let run = ateam(
        &["validate", "-f", "examples/demo-team/team.yaml"],
        &dir.path().join("st"),
        vec![],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

#[test]
fn many_errors_in_a_huge_object() {
    // Every shape error of an object is reported, by deserializing it again after taking each
    // bad field out: with 99000 good values before 200 bad ones, 100 rounds took seconds.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.yaml");
    let text = format!(
        "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: m}}\nspec:\n  parent: lead\n  command: [{}]\n  env:\n{}",
        vec!["x"; 99_000].join(","),
        (0..200)
            .map(|i| format!("    K{i}: [x]\n"))
            .collect::<String>()
    );
    std::fs::write(&file, text).unwrap();
    let run = ateam(
        &["validate", "-f", s(&file)],
        &dir.path().join("state"),
        vec![],
    );
    assert_refused(
        &run,
        &format!(
            "{}:8:5: Member/m: spec.env.K0: invalid type: sequence, expected a string",
            file.display()
        ),
    );
}
