//! Podman through podman-api (libpod API).
//!
//! Everything goes through podman-api except two calls whose podman-api 0.11 options are
//! misspelt and silently ignored by Podman: `create` (a raw POST of a libpod SpecGenerator, see
//! `create_body`) and `stop` (its timeout). What libpod inspect reports, as checked on
//! Podman 4.3.1 (cgroup v1), and how it is read here:
//!
//! - Dropped capabilities: `HostConfig.CapDrop` lists the individual `CAP_*` names, never
//!   "ALL"; the top-level `BoundingCaps` is null when nothing is left, so that is what
//!   `cap_drop_all` reads.
//! - no-new-privileges: `HostConfig.SecurityOpt` contains `no-new-privileges`.
//! - tmpfs mounts (sent as mounts of type `tmpfs`) appear in `HostConfig.Tmpfs`, not `Mounts`.
//! - `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf`, `/run/.containerenv` and the init
//!   binary are bind-mounted by Podman but do not appear in `Mounts`.
//! - Rootless on cgroup v1: memory, swap, pids and cpu limits are accepted but ignored and
//!   inspect reports them as 0 (`ping` says `limits_enforced: false`).
//! - `userns=keep-id` (rootless only) is reported as `UsernsMode: "private"`.
//! - Rootless, several creates or starts at once sometimes fail while Podman 4.3.1 reads the
//!   user's subordinate ids (`cannot read subids`, seen in its log as `no subuid ranges found`
//!   with /etc/subuid unchanged; on create `keep-id requires additional UIDs or GIDs`, on start
//!   runc's `can't get final child's PID from pipe`): about one apply in five of a few members.
//!   Those two errors are retried (`transient`) a few times after a short pause.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use containers_api::conn::hyper::{self, Body, Client, Response, StatusCode};
use containers_api::conn::{Payload, RequestClient, Transport, TtyChunk};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use podman_api::Podman;
use podman_api::models::{
    ContainerInspectResponseLibpod, InspectContainerHostConfig, ListContainer,
};
use podman_api::opts::{
    ContainerDeleteOpts, ContainerListFilter, ContainerListOpts, ContainerLogsOpts, EventsOpts,
    ExecCreateOpts, ExecStartOpts, PullOpts,
};
use serde_json::{Value, json};

use super::{
    Backend, BackendError, ContainerEvent, CreateRequest, EngineInfo, EngineKind, ExecOutput,
    ImageConfig, Inspected, LogOptions, PROBE_COMMAND, PathStat, PidFiles, Result, Summary,
    state_from,
};
use crate::core::container::{ContainerState, Effective, LastExit, Mount, rfc3339_epoch};

const ENGINE: &str = "podman";
/// The prefix of the raw libpod calls. Podman serves any `/vX/libpod/` prefix the same way; the
/// fields used here are all in the 4.x SpecGenerator.
const LIBPOD: &str = "/v4.0.0/libpod";
/// CPU period used to express `nano_cpus` as a CFS quota (the kernel's default period).
const CPU_PERIOD: u64 = 100_000;

/// Podman's libpod API, through podman-api.
pub struct PodmanBackend {
    endpoint: String,
    podman: Podman,
    /// A plain client on the same socket, for the calls podman-api cannot make correctly.
    raw: RequestClient<podman_api::Error>,
    rootless: bool,
    /// 1 or 2.
    cgroup_version: u8,
}

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
                (meta.uid() != 0, super::host_cgroup_version())
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

