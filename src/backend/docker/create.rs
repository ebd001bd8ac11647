//! Docker: creating a member's container and an image's probe.

use std::collections::BTreeMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, Mount as BollardMount,
    MountBindOptions, MountBindOptionsPropagationEnum, MountType, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::CreateContainerOptions;

use super::errors::{message_of, status_of};
use super::{DockerBackend, ENGINE};
use crate::backend::{BackendError, CreateRequest, PROBE_COMMAND, Result};

pub(super) async fn create(b: &DockerBackend, req: &CreateRequest) -> Result<String> {
    let opts = CreateContainerOptions {
        name: Some(req.name.clone()),
        ..Default::default()
    };
    let body = create_body(req);
    let created =
        b.docker
            .create_container(Some(opts), body)
            .await
            .map_err(|e| match status_of(&e) {
                // A 404 also comes for a missing network: only an image message means the image.
                Some(404) if message_of(&e).to_ascii_lowercase().contains("image") => {
                    BackendError::ImageMissing {
                        engine: ENGINE.into(),
                        image: req.image.clone(),
                    }
                }
                Some(409) => BackendError::NameConflict {
                    name: req.name.clone(),
                },
                _ => b.engine_err("create container", e),
            })?;
    Ok(created.id)
}

/// The create call, field by field from the request; nothing the request does not say.
pub(super) fn create_body(req: &CreateRequest) -> ContainerCreateBody {
    let mounts = req
        .mounts
        .iter()
        .map(|m| BollardMount {
            target: Some(m.target.display().to_string()),
            source: Some(m.source.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let host_config = HostConfig {
        // `Mounts`, not `Binds`: Binds creates a missing host folder (as root) instead of failing.
        mounts: Some(mounts),
        tmpfs: Some(req.tmpfs.clone().into_iter().collect()),
        memory: Some(to_i64(req.memory_bytes)),
        memory_swap: Some(to_i64(req.memory_swap_bytes)),
        pids_limit: Some(i64::from(req.pids)),
        nano_cpus: req.nano_cpus.map(to_i64),
        ulimits: req.nproc.map(|n| {
            vec![bollard::models::ResourcesUlimits {
                name: Some("nproc".into()),
                soft: Some(i64::from(n)),
                hard: Some(i64::from(n)),
            }]
        }),
        // gVisor by the name `runsc install` gives it in the daemon's configuration.
        runtime: req
            .gvisor
            .then(|| crate::core::container::GVISOR_RUNTIME.to_string()),
        network_mode: Some(if req.network_none {
            "none".to_string()
        } else {
            req.network_name.clone().unwrap_or_else(|| "bridge".into())
        }),
        cap_drop: req.cap_drop_all.then(|| vec!["ALL".to_string()]),
        security_opt: req
            .no_new_privileges
            .then(|| vec!["no-new-privileges".to_string()]),
        readonly_rootfs: Some(req.read_only_rootfs),
        init: Some(req.init),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        privileged: Some(false),
        cgroupns_mode: req
            .cgroupns_private
            .then_some(HostConfigCgroupnsModeEnum::PRIVATE),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(req.image.clone()),
        // No network at all: Docker then makes the container a namespace of its own with
        // loopback alone, without joining it to its `none` network, whose hook (dockerd run
        // again, at every start) took about 150 ms of each start. The kernel's view is
        // checked before the release (`procfs::loopback_only`).
        network_disabled: req.network_none.then_some(true),
        // Empty means "the image's own": an empty list would erase it instead.
        entrypoint: (!req.entrypoint.is_empty()).then(|| req.entrypoint.clone()),
        cmd: (!req.cmd.is_empty()).then(|| req.cmd.clone()),
        env: Some(req.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: Some(req.user.clone()),
        working_dir: Some(req.workdir.display().to_string()),
        labels: Some(req.labels.clone().into_iter().collect()),
        // An interactive agent's terminal, kept by the engine: `ateam attach` joins it.
        tty: Some(req.terminal),
        open_stdin: Some(req.terminal),
        stdin_once: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    }
}

pub(super) async fn create_probe(
    b: &DockerBackend,
    image: &str,
    labels: &BTreeMap<String, String>,
) -> Result<String> {
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec![PROBE_COMMAND.to_string()]),
        labels: Some(labels.clone().into_iter().collect()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = b
        .docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .map_err(|e| match status_of(&e) {
            Some(404) if message_of(&e).to_ascii_lowercase().contains("image") => {
                BackendError::ImageMissing {
                    engine: ENGINE.into(),
                    image: image.into(),
                }
            }
            _ => b.engine_err("create probe container", e),
        })?;
    Ok(created.id)
}

pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
