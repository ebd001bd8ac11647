//! Podman: an inspect, reduced to what the policy judges and the controller tracks.

use podman_api::models::{
    ContainerInspectResponseLibpod, InspectContainerHostConfig, InspectContainerState,
};

use super::PodmanBackend;
use super::{errors::container_err, list::to_btree};
use crate::backend::{Inspected, PidFiles, Result, Summary, state_from};
use crate::core::container::{ContainerState, Effective, LastExit, Mount, rfc3339_epoch};

pub(super) async fn inspect(b: &PodmanBackend, id: &str) -> Result<Inspected> {
    let d = b
        .podman
        .containers()
        .get(id)
        .inspect()
        .await
        .map_err(|e| container_err("inspect", id, &e))?;
    Ok(inspected_of(&d))
}

/// An inspect reduced to what the policy judges, plus what the controller tracks.
pub(super) fn inspected_of(d: &ContainerInspectResponseLibpod) -> Inspected {
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
    let last_exit = last_exit_of(state, &container_state);
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
        effective: effective_of(d),
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

/// How an exited container last ended (none while it runs or before it ran).
pub(super) fn last_exit_of(
    state: Option<&InspectContainerState>,
    container_state: &ContainerState,
) -> Option<LastExit> {
    match *container_state {
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
    }
}

/// Reduces a libpod inspect to what the policy judges.
pub(super) fn effective_of(d: &ContainerInspectResponseLibpod) -> Effective {
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
        // Libpod's own field: its compat `HostConfig.Runtime` says `oci` for any runtime.
        runtime: d.oci_runtime.clone().unwrap_or_default(),
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
pub(super) fn add_mounts(e: &mut Effective, d: &ContainerInspectResponseLibpod) {
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
pub(super) fn add_host_config(
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
    e.published_ports = published_ports_of(hc);
}

/// Published ports as `ip:port->port`, `exposed:port`, and `publish-all` for `-P`.
pub(super) fn published_ports_of(hc: &InspectContainerHostConfig) -> Vec<String> {
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

/// Where conmon and the OCI runtime write the pids of each start, when inspect names both.
pub(super) fn pid_files(d: &ContainerInspectResponseLibpod) -> Option<PidFiles> {
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
