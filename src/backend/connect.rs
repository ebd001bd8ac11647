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
    pub fn from_process(uid: u32) -> Env {
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
pub fn candidates(choice: BackendChoice, env: &Env) -> Vec<Candidate> {
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
    if let Some(path) = c.uri.strip_prefix("unix://") {
        precheck_socket(c.engine, Path::new(path))?;
    }
    let backend: Arc<dyn Backend> = match c.engine {
        Engine::Docker => Arc::new(DockerBackend::connect(&c.uri).await?),
        Engine::Podman => Arc::new(PodmanBackend::connect(&c.uri).await?),
    };
    let info = backend.ping().await?;
    Ok((backend, info))
}

/// The first candidate that answers; the error lists every place tried and why it failed.
pub async fn connect(
    choice: BackendChoice,
    env: &Env,
) -> Result<(Arc<dyn Backend>, EngineInfo), BackendError> {
    let cands = candidates(choice, env);
    let mut tried = Vec::new();
    let mut permission = None;
    for c in &cands {
        match connect_to(c).await {
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
pub fn start_hint(env: &Env) -> String {
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
    match (podman_installed, docker_installed) {
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
        let err = connect(BackendChoice::Docker, &env)
            .await
            .err()
            .expect("nothing answers")
            .to_string();
        assert!(err.contains("nothing.sock"), "{err}");
        assert!(err.contains("is not running"), "{err}");
    }
}
