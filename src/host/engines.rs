//! Where container engines keep their data and their API sockets.
//!
//! A member that can reach an engine's socket or data root controls the engine (and so the
//! host), or reads and rewrites other containers' files and images; no grant may reach these
//! folders. Validation stays offline: the folders come from a documented list, the user's
//! environment (`DOCKER_HOST`, `CONTAINER_HOST`, `XDG_RUNTIME_DIR`, `XDG_DATA_HOME`, `HOME`),
//! the engines' configuration files and the command lines of engine daemons running now
//! (`dockerd --data-root ...`), never from asking an engine.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A folder of a container engine, and what it is (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineDir {
    /// The folder, absolute.
    pub path: PathBuf,
    /// `Docker's data root`.
    pub what: String,
}

fn dir(path: impl Into<PathBuf>, what: impl Into<String>) -> EngineDir {
    EngineDir {
        path: path.into(),
        what: what.into(),
    }
}

/// The engines' own places on any Linux machine, whether or not an engine runs now: a folder
/// granted today must not hold the data of an engine started tomorrow.
pub fn defaults() -> Vec<EngineDir> {
    vec![
        dir("/var/lib/docker", "Docker's data root"),
        dir("/var/lib/containerd", "containerd's data root"),
        dir("/var/lib/containers", "Podman's data root"),
        dir("/run", "the engines' socket folder"),
        dir("/var/run", "the engines' socket folder"),
    ]
}

/// What an environment says about engines: the user's own (rootless) ones and the ones it
/// talks to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserEnv {
    /// `HOME`: rootless engines' storage defaults to below it.
    pub home: PathBuf,
    /// `XDG_DATA_HOME`, when absolute: rootless storage instead of `~/.local/share`.
    pub xdg_data_home: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`, when absolute: where the engines' configuration files are looked for.
    pub xdg_config_home: Option<PathBuf>,
    /// `XDG_RUNTIME_DIR`, when absolute: where rootless engines keep their sockets.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// `DOCKER_HOST`, as written: the folder of its socket is refused to grants.
    pub docker_host: Option<String>,
    /// `CONTAINER_HOST` (Podman's), as written: the folder of its socket is refused to grants.
    pub container_host: Option<String>,
}

impl UserEnv {
    /// From `NAME=value` pairs: this process's environment, or another's (`/proc/<pid>/environ`).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> UserEnv {
        let mut env = UserEnv::default();
        let path = |v: String| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
        for (k, v) in vars {
            match k.as_str() {
                "HOME" => env.home = v.into(),
                "XDG_DATA_HOME" => env.xdg_data_home = path(v),
                "XDG_CONFIG_HOME" => env.xdg_config_home = path(v),
                "XDG_RUNTIME_DIR" => env.xdg_runtime_dir = path(v),
                "DOCKER_HOST" => env.docker_host = Some(v),
                "CONTAINER_HOST" => env.container_host = Some(v),
                _ => {}
            }
        }
        env
    }

    fn data_home(&self) -> PathBuf {
        self.xdg_data_home
            .clone()
            .unwrap_or_else(|| self.home.join(".local/share"))
    }
}

/// The user's rootless engines' storage and runtime folders, and the folders of the sockets
/// that `DOCKER_HOST` and `CONTAINER_HOST` name.
pub fn user_dirs(env: &UserEnv) -> Vec<EngineDir> {
    let mut out = Vec::new();
    if env.home.is_absolute() && env.home != Path::new("/") {
        out.push(dir(
            env.data_home().join("containers"),
            "rootless Podman's storage",
        ));
        out.push(dir(
            env.data_home().join("docker"),
            "rootless Docker's data root",
        ));
    }
    if let Some(d) = &env.xdg_runtime_dir {
        out.push(dir(
            d,
            "the user's runtime folder (XDG_RUNTIME_DIR), where rootless engines keep their sockets",
        ));
    }
    for (var, uri) in [
        ("DOCKER_HOST", &env.docker_host),
        ("CONTAINER_HOST", &env.container_host),
    ] {
        if let Some(d) = uri.as_deref().and_then(|u| socket_dir(u, &env.home)) {
            out.push(dir(d, format!("the folder of the socket {var} names")));
        }
    }
    out
}

/// The folder of a `unix://` socket. A socket right in `/` or in the home folder (or in a
/// folder around it) gives none: those are never granted whole, so the socket is out of reach,
/// and refusing everything inside them would refuse every grant.
fn socket_dir(uri: &str, home: &Path) -> Option<PathBuf> {
    let path = Path::new(uri.strip_prefix("unix://").unwrap_or(uri));
    let parent = path.parent().filter(|_| path.is_absolute())?;
    (!home.starts_with(parent)).then(|| parent.to_path_buf())
}