/// Builds a request client the way `Podman::unix_versioned` / `tcp_versioned` do, with a
/// validator that keeps Podman's own error message.
fn raw_client(uri: &str) -> Result<RequestClient<podman_api::Error>> {
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

type Validated = Pin<
    Box<dyn Future<Output = std::result::Result<Response<Body>, podman_api::Error>> + Send + Sync>,
>;

/// Passes 2xx through; anything else becomes `Fault` carrying Podman's `message`.
fn validate_response(response: Response<Body>) -> Validated {
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

/// The HTTP status of an engine answer, if the error is one.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
fn status_of(e: &podman_api::Error) -> Option<StatusCode> {
    match e {
        podman_api::Error::Fault { code, .. } => Some(*code),
        podman_api::Error::Error(containers_api::conn::Error::Fault { code, .. }) => Some(*code),
        // podman-api's other errors carry no HTTP status.
        _ => None,
    }
}

/// Podman's own words. podman-api formats faults as `"{message}: {cause}"` and the message
/// usually already ends with the cause, so the repeat is dropped.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
fn message_of(e: &podman_api::Error) -> String {
    match e {
        podman_api::Error::Fault { message, .. }
        | podman_api::Error::Error(containers_api::conn::Error::Fault { message, .. }) => {
            match message.rsplit_once(": ") {
                Some((head, tail)) if !tail.is_empty() && head.ends_with(tail) => head.to_string(),
                _ => message.clone(),
            }
        }
        // podman-api's own errors: their text as it is.
        other => other.to_string(),
    }
}

fn is_not_found(e: &podman_api::Error) -> bool {
    status_of(e) == Some(StatusCode::NOT_FOUND) || e.to_string().contains("no such container")
}

/// 304: already in the asked state (start a running container, stop a stopped one).
fn is_not_modified(e: &podman_api::Error) -> bool {
    status_of(e) == Some(StatusCode::NOT_MODIFIED)
}

fn engine_err(op: &str, e: &podman_api::Error) -> BackendError {
    BackendError::Engine {
        engine: ENGINE.into(),
        op: op.into(),
        message: message_of(e),
    }
}

/// Not-found becomes `NotFound { id }`, the rest `Engine`.
fn container_err(op: &str, id: &str, e: &podman_api::Error) -> BackendError {
    if is_not_found(e) {
        BackendError::NotFound { id: id.into() }
    } else {
        engine_err(op, e)
    }
}

/// A failure to talk at all (as opposed to an error answer) means nothing usable is there.
fn unavailable(uri: &str, e: &podman_api::Error) -> BackendError {
    if status_of(e).is_some() {
        return engine_err("connect", e);
    }
    BackendError::Unavailable {
        engine: ENGINE.into(),
        socket: uri.strip_prefix("unix://").unwrap_or(uri).into(),
        hint: format!(" ({e})"),
    }
}

/// The libpod SpecGenerator for `req`.
///
/// Sent raw instead of through `ContainerCreateOptsBuilder` because podman-api 0.11's
/// `no_new_privilages` serializes the misspelt key `"no_new_privilages"`, which Podman
/// silently ignores: the builder cannot set no-new-privileges.
///
/// Besides the request, the cgroup namespace is made private: on cgroup v1 Podman's default
/// is the host's, which inspect reports as `CgroupMode: "host"` (a host namespace).
fn create_body(req: &CreateRequest) -> Value {
    let mut mounts: Vec<Value> = req
        .mounts
        .iter()
        .map(|m| {
            json!({
                "destination": m.target,
                "source": m.source,
                "type": "bind",
                "options": ["rbind", if m.read_only { "ro" } else { "rw" }, "rprivate"],
            })
        })
        .collect();
    // tmpfs as mounts of type "tmpfs": inspect reports them in HostConfig.Tmpfs.
    mounts.extend(req.tmpfs.iter().map(|(target, opts)| {
        let options: Vec<&str> = opts.split(',').filter(|o| !o.is_empty()).collect();
        json!({
            "destination": target,
            "source": "tmpfs",
            "type": "tmpfs",
            "options": options,
        })
    }));
    let mut limits = json!({
        "memory": { "limit": req.memory_bytes, "swap": req.memory_swap_bytes },
        "pids": { "limit": req.pids },
    });
    if let Some(nano) = req.nano_cpus {
        limits["cpu"] = json!({ "quota": nano * CPU_PERIOD / 1_000_000_000, "period": CPU_PERIOD });
    }
    let mut body = json!({
        "name": req.name,
        "image": req.image,
        "env": req.env,
        "user": req.user,
        "labels": req.labels,
        "mounts": mounts,
        "resource_limits": limits,
        "no_new_privileges": req.no_new_privileges,
        "read_only_filesystem": req.read_only_rootfs,
        "init": req.init,
        "restart_policy": "no",
        "create_working_dir": false,
        // An interactive agent's terminal, kept by the engine: `ateam attach` joins it.
        "terminal": req.terminal,
        "stdin": req.terminal,
    });
    // Empty means "the image's own", as in the Docker API.
    if !req.entrypoint.is_empty() {
        body["entrypoint"] = json!(req.entrypoint);
    }
    if !req.cmd.is_empty() {
        body["command"] = json!(req.cmd);
    }
    if !req.workdir.as_os_str().is_empty() {
        body["work_dir"] = json!(req.workdir);
    }
    if req.network_none {
        body["netns"] = json!({ "nsmode": "none" });
    } else if let Some(n) = &req.network_name {
        body["netns"] = json!({ "nsmode": "bridge" });
        body["Networks"] = json!({ n: {} });
    }
    if req.cap_drop_all {
        body["cap_drop"] = json!(["ALL"]);
    }
    if req.cgroupns_private {
        body["cgroupns"] = json!({ "nsmode": "private" });
    }
    if req.userns_keep_id {
        body["userns"] = json!({ "nsmode": "keep-id" });
    }
    body
}

fn summary_from_list(c: &ListContainer) -> Summary {
    Summary {
        id: c.id.clone().unwrap_or_default(),
        name: c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_default(),
        labels: to_btree(c.labels.as_ref()),
        state: state_from(
            c.state.as_deref().unwrap_or(""),
            i64::from(c.exit_code.unwrap_or(0)),
        ),
        created: c.created.map(|t| t.timestamp()).unwrap_or(0),
    }
}

fn to_btree(m: Option<&HashMap<String, String>>) -> BTreeMap<String, String> {
    m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn has_labels(have: &HashMap<String, String>, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// Reduces a libpod inspect to what the policy judges.
fn effective_from(d: &ContainerInspectResponseLibpod) -> Effective {
    let cfg = d.config.as_ref();
    let hc = d.host_config.as_ref();
    let mut e = Effective {
        image: cfg
            .and_then(|c| c.image.clone())
            .filter(|i| !i.is_empty())
            .or_else(|| d.image_name.clone())
            .unwrap_or_default(),
        // Libpod reports the entrypoint as one string, words joined by spaces.
        entrypoint: cfg
            .and_then(|c| c.entrypoint.as_deref())
            .map(|e| e.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        cmd: cfg.and_then(|c| c.cmd.clone()).unwrap_or_default(),
        user: cfg.and_then(|c| c.user.clone()).unwrap_or_default(),
        apparmor_profile: d.app_armor_profile.clone().unwrap_or_default(),
        ..Default::default()
    };
    // The bounding set is what the process can ever hold; libpod reports it as null when
    // everything is dropped, while HostConfig.CapDrop lists names and never says "ALL".
    e.cap_drop_all = d.bounding_caps.as_ref().is_none_or(|c| c.is_empty());
    add_mounts(&mut e, d);
    if let Some(hc) = hc {
        add_host_config(&mut e, d, hc);
    }
    e
}

/// Binds, tmpfs and any other mount, from the container's mount list.
fn add_mounts(e: &mut Effective, d: &ContainerInspectResponseLibpod) {
    for m in d.mounts.iter().flatten() {
        let kind = m.type_.as_deref().unwrap_or("");
        let dest = m.destination.clone().unwrap_or_default();
        match kind {
            "bind" => e.bind_mounts.push(Mount {
                source: m.source.clone().unwrap_or_default().into(),
                target: dest.into(),
                read_only: !m.rw.unwrap_or(false),
            }),
            "tmpfs" => {
                e.tmpfs.entry(dest).or_default();
            }
            _ => {
                let source = m
                    .source
                    .clone()
                    .or_else(|| m.name.clone())
                    .unwrap_or_default();
                e.other_mounts.push(format!("{kind}:{source}:{dest}"));
            }
        }
    }
}

/// What the policy judges of libpod's HostConfig.
fn add_host_config(
    e: &mut Effective,
    d: &ContainerInspectResponseLibpod,
    hc: &InspectContainerHostConfig,
) {
    e.privileged = hc.privileged.unwrap_or(false);
    e.cap_add = hc.cap_add.clone().unwrap_or_default();
    e.no_new_privileges = hc.security_opt.iter().flatten().any(|o| {
        matches!(
            o.as_str(),
            "no-new-privileges" | "no-new-privileges:true" | "no-new-privileges=true"
        )
    });
    e.read_only_rootfs = hc.readonly_rootfs.unwrap_or(false);
    e.init = hc.init.unwrap_or(false);
    e.network_mode = hc.network_mode.clone().unwrap_or_default();
    e.networks = d
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().cloned().collect())
        .unwrap_or_default();
    e.networks.sort();
    e.tmpfs.extend(
        hc.tmpfs
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    e.security_opt = hc.security_opt.clone().unwrap_or_default();
    e.cgroup_parent = hc.cgroup_parent.clone().unwrap_or_default();
    e.oom_kill_disable = hc.oom_kill_disable.unwrap_or(false);
    e.memory_bytes = hc.memory.unwrap_or(0).max(0) as u64;
    e.memory_swap_bytes = hc.memory_swap.unwrap_or(0);
    e.pids_limit = hc.pids_limit.unwrap_or(0);
    e.nano_cpus = match (hc.nano_cpus, hc.cpu_quota, hc.cpu_period) {
        (Some(n), _, _) if n > 0 => n as u64,
        (_, Some(q), Some(p)) if q > 0 && p > 0 => (q as u64).saturating_mul(1_000_000_000) / p,
        _ => 0,
    };
    e.restart_policy = hc
        .restart_policy
        .as_ref()
        .and_then(|r| r.name.clone())
        .unwrap_or_default();
    e.devices = hc
        .devices
        .iter()
        .flatten()
        .map(|d| {
            format!(
                "{}:{}:{}",
                d.path_on_host.as_deref().unwrap_or(""),
                d.path_in_container.as_deref().unwrap_or(""),
                d.cgroup_permissions.as_deref().unwrap_or("")
            )
        })
        .collect();
    e.group_add = hc.group_add.clone().unwrap_or_default();
    for (ns, mode) in [
        ("pid", &hc.pid_mode),
        ("ipc", &hc.ipc_mode),
        ("uts", &hc.uts_mode),
        ("userns", &hc.userns_mode),
        ("cgroupns", &hc.cgroup_mode),
    ] {
        e.namespaces
            .insert(ns.to_string(), mode.clone().unwrap_or_default());
    }
    e.published_ports = published_ports(hc);
}

/// Published ports as `ip:port->port`, `exposed:port`, and `publish-all` for `-P`.
fn published_ports(hc: &InspectContainerHostConfig) -> Vec<String> {
    // Libpod 4.x has no Config.ExposedPorts: an exposed port is a PortBindings entry without
    // bindings.
    let mut ports: Vec<String> = Vec::new();
    for (port, bindings) in hc.port_bindings.iter().flatten() {
        match bindings.as_deref() {
            Some(b) if !b.is_empty() => ports.extend(b.iter().map(|b| {
                format!(
                    "{}:{}->{port}",
                    b.host_ip.as_deref().unwrap_or(""),
                    b.host_port.as_deref().unwrap_or("")
                )
            })),
            _ => ports.push(format!("exposed:{port}")),
        }
    }
    ports.sort();
    if hc.publish_all_ports.unwrap_or(false) {
        ports.push("publish-all".into());
    }
    ports
}

fn inspected_from(d: &ContainerInspectResponseLibpod) -> Inspected {
    let state = d.state.as_ref();
    let status = state.and_then(|s| s.status.as_deref()).unwrap_or("");
    // `stopping` too: the process runs until the stop is done (see `state_from`).
    let running = state_from(status, 0) == ContainerState::Running
        || state.and_then(|s| s.running).unwrap_or(false);
    let pid = state
        .and_then(|s| s.pid)
        .filter(|p| running && *p > 0)
        .and_then(|p| u32::try_from(p).ok());
    let image = d
        .config
        .as_ref()
        .and_then(|c| c.image.clone())
        .filter(|i| !i.is_empty())
        .or_else(|| d.image_name.clone())
        .unwrap_or_default();
    let container_state = state_from(
        status,
        i64::from(state.and_then(|s| s.exit_code).unwrap_or(0)),
    );
    let last_exit = match container_state {
        ContainerState::Exited { code } => Some(LastExit::exited(
            code,
            state.and_then(|s| s.oom_killed).unwrap_or(false),
            state
                .and_then(|s| s.finished_at)
                .and_then(|t| rfc3339_epoch(t.timestamp())),
            state.and_then(|s| s.error.clone()),
        )),
        ContainerState::Created
        | ContainerState::Running
        | ContainerState::Paused
        | ContainerState::Restarting
        | ContainerState::Removing
        | ContainerState::Dead => None,
    };
    Inspected {
        summary: Summary {
            id: d.id.clone().unwrap_or_default(),
            name: d
                .name
                .as_deref()
                .unwrap_or("")
                .trim_start_matches('/')
                .to_string(),
            labels: to_btree(d.config.as_ref().and_then(|c| c.labels.as_ref())),
            state: container_state,
            created: d.created.map(|t| t.timestamp()).unwrap_or(0),
        },
        effective: effective_from(d),
        pid,
        image,
        image_id: d.image.clone().unwrap_or_default(),
        restart_count: d.restart_count.unwrap_or(0).max(0) as u64,
        // Never started: Go's zero time, year 1.
        started_at: state
            .and_then(|s| s.started_at)
            .filter(|t| t.timestamp() > 0)
            .map(|t| t.to_rfc3339()),
        last_exit,
        pid_files: pid_files(d),
    }
}

/// Where conmon and the OCI runtime write the pids of each start, when inspect names both.
fn pid_files(d: &ContainerInspectResponseLibpod) -> Option<PidFiles> {
    let path = |p: &Option<String>| {
        p.as_deref()
            .filter(|p| p.starts_with('/'))
            .map(std::path::PathBuf::from)
    };
    Some(PidFiles {
        init: path(&d.pid_file)?,
        monitor: path(&d.conmon_pid_file)?,
    })
}

#[async_trait]
impl Backend for PodmanBackend {
    fn kind(&self) -> EngineKind {
        EngineKind::Podman {
            rootless: self.rootless,
        }
    }

    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn ping(&self) -> Result<EngineInfo> {
        // `_ping` answers at once and names the libpod version in a header.
        let response = self
            .raw
            .get(format!("{LIBPOD}/_ping"))
            .await
            .map_err(|e| unavailable(&self.endpoint, &e))?;
        let version = response
            .headers()
            .get("Libpod-API-Version")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Ok(EngineInfo {
            kind: EngineKind::Podman {
                rootless: self.rootless,
            },
            version: version.clone(),
            api_version: version,
            cgroup_version: self.cgroup_version,
            limits_enforced: !(self.rootless && self.cgroup_version == 1),
        })
    }

    async fn list(&self, labels: &BTreeMap<String, String>) -> Result<Vec<Summary>> {
        let opts = ContainerListOpts::builder()
            .all(true)
            .filter(
                labels
                    .iter()
                    .map(|(k, v)| ContainerListFilter::LabelKeyVal(k.clone(), v.clone())),
            )
            .build();
        let list = self
            .podman
            .containers()
            .list(&opts)
            .await
            .map_err(|e| engine_err("list", &e))?;
        // Filtered again here so the result never depends on how the engine combines filters.
        Ok(list
            .iter()
            .filter(|c| {
                labels.is_empty() || c.labels.as_ref().is_some_and(|l| has_labels(l, labels))
            })
            .map(summary_from_list)
            .collect())
    }

    async fn find_by_name(&self, name: &str) -> Result<Option<Summary>> {
        // Podman's name filter is a regular expression (a substring match): keep the exact one.
        let opts = ContainerListOpts::builder()
            .all(true)
            .filter([ContainerListFilter::Name(name.to_string())])
            .build();
        let list = self
            .podman
            .containers()
            .list(&opts)
            .await
            .map_err(|e| engine_err("list", &e))?;
        Ok(list.iter().map(summary_from_list).find(|s| s.name == name))
    }

    async fn inspect(&self, id: &str) -> Result<Inspected> {
        let d = self
            .podman
            .containers()
            .get(id)
            .inspect()
            .await
            .map_err(|e| container_err("inspect", id, &e))?;
        Ok(inspected_from(&d))
    }

    async fn build(&self, req: &super::BuildRequest) -> Result<()> {
        // libpod's build (4.3): `networkmode` is buildah's policy by name (Docker's `none` is
        // read as the default, and RUN got the host's interfaces here), and without
        // `nsoptions` RUN shares the host's network namespace: both say none.
        // `pullpolicy=never` pulls nothing (the caller checked every FROM is here).
        let json = |v: &BTreeMap<String, String>| serde_json::to_string(v).unwrap_or_default();
        let query = [
            ("dockerfile", req.dockerfile.clone()),
            ("t", req.tag.clone()),
            ("networkmode", "NetworkDisabled".into()),
            (
                "nsoptions",
                r#"[{"Name":"network","Host":false,"Path":""}]"#.into(),
            ),
            ("pullpolicy", "never".into()),
            ("rm", "true".into()),
            ("forcerm", "true".into()),
            ("buildargs", json(&req.args)),
            ("labels", json(&req.labels)),
            ("target", req.target.clone()),
        ];
        let ep = containers_api::url::construct_ep(
            format!("{LIBPOD}/build"),
            Some(containers_api::url::encoded_pairs(query)),
        );
        // One JSON object per step, read as they come; an error is one of them. Only the
        // last of what RUN printed is kept.
        let mut out = String::new();
        let mut steps = Box::pin(self.raw.post_into_stream::<_, Value>(
            ep,
            Payload::XTar(req.context.clone()),
            None,
        ));
        while let Some(v) = steps.next().await {
            let v = v.map_err(|e| engine_err(&format!("build {}", req.tag), &e))?;
            if let Some(s) = v.get("stream").and_then(Value::as_str) {
                super::keep_tail(&mut out, s);
            }
            if let Some(e) = v.get("error").and_then(Value::as_str) {
                return Err(BackendError::Engine {
                    engine: ENGINE.into(),
                    op: format!("build {}", req.tag),
                    message: format!("{e}\n{}", super::build_tail(&out)),
                });
            }
        }
        Ok(())
    }

    async fn pull(&self, image: &str) -> Result<()> {
        let opts = PullOpts::builder()
            .reference(super::with_tag(image))
            .quiet(true)
            .build();
        let images = self.podman.images();
        let mut progress = images.pull(&opts);
        while let Some(report) = progress.next().await {
            let report = report.map_err(|e| engine_err(&format!("pull {image}"), &e))?;
            if let Some(error) = report.error.filter(|e| !e.is_empty()) {
                return Err(BackendError::Engine {
                    engine: ENGINE.into(),
                    op: format!("pull {image}"),
                    message: error,
                });
            }
        }
        Ok(())
    }

    async fn image_config(&self, image: &str) -> Result<ImageConfig> {
        let data = self
            .podman
            .images()
            .get(image)
            .inspect()
            .await
            .map_err(|e| {
                if status_of(&e) == Some(StatusCode::NOT_FOUND)
                    || message_of(&e).contains("image not known")
                {
                    BackendError::ImageMissing {
                        engine: ENGINE.into(),
                        image: image.into(),
                    }
                } else {
                    engine_err("image inspect", &e)
                }
            })?;
        let id = data.id.clone().unwrap_or_default();
        let (entrypoint, cmd, env) = data
            .config
            .map(|c| (c.entrypoint, c.cmd, c.env))
            .unwrap_or_default();
        Ok(ImageConfig {
            id,
            command: entrypoint
                .unwrap_or_default()
                .into_iter()
                .chain(cmd.unwrap_or_default())
                .collect(),
            env: env.unwrap_or_default(),
        })
    }

    async fn create_probe(&self, image: &str, labels: &BTreeMap<String, String>) -> Result<String> {
        let body = json!({
            "image": image,
            "entrypoint": [PROBE_COMMAND],
            "labels": labels,
            "netns": { "nsmode": "none" },
        })
        .to_string();
        let text = self
            .raw
            .post_string(
                format!("{LIBPOD}/containers/create"),
                Payload::Json(body),
                None,
            )
            .await
            .map_err(|e| {
                if message_of(&e).contains("image not known") {
                    BackendError::ImageMissing {
                        engine: ENGINE.into(),
                        image: image.into(),
                    }
                } else {
                    engine_err("create probe", &e)
                }
            })?;
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("Id")?.as_str().map(str::to_string))
            .ok_or_else(|| BackendError::Engine {
                engine: ENGINE.into(),
                op: "create probe".into(),
                message: format!("no Id in the answer: {text}"),
            })
    }

    async fn stat(&self, id: &str, path: &str) -> Result<Option<PathStat>> {
        let ep = containers_api::url::construct_ep(
            format!("{LIBPOD}/containers/{id}/archive"),
            Some(containers_api::url::encoded_pair("path", path)),
        );
        let response = match self.raw.head(ep).await {
            Ok(r) => r,
            // No body to tell a missing path from a missing container: the caller's probe
            // exists, so it is the path.
            Err(e) if status_of(&e) == Some(StatusCode::NOT_FOUND) => return Ok(None),
            Err(e) => return Err(container_err("stat path", id, &e)),
        };
        let bad = |message: String| BackendError::Engine {
            engine: ENGINE.into(),
            op: "stat path".into(),
            message,
        };
        let header = response
            .headers()
            .get("X-Docker-Container-Path-Stat")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| bad(format!("no path stat for {path}")))?;
        let json = base64::engine::general_purpose::STANDARD
            .decode(header)
            .map_err(|e| bad(format!("unreadable path stat for {path}: {e}")))?;
        serde_json::from_slice(&json)
            .map(Some)
            .map_err(|e| bad(format!("unreadable path stat for {path}: {e}")))
    }

    async fn read_file(&self, id: &str, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let containers = self.podman.containers();
        let c = containers.get(id);
        let mut stream = std::pin::pin!(c.copy_from(path));
        let mut tar = Vec::new();
        // The archive's header and padding come on top of the file.
        let limit = max.saturating_add(64 * 1024) as usize;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => tar.extend_from_slice(&b),
                Err(e) if status_of(&e) == Some(StatusCode::NOT_FOUND) => return Ok(None),
                Err(e) => return Err(container_err("read file", id, &e)),
            }
            if tar.len() > limit {
                return Ok(None);
            }
        }
        Ok(super::file_in_archive(&tar, max))
    }

    async fn create(&self, req: &CreateRequest) -> Result<String> {
        let body = create_body(req).to_string();
        let _turn = self.one_create_at_a_time().await;
        let text = transient(|| {
            self.raw.post_string(
                format!("{LIBPOD}/containers/create"),
                Payload::Json(body.clone()),
                None,
            )
        })
        .await
        .map_err(|e| {
            let message = message_of(&e);
            if message.contains("image not known") {
                BackendError::ImageMissing {
                    engine: ENGINE.into(),
                    image: req.image.clone(),
                }
            } else if message.contains("already in use") {
                BackendError::NameConflict {
                    name: req.name.clone(),
                }
            } else {
                engine_err("create", &e)
            }
        })?;
        let answer: Value = serde_json::from_str(&text).map_err(|e| BackendError::Engine {
            engine: ENGINE.into(),
            op: "create".into(),
            message: format!("unreadable answer ({e}): {text}"),
        })?;
        for w in answer
            .get("Warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            tracing::warn!(name = %req.name, warning = w, "podman warned on create");
        }
        answer
            .get("Id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| BackendError::Engine {
                engine: ENGINE.into(),
                op: "create".into(),
                message: format!("no Id in the answer: {text}"),
            })
    }

    async fn start(&self, id: &str) -> Result<()> {
        match transient(|| async { self.podman.containers().get(id).start(None).await }).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_modified(&e) => Ok(()),
            Err(e) => Err(container_err("start", id, &e)),
        }
    }

    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<()> {
        // Raw, like create: podman-api 0.11's `ContainerStopOpts::timeout` sends `Timeout=`,
        // which Podman 4.3 ignores (it reads `timeout`), so every stop would wait the
        // container's default 10 s instead of `timeout_secs`.
        let ep = containers_api::url::construct_ep(
            format!("{LIBPOD}/containers/{id}/stop"),
            Some(containers_api::url::encoded_pair("timeout", timeout_secs)),
        );
        match self.raw.post(ep, Payload::empty(), None).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_modified(&e) => Ok(()),
            Err(e) => Err(container_err("stop", id, &e)),
        }
    }

    async fn remove(&self, id: &str) -> Result<()> {
        // force: stop first if running; timeout 0: the caller stops gracefully when it wants to.
        let opts = ContainerDeleteOpts::builder()
            .force(true)
            .timeout(0)
            .build();
        match self.podman.containers().get(id).delete(&opts).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(engine_err("remove", &e)),
        }
    }

    async fn rename(&self, id: &str, name: &str) -> Result<()> {
        self.podman
            .containers()
            .get(id)
            .rename(name)
            .await
            .map_err(|e| {
                if message_of(&e).contains("already in use") {
                    BackendError::NameConflict { name: name.into() }
                } else {
                    container_err("rename", id, &e)
                }
            })
    }

    async fn unpause(&self, id: &str) -> Result<()> {
        self.podman
            .containers()
            .get(id)
            .unpause()
            .await
            .map_err(|e| container_err("unpause", id, &e))
    }

    async fn resize_terminal(&self, id: &str, rows: u16, cols: u16) -> Result<()> {
        self.podman
            .containers()
            .get(id)
            .resize(usize::from(cols), usize::from(rows))
            .await
            .map_err(|e| container_err("resize", id, &e))
    }

    async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<()> {
        let networks = self.podman.networks();
        if networks
            .get(name)
            .exists()
            .await
            .map_err(|e| engine_err("inspect network", &e))?
        {
            return Ok(());
        }
        let opts = podman_api::opts::NetworkCreateOpts::builder()
            .name(name)
            .driver("bridge")
            .labels(labels.clone())
            .build();
        match networks.create(&opts).await {
            Ok(_) => Ok(()),
            // Made by a concurrent apply meanwhile.
            Err(e) if message_of(&e).contains("already exists") => Ok(()),
            Err(e) => Err(engine_err("create network", &e)),
        }
    }

    async fn remove_network(&self, name: &str) -> Result<()> {
        let n = self.podman.networks().get(name);
        match n.exists().await {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(engine_err("inspect network", &e)),
        }
        n.delete()
            .await
            .map(|_| ())
            .map_err(|e| engine_err("remove network", &e))
    }

    async fn exec(&self, id: &str, cmd: &[String]) -> Result<ExecOutput> {
        let opts = ExecCreateOpts::builder()
            .command(cmd.iter().cloned())
            .attach_stdout(true)
            .attach_stderr(true)
            .build();
        let exec = self
            .podman
            .containers()
            .get(id)
            .create_exec(&opts)
            .await
            .map_err(|e| container_err("exec", id, &e))?;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        // Without a TTY the libpod stream is multiplexed (8-byte frame headers); podman-api's
        // Multiplexer splits it.
        if let Some(mut stream) = exec
            .start(&ExecStartOpts::builder().build())
            .await
            .map_err(|e| container_err("exec start", id, &e))?
        {
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(TtyChunk::StdOut(b)) => stdout.extend(b),
                    Ok(TtyChunk::StdErr(b)) => stderr.extend(b),
                    Ok(TtyChunk::StdIn(_)) => {}
                    Err(e) => {
                        return Err(BackendError::Engine {
                            engine: ENGINE.into(),
                            op: "exec".into(),
                            message: e.to_string(),
                        });
                    }
                }
            }
        }
        // The stream ends when the process does; the exit code is recorded right after, so
        // wait briefly for the session to say it is no longer running.
        let mut code = None;
        for _ in 0..50 {
            let v = exec
                .inspect()
                .await
                .map_err(|e| engine_err("exec inspect", &e))?;
            if !v.get("Running").and_then(Value::as_bool).unwrap_or(false) {
                code = v.get("ExitCode").and_then(Value::as_i64);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let code = code.ok_or_else(|| BackendError::Engine {
            engine: ENGINE.into(),
            op: "exec".into(),
            message: "the command's exit code never appeared".into(),
        })?;
        Ok(ExecOutput {
            code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    async fn logs(&self, id: &str, o: LogOptions, sink: &mut super::LogSink<'_>) -> Result<()> {
        let mut opts = ContainerLogsOpts::builder()
            .stdout(true)
            .stderr(true)
            .follow(o.follow)
            .tail(o.tail.to_string())
            .timestamps(o.timestamps);
        if let Some(since) = o.since {
            opts = opts.since(since.to_string());
        }
        let opts = opts.build();
        let container = self.podman.containers().get(id);
        let mut stream = container.logs(&opts);
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => sink(&Vec::from(c)),
                Err(e) => return Err(container_err("logs", id, &e)),
            }
        }
        Ok(())
    }

    async fn events(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<BoxStream<'static, Result<ContainerEvent>>> {
        // podman-api's event stream borrows the client, so a task owns a clone and forwards
        // ids; it ends when the receiver is dropped or the engine closes the stream.
        //
        // `since` = now: the subscription is made by the task a moment later, and events in
        // between are replayed from Podman's event log instead of being lost.
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut filters: Vec<(String, Vec<String>)> =
            vec![("type".into(), vec!["container".into()])];
        if !labels.is_empty() {
            filters.push((
                "label".into(),
                labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            ));
        }
        let opts = EventsOpts::builder()
            .stream(true)
            .since(since.to_string())
            .filters(filters)
            .build();
        let podman = self.podman.clone();
        let labels = labels.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<ContainerEvent>>(64);
        tokio::spawn(async move {
            let mut events = podman.events(&opts);
            loop {
                tokio::select! {
                    _ = tx.closed() => break,
                    next = events.next() => match next {
                        None => break,
                        // Several label filters are OR-ed by Podman: require all of them here.
                        Some(Ok(ev)) => {
                            let label = |k: &str| ev.actor.attributes.get(k).cloned();
                            let (team, member) = {
                        use crate::core::container::labels as names;
                        (label(names::TEAM), label(names::MEMBER))
                    };
                            if ev.typ == "container"
                                && !super::quiet_event(&ev.action)
                                && has_labels(&ev.actor.attributes, &labels)
                                && tx
                                    .send(Ok(ContainerEvent { id: ev.actor.id, team, member }))
                                    .await
                                    .is_err()
                            {
                                break;
                            }
                        }
                        Some(Err(e)) => {
                            let _ = tx.send(Err(engine_err("events", &e))).await;
                            break;
                        }
                    },
                }
            }
        });
        Ok(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed())
    }
}

/// Rootless Podman 4.3 reads the subordinate ids through libsubid on every create with
/// `keep-id`, and two creates at once can race there: one fails with the errors `transient`
/// retries, or the whole service dies (SIGSEGV in `subid_get_uid_ranges`, seen in CI under
/// parallel applies), taking every member's request with it. So creates on a rootless service
/// go one at a time: within this process (a mutex), and across the user's ateam processes (a
/// flock on a file beside the service's socket, in the user's own runtime folder). Held while
/// the create request runs; dropped with the guard.
struct CreateTurn {
    _local: tokio::sync::MutexGuard<'static, ()>,
    _file: Option<std::fs::File>,
}

static CREATES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl PodmanBackend {
    async fn one_create_at_a_time(&self) -> Option<CreateTurn> {
        if !self.rootless {
            return None;
        }
        let local = CREATES.lock().await;
        let lock = self
            .endpoint
            .strip_prefix("unix://")
            .and_then(|sock| std::path::Path::new(sock).parent())
            .map(|dir| dir.join("ateam-create.lock"));
        let file = match lock {
            Some(path) => tokio::task::spawn_blocking(move || {
                let f = crate::files::open_lock(&path).ok()?;
                rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).ok()?;
                Some(f)
            })
            .await
            .ok()
            .flatten(),
            None => None,
        };
        Some(CreateTurn {
            _local: local,
            _file: file,
        })
    }
}

