//! Podman: connecting to the service, and what it says of itself.

use std::future::Future;
use std::pin::Pin;

use containers_api::conn::hyper::{self, Body, Client, Response};
use containers_api::conn::{RequestClient, Transport};
use podman_api::Podman;
use serde_json::Value;

use super::errors::{engine_err, unavailable};
use super::{ENGINE, LIBPOD, PodmanBackend};
use crate::backend::{BackendError, EngineInfo, EngineKind, GvisorSupport, Result};
use crate::core::container::ContainerRuntime;

impl PodmanBackend {
    /// Connects to `unix:///path` or `tcp://host:port` and asks the engine whether it runs
    /// rootless (that decides `kind()` and how the policy's user mapping is expressed).
    pub async fn connect(uri: &str) -> Result<Self> {
        let podman = Podman::new(uri).map_err(|e| engine_err("connect", &e))?;
        let raw = raw_client(uri)?;
        // Podman's `info` takes about 0.2 s and `version` 0.3 s (4.3.1), which would dominate
        // every command. For a local socket both facts are cheaper to read from the host: a
        // rootless service's socket belongs to its user, and the cgroup version is the
        // host's. Elsewhere (tcp) ask `info`.
        let local = uri
            .strip_prefix("unix://")
            .and_then(|p| std::fs::metadata(p).ok());
        let (rootless, cgroup_version) = match local {
            Some(meta) => {
                use std::os::unix::fs::MetadataExt;
                (meta.uid() != 0, crate::backend::host_cgroup_version())
            }
            None => {
                let info = podman.info().await.map_err(|e| unavailable(uri, &e))?;
                let host = info.host.as_ref();
                let rootless = host
                    .and_then(|h| h.security.as_ref())
                    .and_then(|s| s.rootless)
                    .unwrap_or(false);
                // "v1" / "v2". Unknown is taken as v1: the case where limits may be ignored.
                let cgroup = host
                    .and_then(|h| h.cgroup_version.as_deref())
                    .and_then(|v| v.trim_start_matches('v').parse::<u8>().ok())
                    .unwrap_or(1);
                (rootless, cgroup)
            }
        };
        Ok(PodmanBackend {
            endpoint: uri.to_string(),
            podman,
            raw,
            rootless,
            cgroup_version,
        })
    }
}

pub(super) async fn ping(b: &PodmanBackend) -> Result<EngineInfo> {
    // `_ping` answers at once and names the libpod version in a header.
    let response = b
        .raw
        .get(format!("{LIBPOD}/_ping"))
        .await
        .map_err(|e| unavailable(&b.endpoint, &e))?;
    let version = response
        .headers()
        .get("Libpod-API-Version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Ok(EngineInfo {
        kind: EngineKind::Podman {
            rootless: b.rootless,
        },
        version: version.clone(),
        api_version: version,
        cgroup_version: b.cgroup_version,
        limits_enforced: !(b.rootless && b.cgroup_version == 1),
    })
}

/// Builds a request client the way `Podman::unix_versioned` / `tcp_versioned` do, with a
/// validator that keeps Podman's own error message.
pub(super) fn raw_client(uri: &str) -> Result<RequestClient<podman_api::Error>> {
    let transport = if let Some(path) = uri.strip_prefix("unix://") {
        Transport::Unix {
            client: Client::builder()
                .pool_max_idle_per_host(0)
                .build(containers_api::conn::get_unix_connector()),
            path: path.into(),
        }
    } else if let Some(host) = uri
        .strip_prefix("tcp://")
        .or_else(|| uri.strip_prefix("http://"))
    {
        let host = containers_api::url::url::Url::parse(&format!("tcp://{host}")).map_err(|e| {
            BackendError::Engine {
                engine: ENGINE.into(),
                op: "connect".into(),
                message: format!("invalid address {uri}: {e}"),
            }
        })?;
        Transport::Tcp {
            client: Client::builder().build(containers_api::conn::get_http_connector()),
            host,
        }
    } else {
        return Err(BackendError::Engine {
            engine: ENGINE.into(),
            op: "connect".into(),
            message: format!("unsupported address {uri} (expected unix:// or tcp://)"),
        });
    };
    Ok(RequestClient::new(transport, Box::new(validate_response)))
}

pub(super) type Validated = Pin<
    Box<dyn Future<Output = std::result::Result<Response<Body>, podman_api::Error>> + Send + Sync>,
>;

/// Passes 2xx through; anything else becomes `Fault` carrying Podman's `message`.
pub(super) fn validate_response(response: Response<Body>) -> Validated {
    Box::pin(async move {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = hyper::body::to_bytes(response.into_body())
            .await
            .map_err(containers_api::conn::Error::from)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                let m = v.get("message").and_then(Value::as_str).unwrap_or("");
                let c = v.get("cause").and_then(Value::as_str).unwrap_or("");
                match (m.is_empty(), c.is_empty()) {
                    (false, _) => Some(m.to_string()),
                    (true, false) => Some(c.to_string()),
                    (true, true) => None,
                }
            })
            .unwrap_or_else(|| {
                if text.trim().is_empty() {
                    status.canonical_reason().unwrap_or("error").to_string()
                } else {
                    text.trim().to_string()
                }
            });
        Err(podman_api::Error::Fault {
            code: status,
            message,
        })
    })
}

/// Podman 4 runs every container of a service under the service's runtime (a create's
/// runtime is ignored): members under gVisor need a service started with runsc.
pub(super) async fn gvisor(b: &PodmanBackend) -> Result<GvisorSupport> {
    let info = b.podman.info().await.map_err(|e| engine_err("info", &e))?;
    let runtime = info
        .host
        .as_ref()
        .and_then(|h| h.oci_runtime.as_ref())
        .and_then(|r| r.path.clone().or_else(|| r.name.clone()))
        .unwrap_or_default();
    if ContainerRuntime::Gvisor.reported_as(&runtime) {
        return Ok(GvisorSupport::Everything);
    }
    let rootless = if b.rootless {
        " --runtime-flag ignore-cgroups"
    } else {
        ""
    };
    let flags: Vec<String> = crate::backend::GVISOR_FLAGS
        .iter()
        .map(|f| format!("--runtime-flag {}", f.trim_start_matches("--")))
        .collect();
    Ok(GvisorSupport::Absent(format!(
        "this Podman service runs its containers under `{runtime}`, and Podman 4 runs every container of a service under the service's runtime: start one with `podman --runtime runsc {}{rootless} system service` and point CONTAINER_HOST at it (docs/gvisor.md)",
        flags.join(" ")
    )))
}