/// What a daemon's flags name, by flag.
const DAEMON_FLAGS: [(&str, &str); 7] = [
    ("--data-root", "data root"),
    ("--exec-root", "exec root"),
    ("--root", "storage root"),
    ("--runroot", "run root"),
    ("--state", "state folder"),
    ("--address", "socket folder"),
    ("--host", "socket folder"),
];

/// Folders a running engine daemon's command line names (`dockerd --data-root D`, `podman
/// system service unix:///S`...). `env` is that process's environment when it runs as
/// another user than root and is readable: a rootless engine keeps its data in its user's home.
pub fn daemon_dirs(argv: &[String], env: Option<&UserEnv>) -> Vec<EngineDir> {
    let Some(prog) = engine_program(argv) else {
        return vec![];
    };
    let no_home = PathBuf::from("/");
    let home = env.map_or(no_home.as_path(), |e| e.home.as_path());
    let mut out = Vec::new();
    let mut args = argv[1..].iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let flag = match flag {
            "-H" => "--host",
            "-a" => "--address",
            f => f,
        };
        if let Some((_, word)) = DAEMON_FLAGS.iter().find(|(f, _)| *f == flag) {
            let Some(value) = inline.or_else(|| args.next().cloned()) else {
                break;
            };
            let folder = if *word == "socket folder" {
                socket_dir(&value, home)
            } else {
                Some(PathBuf::from(value)).filter(|p| p.is_absolute())
            };
            if let Some(f) = folder {
                out.push(dir(f, format!("the {word} of a running {prog}")));
            }
        } else if let Some(f) = arg
            .starts_with("unix://")
            .then(|| socket_dir(arg, home))
            .flatten()
        {
            out.push(dir(f, format!("the socket folder of a running {prog}")));
        }
    }
    if let Some(env) = env {
        out.extend(user_dirs(&UserEnv {
            docker_host: None,
            container_host: None,
            ..env.clone()
        }));
    }
    out
}

/// Folders set in the engines' configuration: `data-root`, `exec-root` and `hosts` of
/// Docker's `daemon.json`; `graphroot` and `runroot` of a containers `storage.conf`.
pub fn config_dirs(daemon_json: &str, storage_confs: &[String]) -> Vec<EngineDir> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(daemon_json) {
        for (key, word) in [("data-root", "data root"), ("exec-root", "exec root")] {
            if let Some(p) = v[key].as_str().filter(|p| p.starts_with('/')) {
                out.push(dir(p, format!("Docker's {word} (daemon.json)")));
            }
        }
        for h in v["hosts"].as_array().into_iter().flatten() {
            if let Some(d) = h.as_str().and_then(|h| socket_dir(h, Path::new("/"))) {
                out.push(dir(d, "Docker's socket folder (daemon.json)"));
            }
        }
    }
    for conf in storage_confs {
        for line in conf.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            if ["graphroot", "runroot"].contains(&key.trim()) && value.starts_with('/') {
                out.push(dir(
                    value,
                    format!("Podman's {} (storage.conf)", key.trim()),
                ));
            }
        }
    }
    out
}

/// Every engine folder this machine has now: `user_dirs` of `env`, the configuration files,
/// and the daemons running now. Each folder once.
pub fn detect(env: &UserEnv) -> Vec<EngineDir> {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let config_home = env
        .xdg_config_home
        .clone()
        .unwrap_or_else(|| env.home.join(".config"));
    let mut all = user_dirs(env);
    all.extend(config_dirs(
        &read(Path::new("/etc/docker/daemon.json")),
        &[
            read(Path::new("/etc/containers/storage.conf")),
            read(&config_home.join("containers/storage.conf")),
        ],
    ));
    all.extend(running_daemons());
    let mut out: Vec<EngineDir> = Vec::new();
    for d in all {
        if !out.iter().any(|o| o.path == d.path) {
            out.push(d);
        }
    }
    out
}

