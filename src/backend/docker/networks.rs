//! Docker: a team's network, made when missing and removed.

use std::collections::BTreeMap;

use super::DockerBackend;
use super::errors::status_of;
use crate::backend::Result;

pub(super) async fn ensure_network(
    b: &DockerBackend,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<()> {
    match b.docker.inspect_network(name, None).await {
        Ok(_) => return Ok(()),
        Err(e) if status_of(&e) == Some(404) => {}
        Err(e) => return Err(b.engine_err("inspect network", e)),
    }
    let req = bollard::models::NetworkCreateRequest {
        name: name.into(),
        driver: Some("bridge".into()),
        labels: Some(labels.clone().into_iter().collect()),
        ..Default::default()
    };
    match b.docker.create_network(req).await {
        Ok(_) => Ok(()),
        // Made by a concurrent apply meanwhile.
        Err(e) if status_of(&e) == Some(409) => Ok(()),
        Err(e) => Err(b.engine_err("create network", e)),
    }
}

pub(super) async fn remove_network(b: &DockerBackend, name: &str) -> Result<()> {
    match b.docker.remove_network(name).await {
        Ok(()) => Ok(()),
        Err(e) if status_of(&e) == Some(404) => Ok(()),
        Err(e) => Err(b.engine_err("remove network", e)),
    }
}
