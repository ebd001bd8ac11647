//! Finding and connecting to an engine: `--backend`, the Team's `backend`, the usual
//! environment variables and sockets, in that order.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::docker::DockerBackend;
use super::podman::PodmanBackend;
use super::{Backend, BackendError, EngineInfo};
pub use crate::core::container::Engine;
use crate::host::which;
use crate::model::BackendChoice;

/// One place an engine may answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Which engine is expected there.
    pub engine: Engine,
    /// `unix:///path` or `tcp://host:port`.
    pub uri: String,
    /// Where the candidate came from, for messages (`DOCKER_HOST`, `rootless default`...).
    pub origin: &'static str,
}

/// The environment that decides where engines are looked for; a value so it can be tested.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `DOCKER_HOST`.
    pub docker_host: Option<String>,
    /// `CONTAINER_HOST` (Podman's).
    pub container_host: Option<String>,
    /// `XDG_RUNTIME_DIR`: where rootless engines put their sockets.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// The user's uid: root has no rootless socket; for others, `/run/user/<uid>` when
    /// `XDG_RUNTIME_DIR` is not set.
    pub uid: u32,
}

impl Env {
    /// The environment of this process, for the user `uid`.
    pub(crate) fn from_process(uid: u32) -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env {
            docker_host: var("DOCKER_HOST"),
            container_host: var("CONTAINER_HOST"),
            xdg_runtime_dir: var("XDG_RUNTIME_DIR").map(PathBuf::from),
            uid,
        }
    }
}

/// Where to look, in order. An explicit variable is taken as the user's choice and comes
/// first; then rootless Podman (the most contained), rootful Podman, Docker.
pub(crate) fn candidates(choice: BackendChoice, env: &Env) -> Vec<Candidate> {
    let mut podman = Vec::new();
    if let Some(h) = &env.container_host {
        podman.push(Candidate {
            engine: Engine::Podman,
            uri: h.clone(),
            origin: "CONTAINER_HOST",
        });
    }
    let runtime = env
        .xdg_runtime_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", env.uid)));
    if env.uid != 0 {
        let p = runtime.join("podman/podman.sock");
        podman.push(Candidate {
            engine: Engine::Podman,
            uri: unix(&p),
            origin: "rootless Podman socket",
        });
    }
    podman.push(Candidate {
        engine: Engine::Podman,
        uri: "unix:///run/podman/podman.sock".into(),
        origin: "rootful Podman socket",
    });
    let mut docker = Vec::new();
    if let Some(h) = &env.docker_host {
        docker.push(Candidate {
            engine: Engine::Docker,
            uri: h.clone(),
            origin: "DOCKER_HOST",
        });
    }
    docker.push(Candidate {
        engine: Engine::Docker,
        uri: "unix:///var/run/docker.sock".into(),
        origin: "Docker socket",
    });
    match choice.engine() {
        Some(Engine::Docker) => docker,
        Some(Engine::Podman) => podman,
        None => {
            // Explicit variables first, in the order: CONTAINER_HOST, DOCKER_HOST.
            let (mut explicit, mut rest): (Vec<_>, Vec<_>) = podman
                .into_iter()
                .chain(docker)
                .partition(|c| c.origin == "CONTAINER_HOST" || c.origin == "DOCKER_HOST");
            explicit.append(&mut rest);
            explicit
        }
    }
}

fn unix(p: &Path) -> String {
    format!("unix://{}", p.display())
}

/// Connects to one candidate and pings it.
pub async fn connect_to(c: &Candidate) -> Result<(Arc<dyn Backend>, EngineInfo), BackendError> {
    connect_to_with(c, None).await
}

/// `connect_to`, with the engine's `ping` kept in `memo` when it says who it is.
pub(crate) async fn connect_to_with(
    c: &Candidate,
    memo: Option<&Memo>,
) -> Result<(Arc<dyn Backend>, EngineInfo), BackendError> {
    if let Some(path) = c.uri.strip_prefix("unix://") {
        precheck_socket(c.engine, Path::new(path))?;
    }
    let backend: Arc<dyn Backend> = match c.engine {
        Engine::Docker => Arc::new(DockerBackend::connect(&c.uri).await?),
        Engine::Podman => Arc::new(PodmanBackend::connect(&c.uri).await?),
    };
    let key = memo.and_then(|_| memo_key(&c.uri, backend.identity()?));
    if let (Some(m), Some(key)) = (memo, &key)
        && let Some(info) = m.get(&c.uri, key)
    {
        return Ok((backend, info));
    }
    let info = backend.ping().await?;
    if let (Some(m), Some(key)) = (memo, key) {
        m.put(&c.uri, key, &info);
    }
    Ok((backend, info))
}

