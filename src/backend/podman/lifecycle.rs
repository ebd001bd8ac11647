//! Podman: a container's start, stop, removal, rename and unpause.

use containers_api::conn::Payload;
use podman_api::opts::ContainerDeleteOpts;

use super::{LIBPOD, PodmanBackend};
use super::{
    create::transient,
    errors::{container_err, engine_err, is_not_found, is_not_modified, message_of},
};
use crate::backend::{BackendError, Result};

pub(super) async fn start(b: &PodmanBackend, id: &str) -> Result<()> {
    match transient(|| async { b.podman.containers().get(id).start(None).await }).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_modified(&e) => Ok(()),
        Err(e) => Err(container_err("start", id, &e)),
    }
}

pub(super) async fn stop(b: &PodmanBackend, id: &str, timeout_secs: u32) -> Result<()> {
    // Raw, like create: podman-api 0.11's `ContainerStopOpts::timeout` sends `Timeout=`,
    // which Podman 4.3 ignores (it reads `timeout`), so every stop would wait the
    // container's default 10 s instead of `timeout_secs`.
    let ep = containers_api::url::construct_ep(
        format!("{LIBPOD}/containers/{id}/stop"),
        Some(containers_api::url::encoded_pair("timeout", timeout_secs)),
    );
    match b.raw.post(ep, Payload::empty(), None).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_modified(&e) => Ok(()),
        Err(e) => Err(container_err("stop", id, &e)),
    }
}

pub(super) async fn remove(b: &PodmanBackend, id: &str) -> Result<()> {
    // force: stop first if running; timeout 0: the caller stops gracefully when it wants to.
    let opts = ContainerDeleteOpts::builder()
        .force(true)
        .timeout(0)
        .build();
    match b.podman.containers().get(id).delete(&opts).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(engine_err("remove", &e)),
    }
}

pub(super) async fn rename(b: &PodmanBackend, id: &str, name: &str) -> Result<()> {
    b.podman
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

pub(super) async fn unpause(b: &PodmanBackend, id: &str) -> Result<()> {
    b.podman
        .containers()
        .get(id)
        .unpause()
        .await
        .map_err(|e| container_err("unpause", id, &e))
}