/// `daemon_dirs` of every process on the machine (those whose command line is readable).
fn running_daemons() -> Vec<EngineDir> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    };
    let ours = pid_ns_depth(Path::new("/proc/self"));
    let mut out = Vec::new();
    for p in procs.flatten() {
        let dir = p.path();
        // The name the kernel keeps for the program first: a command line is read out of
        // the process's memory, twice the cost, and at 200 members there are 900 processes.
        // An engine's program has its own name there (the file it runs, `dockerd` and not a
        // link to it of another name: `engine_program` would not know that one either).
        let mut comm = [0u8; 32];
        let Ok(n) = std::fs::File::open(dir.join("comm")).and_then(|mut f| f.read(&mut comm))
        else {
            continue;
        };
        if !may_be_engine(&comm[..n]) {
            continue;
        }
        let Ok(argv) = crate::files::read_kernel(&dir.join("cmdline")).map(split) else {
            continue;
        };
        if engine_program(&argv).is_none() {
            continue;
        }
        // A process in a pid namespace below ours runs in a container (a member's, say):
        // whatever its command line or environment names is in that container's file
        // system, not ours, and a member chooses both (`exec -a dockerd ... --data-root D`
        // made every grant of D refused, so a member could stop any team's apply).
        if let (Some(ours), Some(theirs)) = (ours, pid_ns_depth(&dir))
            && theirs > ours
        {
            continue;
        }
        let rootless = std::fs::metadata(&dir)
            .map(|m| m.uid() != 0)
            .unwrap_or(false);
        let env = crate::files::read_kernel(&dir.join("environ"))
            .ok()
            .filter(|_| rootless)
            .map(|e| {
                UserEnv::from_vars(split(e).into_iter().filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                }))
            });
        out.extend(daemon_dirs(&argv, env.as_ref()));
    }
    out
}

/// How many pid namespaces a process is seen in (the `NSpid` line of its `status`, readable
/// by anyone): 1 in the machine's own, one more for each container it is nested in.
fn pid_ns_depth(proc_dir: &Path) -> Option<usize> {
    let status = crate::files::read_kernel_text(&proc_dir.join("status")).ok()?;
    nspid_depth(&status)
}

fn nspid_depth(status: &str) -> Option<usize> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|ids| ids.split_whitespace().count())
        .filter(|n| *n > 0)
}

/// The programs whose command lines say where an engine keeps its data.
const ENGINE_PROGRAMS: [&str; 3] = ["dockerd", "containerd", "podman"];

/// `dockerd`, `containerd` or `podman`, when `argv` runs one of them.
fn engine_program(argv: &[String]) -> Option<&str> {
    argv.first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .filter(|p| ENGINE_PROGRAMS.contains(p))
}

