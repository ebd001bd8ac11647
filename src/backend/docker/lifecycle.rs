//! Docker: a container's start, stop, removal, rename and unpause.

use std::time::Duration;

use bollard::query_parameters::{
    RemoveContainerOptions, RenameContainerOptions, StartContainerOptions, StopContainerOptions,
};

use super::errors::status_of;
use super::{DockerBackend, REQUEST_TIMEOUT};
use crate::backend::{BackendError, Result};

pub(super) async fn start(b: &DockerBackend, id: &str) -> Result<()> {
    // 304 (already running) counts as success in bollard.
    b.docker
        .start_container(id, None::<StartContainerOptions>)
        .await
        .map_err(|e| b.container_err("start container", id, e))
}

pub(super) async fn stop(b: &DockerBackend, id: &str, timeout_secs: u32) -> Result<()> {
    let opts = StopContainerOptions {
        t: Some(i32::try_from(timeout_secs).unwrap_or(i32::MAX)),
        signal: None,
    };
    // The engine answers only after the grace period and the kill: wait longer than that.
    let docker = b
        .docker
        .clone()
        .with_timeout(REQUEST_TIMEOUT + Duration::from_secs(u64::from(timeout_secs)));
    docker
        .stop_container(id, Some(opts))
        .await
        .map_err(|e| b.container_err("stop container", id, e))
}

pub(super) async fn remove(b: &DockerBackend, id: &str) -> Result<()> {
    let opts = RemoveContainerOptions {
        force: true,
        // Anonymous volumes would otherwise outlive the container, unowned.
        v: true,
        link: false,
    };
    match b.docker.remove_container(id, Some(opts)).await {
        Ok(()) => Ok(()),
        Err(e) if status_of(&e) == Some(404) => Ok(()),
        Err(e) => Err(b.engine_err("remove container", e)),
    }
}

pub(super) async fn rename(b: &DockerBackend, id: &str, name: &str) -> Result<()> {
    let opts = RenameContainerOptions { name: name.into() };
    b.docker
        .rename_container(id, opts)
        .await
        .map_err(|e| match status_of(&e) {
            Some(409) => BackendError::NameConflict { name: name.into() },
            _ => b.container_err("rename container", id, e),
        })
}

pub(super) async fn unpause(b: &DockerBackend, id: &str) -> Result<()> {
    b.docker
        .unpause_container(id)
        .await
        .map_err(|e| b.container_err("unpause container", id, e))
}
