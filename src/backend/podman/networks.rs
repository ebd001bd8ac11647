//! Podman: a team's network, made when missing and removed.

use std::collections::BTreeMap;

use super::PodmanBackend;
use super::errors::{engine_err, message_of};
use crate::backend::Result;

pub(super) async fn ensure_network(
    b: &PodmanBackend,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<()> {
    let networks = b.podman.networks();
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

pub(super) async fn remove_network(b: &PodmanBackend, name: &str) -> Result<()> {
    let n = b.podman.networks().get(name);
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