/// What each engine said of itself (`Backend::ping`), kept between runs in the state folder
/// (`layout::engine_memo_path`): Docker's `/info` costs 8 ms of a 40 ms status. An entry is
/// used only for the same address whose engine names itself the same (`Backend::identity`:
/// an upgrade changes it), on the same boot, with the same socket file (a restarted engine
/// makes a new one). It is a cache: unreadable, it is empty; unwritable, it stays so.
#[derive(Debug, Clone)]
pub struct Memo {
    /// The file.
    pub path: PathBuf,
    /// Who owns what ateam writes in the state folder.
    pub owner: crate::files::Owner,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct MemoEntry {
    key: String,
    info: EngineInfo,
}

/// The identity, the boot and the socket file of the engine at `uri`; None for an address
/// that is not a local socket, or that cannot be read.
fn memo_key(uri: &str, identity: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = uri.strip_prefix("unix://")?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let st = std::fs::metadata(path).ok()?;
    Some(format!(
        "{identity}; boot {}; socket {}:{} {}.{}",
        boot.trim(),
        st.dev(),
        st.ino(),
        st.ctime(),
        st.ctime_nsec()
    ))
}

impl Memo {
    fn read(&self) -> std::collections::BTreeMap<String, MemoEntry> {
        crate::files::read_small(&self.path, 1 << 20)
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    fn get(&self, uri: &str, key: &str) -> Option<EngineInfo> {
        self.read()
            .remove(uri)
            .filter(|e| e.key == key)
            .map(|e| e.info)
    }

    fn put(&self, uri: &str, key: String, info: &EngineInfo) {
        let mut all = self.read();
        all.insert(
            uri.to_string(),
            MemoEntry {
                key,
                info: info.clone(),
            },
        );
        let dir_exists = self.path.parent().is_some_and(Path::is_dir);
        if let (true, Ok(bytes)) = (dir_exists, serde_json::to_vec(&all)) {
            let _ = crate::files::write_atomic(&self.path, &bytes, 0o600, self.owner);
        }
    }
}

/// The first candidate that answers; the error lists every place tried and why it failed.
pub async fn connect(
    choice: BackendChoice,
    env: &Env,
    memo: Option<&Memo>,
) -> Result<(Arc<dyn Backend>, EngineInfo), BackendError> {
    let cands = candidates(choice, env);
    let mut tried = Vec::new();
    let mut permission = None;
    for c in &cands {
        match connect_to_with(c, memo).await {
            Ok(ok) => return Ok(ok),
            // One explicit choice that fails is the answer: do not silently fall back.
            Err(e) if choice != BackendChoice::Auto && cands.len() == 1 => return Err(e),
            Err(e) => {
                if matches!(e, BackendError::PermissionDenied { .. }) && permission.is_none() {
                    permission = Some(e.to_string());
                }
                tried.push(format!(
                    "  {} at {} ({}): {e}",
                    c.engine.name(),
                    c.uri,
                    c.origin
                ));
            }
        }
    }
    Err(BackendError::NoEngine {
        tried: tried.join("\n"),
        hint: permission.unwrap_or_else(|| start_hint(env)),
    })
}

/// What to run so that an engine answers.
pub(crate) fn start_hint(env: &Env) -> String {
    let podman_installed = which("podman").is_some();
    let docker_installed = which("dockerd").is_some();
    let sock = if env.uid == 0 {
        "/run/podman/podman.sock".to_string()
    } else {
        format!(
            "{}/podman/podman.sock",
            env.xdg_runtime_dir
                .clone()
                .unwrap_or_else(|| format!("/run/user/{}", env.uid).into())
                .display()
        )
    };
    // Without a login session (su, ssh without logind) there is no runtime folder: the
    // socket the hint names could not be made there (docs/rootless.md).
    let runtime_missing = env.uid != 0
        && !env
            .xdg_runtime_dir
            .clone()
            .unwrap_or_else(|| format!("/run/user/{}", env.uid).into())
            .is_dir();
    match (podman_installed, docker_installed) {
        (true, _) if runtime_missing => format!(
            "Podman is installed but its API socket is not running, and this session has no runtime folder ({}): `sudo loginctl enable-linger $USER` gives you one that lasts (and a user service manager: then systemctl --user start podman.socket), or make one of your own: export XDG_RUNTIME_DIR=$HOME/.run; mkdir -p -m 0700 $XDG_RUNTIME_DIR/podman; podman system service --time=0 unix://$XDG_RUNTIME_DIR/podman/podman.sock & (docs/rootless.md)",
            env.xdg_runtime_dir
                .as_ref()
                .map_or_else(|| "XDG_RUNTIME_DIR is not set".to_string(), |d| format!("{} is not there", d.display()))
        ),
        (true, _) => format!(
            "Podman is installed but its API socket is not running. Start it with\n  systemctl {}start podman.socket\nor, without systemd,\n  podman system service --time=0 unix://{sock} &",
            if env.uid == 0 { "" } else { "--user " }
        ),
        (false, true) => "Docker is installed but dockerd is not running: start it (systemctl start docker) or set DOCKER_HOST.".into(),
        (false, false) => "Install Podman (apt-get install podman) or Docker, or run scripts/engines.sh for the test setup.".into(),
    }
}

/// Turns a socket that is absent or forbidden into a clear error before any client is built.
fn precheck_socket(engine: Engine, path: &Path) -> Result<(), BackendError> {
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Err(BackendError::PermissionDenied {
            socket: path.display().to_string(),
            hint: match engine {
                Engine::Docker => {
                    "ask to be added to the `docker` group, or use rootless Podman".into()
                }
                Engine::Podman => {
                    "this socket belongs to another user; use your own rootless Podman socket"
                        .into()
                }
            },
        }),
        Err(e) => Err(BackendError::Unavailable {
            engine: engine.name().into(),
            socket: path.display().to_string(),
            hint: format!(" ({e})"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uris(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.uri.as_str()).collect()
    }

    #[test]
    fn the_memo_holds_for_the_same_engine_on_the_same_socket_only() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("engine.sock");
        let uri = format!("unix://{}", sock.display());
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let memo = Memo {
            path: dir.path().join("engines.json"),
            owner: crate::files::Owner {
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
            },
        };
        let info = EngineInfo {
            kind: super::super::EngineKind::Docker,
            version: "20.10.24".into(),
            api_version: "1.41".into(),
            cgroup_version: 1,
            limits_enforced: true,
        };
        let key = memo_key(&uri, "Docker/20.10.24 api 1.41").unwrap();
        assert!(memo.get(&uri, &key).is_none(), "nothing kept yet");
        memo.put(&uri, key.clone(), &info);
        assert_eq!(memo.get(&uri, &key), Some(info.clone()));
        // Another version answering there (an upgrade) is asked again.
        let upgraded = memo_key(&uri, "Docker/24.0.7 api 1.43").unwrap();
        assert!(memo.get(&uri, &upgraded).is_none());
        // So is an engine that made its socket anew (a restart).
        drop(listener);
        std::fs::remove_file(&sock).unwrap();
        let _again = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let restarted = memo_key(&uri, "Docker/20.10.24 api 1.41").unwrap();
        assert!(memo.get(&uri, &restarted).is_none());
        // A damaged file is an empty memo.
        std::fs::write(&memo.path, "not json").unwrap();
        assert!(memo.get(&uri, &key).is_none());
    }

    #[test]
    fn explicit_variables_come_first_then_rootless_podman() {
        let env = Env {
            docker_host: Some("unix:///d.sock".into()),
            container_host: None,
            xdg_runtime_dir: Some("/run/user/1000".into()),
            uid: 1000,
        };
        assert_eq!(
            uris(&candidates(BackendChoice::Auto, &env)),
            [
                "unix:///d.sock",
                "unix:///run/user/1000/podman/podman.sock",
                "unix:///run/podman/podman.sock",
                "unix:///var/run/docker.sock"
            ]
        );
        assert_eq!(
            uris(&candidates(BackendChoice::Docker, &env)),
            ["unix:///d.sock", "unix:///var/run/docker.sock"]
        );
        let root = Env {
            uid: 0,
            ..Default::default()
        };
        assert_eq!(
            uris(&candidates(BackendChoice::Podman, &root)),
            ["unix:///run/podman/podman.sock"]
        );
    }

    #[tokio::test]
    async fn a_missing_socket_says_which_and_how_to_start_an_engine() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            docker_host: Some(format!("unix://{}/nothing.sock", dir.path().display())),
            container_host: Some(format!(
                "unix://{}/nothing-either.sock",
                dir.path().display()
            )),
            xdg_runtime_dir: Some(dir.path().into()),
            uid: 4242,
        };
        let err = connect(BackendChoice::Docker, &env, None)
            .await
            .err()
            .expect("nothing answers")
            .to_string();
        assert!(err.contains("nothing.sock"), "{err}");
        assert!(err.contains("is not running"), "{err}");
    }

    /// Without a runtime folder (no login session) the hint says how to get one, not a
    /// socket path that cannot be made; with one, where the socket goes.
    #[test]
    fn the_start_hint_of_a_session_without_a_runtime_folder_says_how_to_get_one() {
        if crate::host::which("podman").is_none() {
            eprintln!("podman is not installed: nothing to hint");
            return;
        }
        let env = |dir: Option<&str>| Env {
            uid: 1001,
            xdg_runtime_dir: dir.map(PathBuf::from),
            ..Env::default()
        };
        let none = start_hint(&env(Some("/nonexistent/run/user/1001")));
        assert!(
            none.contains("enable-linger") && none.contains("is not there"),
            "{none}"
        );
        let dir = tempfile::tempdir().unwrap();
        let some = start_hint(&env(dir.path().to_str()));
        assert!(
            !some.contains("enable-linger")
                && some.contains(&format!(
                    "unix://{}/podman/podman.sock",
                    dir.path().display()
                )),
            "{some}"
        );
    }
}
