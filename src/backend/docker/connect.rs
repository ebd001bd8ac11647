//! Docker: connecting to the daemon, and what it says of itself.

use std::io::ErrorKind;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::SystemInfoCgroupVersionEnum;

use super::errors::{io_kind, message_of};
use super::{DockerBackend, ENGINE, REQUEST_TIMEOUT};
use crate::backend::{BackendError, EngineInfo, EngineKind, GVISOR_FLAGS, GvisorSupport, Result};
use crate::core::container::GVISOR_RUNTIME;

/// How long the connect's `_ping` may take: it answers in well under a millisecond.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

impl DockerBackend {
    /// Connects to `unix:///path` or `tcp://host:port` and agrees on an API version.
    pub async fn connect(uri: &str) -> Result<Self> {
        if let Some(path) = uri.strip_prefix("unix://") {
            let unavailable = |e: std::io::Error| BackendError::Unavailable {
                engine: ENGINE.into(),
                socket: path.to_string(),
                hint: format!(" ({e})"),
            };
            let ping = tokio::time::timeout(PING_TIMEOUT, ping_headers(path))
                .await
                .map_err(|_| unavailable(ErrorKind::TimedOut.into()))
                .and_then(|p| p.map_err(unavailable));
            if let Ok(Some((api, server))) = ping {
                let docker = Docker::connect_with_unix(uri, REQUEST_TIMEOUT.as_secs(), &api)
                    .map_err(|e| BackendError::Unavailable {
                        engine: ENGINE.into(),
                        socket: path.to_string(),
                        hint: format!(" ({})", message_of(&e)),
                    })?;
                let identity = format!("{server} api {}.{}", api.major_version, api.minor_version);
                return Ok(DockerBackend {
                    docker,
                    endpoint: uri.to_string(),
                    socket: path.to_string(),
                    identity: Some(identity),
                });
            }
            ping?;
        }
        let (docker, socket) = if let Some(path) = uri.strip_prefix("unix://") {
            let d = Docker::connect_with_unix(
                uri,
                REQUEST_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            );
            (d, path.to_string())
        } else if let Some(addr) = uri
            .strip_prefix("tcp://")
            .or_else(|| uri.strip_prefix("http://"))
        {
            let d = Docker::connect_with_http(
                uri,
                REQUEST_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            );
            (d, addr.to_string())
        } else {
            return Err(BackendError::Engine {
                engine: ENGINE.into(),
                op: "connect".into(),
                message: format!(
                    "unsupported address `{uri}`: use unix:///path or tcp://host:port"
                ),
            });
        };
        let unavailable = |e: &BollardError| -> BackendError {
            if io_kind(e) == Some(ErrorKind::PermissionDenied) {
                BackendError::PermissionDenied {
                    socket: socket.clone(),
                    hint: "ask to be added to the `docker` group, or use rootless Podman".into(),
                }
            } else {
                BackendError::Unavailable {
                    engine: ENGINE.into(),
                    socket: socket.clone(),
                    hint: format!(" ({})", message_of(e)),
                }
            }
        };
        let docker = docker.map_err(|e| unavailable(&e))?;
        // Without this every call fails on an engine older than bollard's default API version.
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(DockerBackend {
            docker,
            endpoint: uri.to_string(),
            socket,
            identity: None,
        })
    }
}

pub(super) async fn ping(b: &DockerBackend) -> Result<EngineInfo> {
    // `info` names the version too: one round trip, not two.
    let info = b.docker.info().await.map_err(|e| b.engine_err("info", e))?;
    let cgroup_version = match info.cgroup_version {
        Some(SystemInfoCgroupVersionEnum::_2) => 2,
        // Docker has reported it since 20.10; older engines only run on v1.
        _ => 1,
    };
    let rootless = info
        .security_options
        .unwrap_or_default()
        .iter()
        .any(|o| o.split(',').any(|part| part == "name=rootless"));
    let api = b.docker.client_version();
    Ok(EngineInfo {
        kind: EngineKind::Docker,
        version: info.server_version.clone().unwrap_or_default(),
        api_version: format!("{}.{}", api.major_version, api.minor_version),
        cgroup_version,
        // Rootless Docker on cgroup v1 cannot delegate controllers: limits are accepted
        // and silently not applied.
        limits_enforced: !(rootless && cgroup_version == 1),
    })
}

/// The API version and the `Server` header of `GET /_ping` on the socket at `path` (None
/// when either is missing). One round trip of well under a millisecond, where bollard's
/// `negotiate_version` asks `/version`, which costs Docker 20.10 ten (it asks containerd and
/// runc theirs): a quarter of a status. The version is bollard's own when the engine's is
/// newer, as `negotiate_version` does.
pub(super) async fn ping_headers(
    path: &str,
) -> std::io::Result<Option<(bollard::ClientVersion, String)>> {
    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;
    let stream = tokio::net::UnixStream::connect(path).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get("/_ping")
        .header(hyper::header::HOST, "docker")
        .body(Empty::<bytes::Bytes>::new())
        .map_err(std::io::Error::other)?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(std::io::Error::other);
    conn.abort();
    let resp = resp?;
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let api = header("api-version").and_then(|v| {
        let (major, minor) = v.split_once('.')?;
        let theirs = bollard::ClientVersion {
            major_version: major.parse().ok()?,
            minor_version: minor.parse().ok()?,
        };
        Some(if theirs < *bollard::API_DEFAULT_VERSION {
            theirs
        } else {
            *bollard::API_DEFAULT_VERSION
        })
    });
    Ok(api.zip(header("server")))
}

/// Docker runs a container under gVisor when its create names a runtime of the daemon's
/// configuration: ateam names `runsc`, and wants it with `GVISOR_FLAGS`.
pub(super) async fn gvisor(b: &DockerBackend) -> Result<GvisorSupport> {
    let info = b.docker.info().await.map_err(|e| b.engine_err("info", e))?;
    let runtimes = info.runtimes.unwrap_or_default();
    let Some(runsc) = runtimes.get(GVISOR_RUNTIME) else {
        return Ok(GvisorSupport::Absent(format!(
            "Docker has no runtime named `{GVISOR_RUNTIME}` (it has {}): add {} to the daemon's configuration (daemon.json) and reload it (docs/gvisor.md)",
            runtimes.keys().cloned().collect::<Vec<_>>().join(", "),
            docker_runtime_entry()
        )));
    };
    let args = runsc.runtime_args.clone().unwrap_or_default();
    let missing: Vec<&str> = GVISOR_FLAGS
        .iter()
        .copied()
        .filter(|f| !args.iter().any(|a| a == f))
        .collect();
    if missing.is_empty() {
        Ok(GvisorSupport::PerContainer)
    } else {
        Ok(GvisorSupport::Absent(format!(
            "Docker's runtime `{GVISOR_RUNTIME}` runs without {}: make its entry in daemon.json {} and reload the daemon (docs/gvisor.md)",
            missing.join(" "),
            docker_runtime_entry()
        )))
    }
}

/// The daemon.json entry members under gVisor need.
fn docker_runtime_entry() -> String {
    let args: Vec<String> = GVISOR_FLAGS.iter().map(|f| format!("\"{f}\"")).collect();
    format!(
        "`\"runtimes\": {{\"{GVISOR_RUNTIME}\": {{\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [{}]}}}}`",
        args.join(", ")
    )
}