/// Runs `op` again (up to 4 tries in all, 50, 100 and 200 ms apart) while it fails with one of
/// the errors rootless Podman gives when reading subordinate ids races (see the module's
/// notes); any other outcome is returned as it is.
async fn transient<T, F, Fut>(mut op: F) -> std::result::Result<T, podman_api::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, podman_api::Error>>,
{
    let mut pause = Duration::from_millis(50);
    for _ in 0..3 {
        match op().await {
            Err(e) if is_subid_race(&message_of(&e)) => {
                tracing::debug!(error = %message_of(&e), "podman: subordinate ids race, trying again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
    op().await
}

fn is_subid_race(message: &str) -> bool {
    message.contains("cannot read subids")
        || message.contains("keep-id requires additional UIDs or GIDs")
        || message.contains("can't get final child's PID from pipe")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::ContainerState;
    use futures_util::FutureExt;
    use std::os::unix::fs::MetadataExt;
    use std::panic::AssertUnwindSafe;
    use std::path::Path;

    const MIB64: u64 = 64 * 1024 * 1024;

    #[tokio::test(start_paused = true)]
    async fn only_the_subid_race_is_tried_again() {
        let fault = |m: &str| podman_api::Error::Fault {
            code: StatusCode::INTERNAL_SERVER_ERROR,
            message: m.into(),
        };
        let tries = std::cell::Cell::new(0);
        let got = transient(|| {
            tries.set(tries.get() + 1);
            let n = tries.get();
            async move {
                if n < 3 {
                    Err(fault("keep-id requires additional UIDs or GIDs defined in /etc/subuid and /etc/subgid"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got.unwrap(), 3);
        // Any other error: at once, once.
        tries.set(0);
        let got: std::result::Result<(), _> = transient(|| {
            tries.set(tries.get() + 1);
            async { Err(fault("image not known")) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(tries.get(), 1);
        // The race for good: four tries, then its error.
        tries.set(0);
        let got: std::result::Result<(), _> = transient(|| {
            tries.set(tries.get() + 1);
            async { Err(fault("cannot read subids")) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(tries.get(), 4);
    }

    fn request(
        name: &str,
        image: &str,
        user: &str,
        ro: &Path,
        rw: &Path,
        run: &str,
    ) -> CreateRequest {
        let mut mounts = vec![Mount::same(ro, true), Mount::same(rw, false)];
        mounts.sort();
        CreateRequest {
            name: name.into(),
            image: image.into(),
            entrypoint: vec!["/bin/sh".into(), "-c".into()],
            cmd: vec![format!("echo hello-from-{run}; exec sleep 300")],
            env: BTreeMap::from([("ATEAM_TEST".into(), "1".into())]),
            user: user.into(),
            workdir: "/tmp".into(),
            mounts,
            tmpfs: BTreeMap::from([("/tmp".into(), "rw,nosuid,nodev,size=16m".into())]),
            memory_bytes: MIB64,
            memory_swap_bytes: MIB64,
            pids: 64,
            nano_cpus: Some(500_000_000),
            network_none: true,
            network_name: None,
            labels: BTreeMap::from([("ateam.test.run".into(), run.into())]),
            cap_drop_all: true,
            no_new_privileges: true,
            read_only_rootfs: true,
            init: true,
            userns_keep_id: false,
            cgroupns_private: true,
            terminal: false,
        }
    }

    #[test]
    fn create_body_spells_every_hardening_key() {
        let mut req = request(
            "n",
            "img",
            "1000:1000",
            Path::new("/a"),
            Path::new("/b"),
            "r",
        );
        req.userns_keep_id = true;
        let b = create_body(&req);
        assert_eq!(b["no_new_privileges"], json!(true));
        assert!(b.get("no_new_privilages").is_none());
        assert_eq!(b["cap_drop"], json!(["ALL"]));
        assert_eq!(b["read_only_filesystem"], json!(true));
        assert_eq!(b["init"], json!(true));
        assert_eq!(b["netns"], json!({"nsmode": "none"}));
        assert_eq!(b["userns"], json!({"nsmode": "keep-id"}));
        assert_eq!(b["cgroupns"], json!({"nsmode": "private"}));
        assert_eq!(b["restart_policy"], json!("no"));
        assert_eq!(
            b["resource_limits"],
            json!({
                "memory": {"limit": MIB64, "swap": MIB64},
                "pids": {"limit": 64},
                "cpu": {"quota": 50_000, "period": 100_000},
            })
        );
        assert_eq!(
            b["mounts"],
            json!([
                {"destination": "/a", "source": "/a", "type": "bind", "options": ["rbind", "ro", "rprivate"]},
                {"destination": "/b", "source": "/b", "type": "bind", "options": ["rbind", "rw", "rprivate"]},
                {"destination": "/tmp", "source": "tmpfs", "type": "tmpfs", "options": ["rw", "nosuid", "nodev", "size=16m"]},
            ])
        );
        assert_eq!(b["entrypoint"], json!(["/bin/sh", "-c"]));
        assert_eq!(b["work_dir"], json!("/tmp"));
    }

    /// While a stop waits for the process, Podman says `stopping` and `Running: false`; the
    /// process, and the pid a look reads its start from, are still there.
    #[test]
    fn a_stopping_container_still_runs_its_pid() {
        let d: ContainerInspectResponseLibpod = serde_json::from_value(json!({
            "Id": "c1", "Name": "ateam_t_m",
            "State": {"Status": "stopping", "Running": false, "Pid": 42, "ExitCode": 0}
        }))
        .expect("parses");
        let i = inspected_from(&d);
        assert_eq!(i.summary.state, ContainerState::Running);
        assert_eq!(i.pid, Some(42));
    }

    #[test]
    fn effective_reads_libpod_inspect() {
        // Trimmed from a real Podman 4.3.1 inspect, plus a port and a volume.
        let d: ContainerInspectResponseLibpod = serde_json::from_value(json!({
            "Id": "abc", "Name": "n", "BoundingCaps": null,
            "State": {"Status": "running", "Running": true, "Pid": 42, "ExitCode": 0,
                      "StartedAt": "2024-01-01T00:00:00Z"},
            "Config": {"User": "1000:1000", "Image": "localhost/ateam-demo:latest",
                       "Labels": {"k": "v"}},
            "Mounts": [
                {"Type": "bind", "Source": "/s", "Destination": "/d", "RW": false},
                {"Type": "volume", "Name": "vol", "Source": "/var/lib/v", "Destination": "/v", "RW": true}
            ],
            "HostConfig": {
                "CapAdd": [], "CapDrop": ["CAP_CHOWN"], "SecurityOpt": ["no-new-privileges"],
                "ReadonlyRootfs": true, "Init": true, "NetworkMode": "none",
                "Tmpfs": {"/tmp": "rw,rprivate,tmpcopyup"}, "Memory": 67108864,
                "MemorySwap": 67108864, "PidsLimit": 64, "NanoCpus": 0, "CpuQuota": 50000,
                "CpuPeriod": 100000, "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
                "PidMode": "host", "IpcMode": "shareable", "UTSMode": "private",
                "UsernsMode": "", "CgroupMode": "private",
                "PortBindings": {"8080/tcp": null, "9090/tcp": [{"HostIp": "", "HostPort": "19090"}]}
            }
        }))
        .expect("parses");
        let i = inspected_from(&d);
        assert_eq!(i.pid, Some(42));
        assert_eq!(i.summary.state, ContainerState::Running);
        assert_eq!(i.started_at.as_deref(), Some("2024-01-01T00:00:00+00:00"));
        let e = i.effective;
        assert!(e.cap_drop_all && e.no_new_privileges && e.read_only_rootfs && e.init);
        assert_eq!(
            e.bind_mounts,
            vec![Mount {
                source: "/s".into(),
                target: "/d".into(),
                read_only: true
            }]
        );
        assert_eq!(e.other_mounts, vec!["volume:/var/lib/v:/v".to_string()]);
        assert_eq!(
            e.tmpfs,
            BTreeMap::from([("/tmp".to_string(), "rw,rprivate,tmpcopyup".to_string())])
        );
        assert_eq!(e.nano_cpus, 500_000_000);
        assert_eq!(e.namespaces["pid"], "host");
        assert_eq!(e.namespaces["cgroupns"], "private");
        assert_eq!(
            e.published_ports,
            vec![
                ":19090->9090/tcp".to_string(),
                "exposed:8080/tcp".to_string()
            ]
        );
    }

    /// One engine under test.
    struct Target {
        uri: String,
        user: &'static str,
        uid: u32,
        rootless: bool,
    }

    fn target(var: &str, rootless: bool) -> Target {
        let uri = std::env::var(var).unwrap_or_else(|_| {
            panic!(
                "{var} is not set: run scripts/engines.sh as root, then `source /run/ateam-ci/env`"
            )
        });
        let (user, uid) = if rootless {
            ("1001:1001", 1001)
        } else {
            ("1000:1000", 1000)
        };
        Target {
            uri,
            user,
            uid,
            rootless,
        }
    }

    fn image() -> String {
        std::env::var("ATEAM_TEST_IMAGE").unwrap_or_else(|_| "ateam-demo:latest".into())
    }

    fn unique() -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        format!("ateam-ptest-{}-{nanos}", std::process::id())
    }

    /// Runs `scenario` and removes everything it created, even when it fails.
    async fn run(t: Target, scenario: impl AsyncFnOnce(&PodmanBackend, &Target, &str)) {
        let b = PodmanBackend::connect(&t.uri).await.expect("connect");
        let run = unique();
        let result = AssertUnwindSafe(scenario(&b, &t, &run))
            .catch_unwind()
            .await;
        let labels = BTreeMap::from([("ateam.test.run".to_string(), run.clone())]);
        for s in b.list(&labels).await.unwrap_or_default() {
            let _ = b.remove(&s.id).await;
        }
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    }

    fn proc_status(pid: u32, key: &str) -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{key} missing in /proc/{pid}/status"))
            .trim()
            .to_string()
    }

    async fn scenario(b: &PodmanBackend, t: &Target, run: &str) {
        let image = image();

        let info = b.ping().await.expect("ping");
        assert_eq!(
            info.kind,
            EngineKind::Podman {
                rootless: t.rootless
            }
        );
        assert_eq!(b.kind(), info.kind);
        assert!(
            !info.version.is_empty() && !info.api_version.is_empty(),
            "{info:?}"
        );
        assert!(matches!(info.cgroup_version, 1 | 2));
        assert_eq!(
            info.limits_enforced,
            !(t.rootless && info.cgroup_version == 1)
        );
        if t.rootless && info.cgroup_version == 1 {
            assert!(!info.limits_enforced);
        }

        let cmd = b.image_command(&image).await.expect("image_command");
        assert!(!cmd.is_empty(), "the demo image has a command");
        let missing = "localhost/ateam-no-such-image:never";
        assert!(matches!(
            b.image_command(missing).await,
            Err(BackendError::ImageMissing { .. })
        ));

        let labels = BTreeMap::from([("ateam.test.run".to_string(), run.to_string())]);
        let mut events = b.events(&labels).await.expect("events");

        let ro = tempfile::tempdir().expect("tempdir");
        let rw = tempfile::tempdir().expect("tempdir");
        for d in [ro.path(), rw.path()] {
            std::os::unix::fs::chown(d, Some(t.uid), Some(t.uid)).expect("chown");
        }
        let name = format!("{run}-a");
        let mut req = request(&name, &image, t.user, ro.path(), rw.path(), run);
        req.userns_keep_id = t.rootless;
        let id = b.create(&req).await.expect("create");

        // Created, not started.
        let i = b.inspect(&id).await.expect("inspect");
        assert_eq!(i.summary.id, id);
        assert_eq!(i.summary.name, name);
        assert_eq!(i.summary.state, ContainerState::Created);
        assert_eq!(
            i.summary.labels.get("ateam.test.run").map(String::as_str),
            Some(run)
        );
        assert!(i.summary.created > 0);
        assert_eq!(i.pid, None);
        assert_eq!(i.started_at, None);
        assert!(i.image.contains("ateam-demo"), "{}", i.image);
        // Rootless on cgroup v1 accepts the limits but ignores them: inspect shows 0.
        let limited = info.limits_enforced;
        let mut got = i.effective.clone();
        got.bind_mounts.sort();
        let want = Effective {
            image: got.image.clone(),
            entrypoint: vec!["/bin/sh".into(), "-c".into()],
            cmd: req.cmd.clone(),
            security_opt: vec!["no-new-privileges".into()],
            apparmor_profile: String::new(),
            masked_paths: None,
            readonly_paths: None,
            sysctls: vec![],
            cgroup_parent: got.cgroup_parent.clone(),
            oom_kill_disable: false,
            device_cgroup_rules: vec![],
            user: t.user.into(),
            privileged: false,
            cap_add: vec![],
            cap_drop_all: true,
            no_new_privileges: true,
            read_only_rootfs: true,
            init: true,
            network_mode: "none".into(),
            networks: vec![],
            bind_mounts: req.mounts.clone(),
            tmpfs: BTreeMap::from([(
                "/tmp".to_string(),
                "rw,nosuid,nodev,size=16m,rprivate,tmpcopyup".to_string(),
            )]),
            other_mounts: vec![],
            memory_bytes: if limited { MIB64 } else { 0 },
            memory_swap_bytes: if limited { MIB64 as i64 } else { 0 },
            pids_limit: if limited { 64 } else { 0 },
            nano_cpus: if limited { 500_000_000 } else { 0 },
            restart_policy: "no".into(),
            devices: vec![],
            group_add: vec![],
            namespaces: got.namespaces.clone(),
            published_ports: vec![],
        };
        assert!(got.image.ends_with("ateam-demo:latest"), "{}", got.image);
        assert_eq!(got, want);
        let shared: Vec<_> = got
            .namespaces
            .iter()
            .filter(|(_, m)| !matches!(m.as_str(), "" | "private" | "shareable"))
            .collect();
        assert!(shared.is_empty(), "{:?}", got.namespaces);

        b.start(&id).await.expect("start");
        b.start(&id)
            .await
            .expect("starting a running container is fine");
        let i = b.inspect(&id).await.expect("inspect running");
        assert_eq!(i.summary.state, ContainerState::Running);
        assert!(i.started_at.is_some());
        let pid = i.pid.expect("a running container has a pid");
        assert_eq!(proc_status(pid, "CapBnd"), "0000000000000000");
        assert_eq!(proc_status(pid, "CapEff"), "0000000000000000");
        assert_eq!(proc_status(pid, "NoNewPrivs"), "1");

        let sh = |s: &str| vec!["/bin/sh".to_string(), "-c".to_string(), s.to_string()];
        let out = b
            .exec(&id, &["id".into(), "-u".into()])
            .await
            .expect("exec id");
        assert_eq!(
            (out.code, out.stdout.trim()),
            (0, t.uid.to_string().as_str()),
            "{out:?}"
        );

        let out = b
            .exec(&id, &sh("echo out; echo err >&2; exit 3"))
            .await
            .expect("exec streams");
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (3, "out\n", "err\n")
        );

        let ro_file = ro.path().join("x");
        let out = b
            .exec(&id, &["touch".into(), ro_file.display().to_string()])
            .await
            .expect("exec touch");
        assert_ne!(out.code, 0, "{out:?}");
        assert!(out.stderr.contains("Read-only file system"), "{out:?}");
        assert!(!ro_file.exists());

        let rw_file = rw.path().join("f");
        let out = b
            .exec(&id, &sh(&format!("echo hi > {}", rw_file.display())))
            .await
            .expect("exec write");
        assert_eq!(out.code, 0, "{out:?}");
        let meta = std::fs::metadata(&rw_file).expect("written on the host");
        assert_eq!((meta.uid(), meta.gid()), (t.uid, t.uid));

        let out = b
            .exec(&id, &sh("echo x > /etc/x"))
            .await
            .expect("exec rootfs");
        assert_ne!(out.code, 0, "read-only rootfs: {out:?}");

        let logs = super::super::logs_text(b, &id, 10).await.expect("logs");
        assert!(logs.contains(&format!("hello-from-{run}")), "{logs:?}");

        let listed = b.list(&labels).await.expect("list");
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].id, id);
        assert_eq!(listed[0].name, name);
        assert_eq!(listed[0].state, ContainerState::Running);
        let found = b.find_by_name(&name).await.expect("find").expect("found");
        assert_eq!(found.id, id);
        // Podman's name filter matches substrings: a prefix must not be taken for the name.
        assert!(b.find_by_name(run).await.expect("find").is_none());
        assert!(
            b.find_by_name(&format!("{name}x"))
                .await
                .expect("find")
                .is_none()
        );

        assert!(matches!(
            b.create(&req).await,
            Err(BackendError::NameConflict { name: n }) if n == name
        ));
        let mut other = req.clone();
        other.name = format!("{run}-b");
        other.image = missing.into();
        assert!(matches!(
            b.create(&other).await,
            Err(BackendError::ImageMissing { .. })
        ));

        b.stop(&id, 5).await.expect("stop");
        b.stop(&id, 5)
            .await
            .expect("stopping a stopped container is fine");
        let i = b.inspect(&id).await.expect("inspect stopped");
        assert!(
            matches!(i.summary.state, ContainerState::Exited { .. }),
            "{:?}",
            i.summary.state
        );
        assert_eq!(i.pid, None);

        // A process that ignores SIGTERM: stop must kill it after `timeout_secs`, not 10 s.
        let mut stubborn = req.clone();
        stubborn.name = format!("{run}-d");
        stubborn.cmd = vec!["trap '' TERM; sleep 300".into()];
        let sid = b.create(&stubborn).await.expect("create stubborn");
        b.start(&sid).await.expect("start stubborn");
        let t0 = std::time::Instant::now();
        b.stop(&sid, 1).await.expect("stop stubborn");
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(6), "stop waited {took:?}");
        assert!(matches!(
            b.inspect(&sid).await.expect("inspect").summary.state,
            ContainerState::Exited { .. }
        ));
        assert!(matches!(
            b.rename(&id, &stubborn.name).await,
            Err(BackendError::NameConflict { name: n }) if n == stubborn.name
        ));
        b.remove(&sid).await.expect("remove stubborn");

        let renamed = format!("{run}-c");
        b.rename(&id, &renamed).await.expect("rename");
        assert_eq!(b.inspect(&id).await.expect("inspect").summary.name, renamed);

        b.remove(&id).await.expect("remove");
        b.remove(&id).await.expect("removing what is gone is fine");
        assert!(matches!(
            b.inspect(&id).await,
            Err(BackendError::NotFound { .. })
        ));
        assert!(matches!(
            b.start(&id).await,
            Err(BackendError::NotFound { .. })
        ));
        assert!(b.list(&labels).await.expect("list").is_empty());

        let seen = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(ev) = events.next().await {
                if ev.expect("event").id == id {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(seen, Ok(true), "an event for the container");
    }

    #[tokio::test]
    #[ignore = "needs Podman: scripts/engines.sh"]
    async fn rootful_podman() {
        run(target("ATEAM_TEST_PODMAN_ROOTFUL", false), scenario).await;
    }

    #[tokio::test]
    #[ignore = "needs Podman: scripts/engines.sh"]
    async fn rootless_podman() {
        run(target("ATEAM_TEST_PODMAN_ROOTLESS", true), scenario).await;
    }

    /// An exec into a member and a `ps --sync` (which `podman rm -f` of anything also does)
    /// change nothing: their events must not reach the controller, or a crowd of 200 is looked
    /// at 200 times for nothing. The next event that does is the first one seen.
    async fn quiet_scenario(b: &PodmanBackend, t: &Target, run: &str) {
        let (ro, rw) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        for d in [ro.path(), rw.path()] {
            std::os::unix::fs::chown(d, Some(t.uid), Some(t.uid)).expect("chown");
        }
        let mut req = request(
            &format!("{run}-a"),
            &image(),
            t.user,
            ro.path(),
            rw.path(),
            run,
        );
        req.userns_keep_id = t.rootless;
        let a = b.create(&req).await.expect("create a");
        b.start(&a).await.expect("start a");
        // Past the second of a's own events: the stream replays from the second it starts in.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let labels = BTreeMap::from([("ateam.test.run".to_string(), run.to_string())]);
        let mut events = b.events(&labels).await.expect("events");
        let out = b.exec(&a, &["true".into()]).await.expect("exec");
        assert_eq!(out.code, 0, "{out:?}");
        let synced = ContainerListOpts::builder().all(true).sync(true).build();
        b.podman
            .containers()
            .list(&synced)
            .await
            .expect("ps --sync");
        req.name = format!("{run}-b");
        let marker = b.create(&req).await.expect("create b");
        let first = tokio::time::timeout(Duration::from_secs(20), events.next()).await;
        match first {
            Ok(Some(Ok(ev))) => assert_eq!(ev.id, marker, "a quiet event got through: {ev:?}"),
            other => panic!("no event for the marker: {other:?}"),
        }
    }

    #[tokio::test]
    #[ignore = "needs Podman: scripts/engines.sh"]
    async fn rootful_podman_quiet_events() {
        run(target("ATEAM_TEST_PODMAN_ROOTFUL", false), quiet_scenario).await;
    }

    #[tokio::test]
    #[ignore = "needs Podman: scripts/engines.sh"]
    async fn rootless_podman_quiet_events() {
        run(target("ATEAM_TEST_PODMAN_ROOTLESS", true), quiet_scenario).await;
    }
}
