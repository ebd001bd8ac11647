//! Podman: creating a member's container and an image's probe, one create at a time on a
//! rootless service.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use containers_api::conn::Payload;
use serde_json::{Value, json};

use super::errors::{engine_err, message_of};
use super::{ENGINE, LIBPOD, PodmanBackend};
use crate::backend::{BackendError, CreateRequest, PROBE_COMMAND, Result};

/// CPU period used to express `nano_cpus` as a CFS quota (the kernel's default period).
const CPU_PERIOD: u64 = 100_000;

pub(super) async fn create(b: &PodmanBackend, req: &CreateRequest) -> Result<String> {
    let body = create_body(req).to_string();
    let _turn = b.one_create_at_a_time().await;
    let text = transient(|| {
        b.raw.post_string(
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

/// The libpod SpecGenerator for `req`.
///
/// Sent raw instead of through `ContainerCreateOptsBuilder` because podman-api 0.11's
/// `no_new_privilages` serializes the misspelt key `"no_new_privilages"`, which Podman
/// silently ignores: the builder cannot set no-new-privileges.
///
/// Besides the request, the cgroup namespace is made private: on cgroup v1 Podman's default
/// is the host's, which inspect reports as `CgroupMode: "host"` (a host namespace).
pub(super) fn create_body(req: &CreateRequest) -> Value {
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
    if let Some(n) = req.nproc {
        // Podman says the type without its `RLIMIT_` (it prefixes one).
        body["r_limits"] = json!([{ "type": "nproc", "soft": n, "hard": n }]);
    }
    if req.userns_keep_id {
        body["userns"] = json!({ "nsmode": "keep-id" });
    }
    body
}

pub(super) async fn create_probe(
    b: &PodmanBackend,
    image: &str,
    labels: &BTreeMap<String, String>,
) -> Result<String> {
    let body = json!({
        "image": image,
        "entrypoint": [PROBE_COMMAND],
        "labels": labels,
        "netns": { "nsmode": "none" },
    })
    .to_string();
    let text = b
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
pub(super) async fn transient<T, F, Fut>(mut op: F) -> std::result::Result<T, podman_api::Error>
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

pub(super) fn is_subid_race(message: &str) -> bool {
    message.contains("cannot read subids")
        || message.contains("keep-id requires additional UIDs or GIDs")
        || message.contains("can't get final child's PID from pipe")
}