/// Whether a process whose `/proc/PID/comm` reads `comm` may run an engine's program.
fn may_be_engine(comm: &[u8]) -> bool {
    let name = comm.strip_suffix(b"\n").unwrap_or(comm);
    ENGINE_PROGRAMS.iter().any(|p| p.as_bytes() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(dirs: &[EngineDir]) -> Vec<String> {
        dirs.iter().map(|d| d.path.display().to_string()).collect()
    }

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn only_an_engines_program_name_is_read_further() {
        assert!(may_be_engine(b"dockerd\n"));
        assert!(may_be_engine(b"podman\n"));
        assert!(may_be_engine(b"containerd"));
        assert!(!may_be_engine(b"containerd-shim\n"));
        assert!(!may_be_engine(b"conmon\n"));
        assert!(!may_be_engine(b"docker\n"));
        assert!(!may_be_engine(b""));
    }

    #[test]
    fn pid_namespace_depth_from_status() {
        assert_eq!(nspid_depth("Name:\tx\nNSpid:\t4229\n"), Some(1));
        assert_eq!(nspid_depth("NSpid:\t540\t17\nNSsid:\t1\n"), Some(2));
        assert_eq!(nspid_depth("Name:\tx\n"), None);
        // This process is seen at least in its own namespace.
        assert!(pid_ns_depth(Path::new("/proc/self")).is_some_and(|n| n >= 1));
    }

    #[test]
    fn user_dirs_from_the_environment() {
        let env = UserEnv::from_vars(
            [
                ("HOME", "/home/u"),
                ("XDG_RUNTIME_DIR", "/run/user/1000"),
                ("DOCKER_HOST", "unix:///home/u/.docker/run/docker.sock"),
                ("CONTAINER_HOST", "tcp://127.0.0.1:2375"),
                ("PATH", "/bin"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        assert_eq!(
            paths(&user_dirs(&env)),
            [
                "/home/u/.local/share/containers",
                "/home/u/.local/share/docker",
                "/run/user/1000",
                "/home/u/.docker/run",
            ]
        );
        let with_data_home = UserEnv {
            xdg_data_home: Some("/data".into()),
            ..env
        };
        assert_eq!(
            paths(&user_dirs(&with_data_home))[..2],
            ["/data/containers", "/data/docker"]
        );
    }

    #[test]
    fn sockets_in_folders_that_are_never_granted_whole_name_no_folder() {
        let home = Path::new("/home/u");
        for (uri, want) in [
            ("unix:///run/ateam-ci/docker.sock", Some("/run/ateam-ci")),
            ("unix:///srv/engine/docker.sock", Some("/srv/engine")),
            ("unix:///docker.sock", None),
            ("unix:///home/u/docker.sock", None),
            ("unix:///home/docker.sock", None),
            ("unix://relative.sock", None),
            ("tcp://localhost:2375", None),
        ] {
            assert_eq!(socket_dir(uri, home), want.map(PathBuf::from), "{uri}");
        }
    }

    #[test]
    fn daemon_command_lines() {
        let rootless = UserEnv {
            home: "/home/ci".into(),
            xdg_runtime_dir: Some("/run/ci-1001".into()),
            ..Default::default()
        };
        for (cmd, env, want) in [
            (
                "dockerd --host unix:///run/ci/docker.sock --data-root /var/lib/ci/docker --exec-root=/run/ci/exec --iptables=false",
                None,
                vec!["/run/ci", "/var/lib/ci/docker", "/run/ci/exec"],
            ),
            (
                "/usr/bin/dockerd -H fd:// -H unix:///srv/d/docker.sock",
                None,
                vec!["/srv/d"],
            ),
            (
                "containerd --root /srv/c/root --state /srv/c/state -a /srv/c/ctr.sock",
                None,
                vec!["/srv/c/root", "/srv/c/state", "/srv/c"],
            ),
            (
                "podman --root /srv/p system service --time=0 unix:///run/ci/podman.sock",
                None,
                vec!["/srv/p", "/run/ci"],
            ),
            (
                "podman system service --time=0 unix:///run/ci-1001/podman/podman.sock",
                Some(&rootless),
                vec![
                    "/run/ci-1001/podman",
                    "/home/ci/.local/share/containers",
                    "/home/ci/.local/share/docker",
                    "/run/ci-1001",
                ],
            ),
            ("sleep --root /x", None, vec![]),
            ("dockerd --data-root", None, vec![]),
        ] {
            assert_eq!(paths(&daemon_dirs(&argv(cmd), env)), want, "{cmd}");
        }
        let d = daemon_dirs(&argv("dockerd --data-root /var/lib/ci/docker"), None);
        assert_eq!(d[0].what, "the data root of a running dockerd");
    }

    #[test]
    fn configuration_files() {
        let dirs = config_dirs(
            r#"{"data-root": "/srv/docker", "hosts": ["unix:///srv/sock/docker.sock", "tcp://0.0.0.0:2375"]}"#,
            &[
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"/srv/containers\"\nrunroot=\"/run/c\"\n".into(),
                "rootless_storage_path = \"$HOME/x\"\n".into(),
            ],
        );
        assert_eq!(
            paths(&dirs),
            ["/srv/docker", "/srv/sock", "/srv/containers", "/run/c"]
        );
        assert!(config_dirs("not json", &[]).is_empty());
    }
}
