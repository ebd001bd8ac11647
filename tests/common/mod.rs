//! What the engine test binaries that run on all three engines share: which engine, the
//! environment `scripts/engines.sh` leaves, and the commands that run ateam and the engine's
//! own CLI as that engine's user (root, or the rootless user through runuser), and `World`,
//! the part of each crate's test world they have in common.

// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub mod faulty_socket;
pub mod mcp;
pub mod private_engine;
pub mod standin;
pub mod terminal;
pub mod world;

// Not every test binary has a `World`.
#[allow(unused_imports)]
pub use world::World;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Engine {
    Docker,
    Podman,
    /// ateam runs as the unprivileged user against that user's Podman.
    Rootless,
}

impl Engine {
    /// Its name as ateam says it (`--backend`, `status`, `doctor`): `docker` or `podman`.
    pub fn backend(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman | Engine::Rootless => "podman",
        }
    }
}

thread_local! {
    /// Whether the case running on this thread runs its members under gVisor (a module of
    /// `on_every_engine!` named `<engine>_gvisor`): its `World` says `runtime: gvisor` on every
    /// Team it writes and, on Podman, talks to the gVisor service.
    static GVISOR: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread's case runs under gVisor (`GVISOR`).
pub fn gvisor() -> bool {
    GVISOR.with(|g| g.get())
}

/// Sets this thread's case to run under gVisor or not (`on_every_engine!` does).
pub fn set_gvisor(on: bool) {
    GVISOR.with(|g| g.set(on));
}

/// The address of the shared Podman service that runs its containers under gVisor.
pub fn gvisor_uri(engine: Engine) -> Option<String> {
    match engine {
        Engine::Docker => None,
        Engine::Podman => Some(var("ATEAM_TEST_PODMAN_GVISOR")),
        Engine::Rootless => Some(var("ATEAM_TEST_PODMAN_ROOTLESS_GVISOR")),
    }
}

/// `yaml` with `runtime: gvisor` on each Team that does not name a runtime (flow or block
/// `spec`).
pub fn with_gvisor(yaml: &str) -> String {
    yaml.split("\n---")
        .map(|doc| {
            let team = doc.lines().any(|l| l.trim() == "kind: Team");
            if !team || doc.contains("runtime:") {
                doc.to_string()
            } else if doc.contains("\nspec: {") {
                doc.replacen("\nspec: {", "\nspec: {runtime: gvisor, ", 1)
            } else if doc.contains("\nspec:\n") {
                doc.replacen("\nspec:\n", "\nspec:\n  runtime: gvisor\n", 1)
            } else {
                format!("{doc}\nspec: {{runtime: gvisor}}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n---")
}

/// The address of the shared `engine` that `scripts/engines.sh` started.
pub fn engine_uri(engine: Engine) -> String {
    var(match engine {
        Engine::Docker => "ATEAM_TEST_DOCKER",
        Engine::Podman => "ATEAM_TEST_PODMAN_ROOTFUL",
        Engine::Rootless => "ATEAM_TEST_PODMAN_ROOTLESS",
    })
}

pub fn var(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| {
        panic!("{k} is not set: run scripts/engines.sh, then source /run/ateam-ci/env")
    })
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Polls `ok` every 100 ms until it holds or `limit` has passed; whether it held. In place of
/// a fixed sleep before an assertion that needs something to have happened meanwhile (on a
/// loaded machine it may take longer): wait on that condition, then assert as before, with
/// the assertion's own message.
pub fn eventually(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A web server on the host's loopback that answers every request with `body`.
pub fn serve(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
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

/// The unprivileged user of the rootless engine: (name, uid, gid).
pub fn rootless_user() -> (String, u32, u32) {
    let name = var("ATEAM_TEST_ROOTLESS_USER");
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").arg(flag).arg(&name).output().unwrap();
        text(&out.stdout).trim().parse().unwrap()
    };
    (name.clone(), id("-u"), id("-g"))
}

/// The ateam binary under test (`ATEAM_TEST_BIN`: a copy the rootless user can reach).
pub fn ateam_bin() -> String {
    std::env::var("ATEAM_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_ateam").to_string())
}

/// `ateam --backend ...` as `engine`'s user runs it, with `state` as its state folder; the
/// caller adds the arguments.
pub fn ateam_command(engine: Engine, state: &Path) -> Command {
    ateam_command_env(engine, state, &[])
}

/// `ateam_command` with these variables in ateam's environment (secrets it hands members or
/// proxies); the agents' keys of the test's own environment are never passed on.
pub fn ateam_command_env(engine: Engine, state: &Path, env: &[(&str, &str)]) -> Command {
    let bin = ateam_bin();
    // A case under gVisor talks to the gVisor service (a `World`'s own address comes after
    // in `env`, and wins).
    let gvisor_host = gvisor().then(|| gvisor_uri(engine)).flatten();
    let mut env = env.to_vec();
    if let Some(uri) = &gvisor_host {
        env.insert(0, ("CONTAINER_HOST", uri.as_str()));
    }
    let env = env.as_slice();
    match engine {
        Engine::Rootless => {
            let (name, uid, _) = rootless_user();
            let mut c = Command::new("runuser");
            c.args(["-u", &name, "--", "env", "-i"])
                .arg(format!("PATH={}", var("PATH")))
                .arg(format!("HOME=/home/{name}"))
                .arg(format!("XDG_RUNTIME_DIR=/run/ateam-ci/user-{uid}"))
                .arg(format!(
                    "CONTAINER_HOST={}",
                    var("ATEAM_TEST_PODMAN_ROOTLESS")
                ))
                .arg(format!("ATEAM_STATE_DIR={}", state.display()))
                .args(env.iter().map(|(k, v)| format!("{k}={v}")))
                .arg(&bin)
                .args(["--backend", "podman"]);
            c
        }
        engine => {
            let mut c = Command::new(&bin);
            c.env("ATEAM_STATE_DIR", state)
                .env("DOCKER_HOST", var("ATEAM_TEST_DOCKER"))
                .env("CONTAINER_HOST", var("ATEAM_TEST_PODMAN_ROOTFUL"))
                .env_remove("SUDO_UID")
                .env_remove("SUDO_GID")
                .env_remove("ANTHROPIC_API_KEY")
                .env_remove("OPENAI_API_KEY")
                .envs(env.iter().copied())
                .arg("--backend")
                .arg(engine.backend());
            c
        }
    }
}

/// A command as a line for a shell (tmux runs its panes' commands through one): its
/// environment changes by `env`, every word quoted.
pub fn shell_line(c: &Command) -> String {
    let q = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
    // `env`'s removals (`-u`) come before its assignments.
    let mut words = vec!["env".to_string()];
    for (k, _) in c.get_envs().filter(|(_, v)| v.is_none()) {
        words.extend(["-u".to_string(), q(k)]);
    }
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            words.push(q(std::ffi::OsStr::new(&format!(
                "{}={}",
                k.to_string_lossy(),
                v.to_string_lossy()
            ))));
        }
    }
    words.push(q(c.get_program()));
    words.extend(c.get_args().map(q));
    words.join(" ")
}

/// The engine's own CLI pointed at `engine` (`docker -H` / `podman --url`); for rootless
/// Podman run as its user when `as_user`, else as root against that user's socket.
pub fn engine_command(engine: Engine, as_user: bool) -> Command {
    let (bin, flag, uri) = match engine {
        Engine::Docker => ("docker", "-H", engine_uri(engine)),
        Engine::Podman | Engine::Rootless => (
            "podman",
            "--url",
            gvisor()
                .then(|| gvisor_uri(engine))
                .flatten()
                .unwrap_or_else(|| engine_uri(engine)),
        ),
    };
    let mut c = if engine == Engine::Rootless && as_user {
        let (name, uid, _) = rootless_user();
        let mut c = Command::new("runuser");
        c.args(["-u", &name, "--", "env"])
            .arg(format!("XDG_RUNTIME_DIR=/run/ateam-ci/user-{uid}"))
            .arg(format!("HOME=/home/{name}"))
            .arg(bin);
        c
    } else {
        Command::new(bin)
    };
    c.arg(flag).arg(uri);
    c
}

/// `on_every_engine!(docker: case_a, case_b)`: a module `docker` with one ignored test per
/// case, each calling `case(Engine::...)` of the test file (the attack suites share it).
#[allow(unused_macros)]
macro_rules! on_every_engine {
    ($engine:ident: $($case:ident),* $(,)?) => {
        mod $engine {
            $(
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn $case() {
                    let name = stringify!($engine);
                    crate::common::set_gvisor(name.ends_with("_gvisor"));
                    super::$case(crate::common::engine_of(name));
                }
            )*
        }
    };
}

/// The engine a module of `on_every_engine!` is named after (`_gvisor` aside).
pub fn engine_of(name: &str) -> Engine {
    match name.trim_end_matches("_gvisor") {
        "docker" => Engine::Docker,
        "podman" => Engine::Podman,
        _ => Engine::Rootless,
    }
}

/// A listener on 127.0.0.1 of `uid` (started as root through `setpriv`), which answers
/// `listener-of-UID` and notes each connection it accepts: another local user's server.
pub struct UidListener {
    child: std::process::Child,
    pub port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl UidListener {
    pub fn start(uid: u32) -> UidListener {
        use std::io::BufRead;
        let script = concat!(
            "import socket,sys\n",
            "b=sys.argv[1].encode()\n",
            "s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(8)\n",
            "print(s.getsockname()[1], flush=True)\n",
            "while True: c,_=s.accept(); print('accepted', flush=True); ",
            "c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n' % len(b) + b); c.close()\n",
        );
        let mut child = std::process::Command::new("setpriv")
            .args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
            ])
            // The system's Python: a per-user one (pyenv) is not nobody's to run.
            .args(["/usr/bin/python3", "-c", script])
            .arg(format!("listener-of-{uid}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines.next().unwrap().unwrap().trim().parse().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                log.lock().unwrap().push(l);
            }
        });
        UidListener { child, port, seen }
    }

    /// How many connections it accepted (after a moment for its output to arrive).
    pub fn accepted(&self) -> usize {
        std::thread::sleep(std::time::Duration::from_millis(100));
        self.seen.lock().unwrap().len()
    }
}

impl Drop for UidListener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
