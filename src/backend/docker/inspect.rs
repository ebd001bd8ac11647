//! Docker: an inspect, reduced to what the policy judges and the controller tracks.

use std::collections::BTreeMap;

use bollard::models::{
    ContainerConfig, ContainerInspectResponse, ContainerState as EngineState, HostConfig,
    MountPoint,
};

use super::DockerBackend;
use crate::backend::{Inspected, Result, Summary, state_from};
use crate::core::container::{ContainerState, Effective, LastExit, Mount, rfc3339_epoch};

/// What Docker reports as `StartedAt` for a container that never started.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

pub(super) async fn inspect(b: &DockerBackend, id: &str) -> Result<Inspected> {
    let c = b
        .docker
        .inspect_container(id, None)
        .await
        .map_err(|e| b.container_err("inspect container", id, e))?;
    Ok(inspected_of(c))
}

/// An inspect reduced to what the policy judges, plus what the controller tracks.
pub(super) fn inspected_of(mut c: ContainerInspectResponse) -> Inspected {
    let config = c.config.take().unwrap_or_default();
    let hc = c.host_config.take().unwrap_or_default();
    let state = c.state.take().unwrap_or_default();
    let mounts = mounts_of(c.mounts.take().unwrap_or_default(), &hc);
    let effective = effective_of(&c, &config, &hc, mounts);
    let status_word = state
        .status
        .map(|s| s.as_ref().to_string())
        .unwrap_or_default();
    let running = state.running == Some(true);
    let container_state = state_from(&status_word, state.exit_code.unwrap_or(0));
    let last_exit = last_exit_of(&state, &container_state);
    Inspected {
        summary: Summary {
            id: c.id.unwrap_or_default(),
            name: c
                .name
                .as_deref()
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_string(),
            labels: config
                .labels
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            state: container_state,
            created: c.created.as_deref().and_then(epoch_seconds).unwrap_or(0),
        },
        effective,
        pid: state
            .pid
            .filter(|p| running && *p > 0)
            .and_then(|p| u32::try_from(p).ok()),
        image: config.image.unwrap_or_default(),
        image_id: c.image.take().unwrap_or_default(),
        restart_count: u64::try_from(c.restart_count.unwrap_or(0)).unwrap_or(0),
        started_at: state.started_at.filter(|s| !s.is_empty() && s != ZERO_TIME),
        last_exit,
        // Docker answers an inspect right after a start at once: nothing to gain.
        pid_files: None,
    }
}

/// What the policy judges of a container, from its inspect.
pub(super) fn effective_of(
    c: &ContainerInspectResponse,
    config: &ContainerConfig,
    hc: &HostConfig,
    mounts: MountsOf,
) -> Effective {
    let (bind_mounts, tmpfs, other_mounts) = mounts;
    let security_opt = hc.security_opt.clone().unwrap_or_default();
    Effective {
        image: config.image.clone().unwrap_or_default(),
        entrypoint: config.entrypoint.clone().unwrap_or_default(),
        cmd: config.cmd.clone().unwrap_or_default(),
        apparmor_profile: c.app_armor_profile.clone().unwrap_or_default(),
        masked_paths: hc.masked_paths.clone(),
        readonly_paths: hc.readonly_paths.clone(),
        sysctls: hc
            .sysctls
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        cgroup_parent: hc.cgroup_parent.clone().unwrap_or_default(),
        oom_kill_disable: hc.oom_kill_disable == Some(true),
        device_cgroup_rules: hc.device_cgroup_rules.clone().unwrap_or_default(),
        user: config.user.clone().unwrap_or_default(),
        privileged: hc.privileged.unwrap_or(false),
        cap_add: hc.cap_add.clone().unwrap_or_default(),
        cap_drop_all: hc
            .cap_drop
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|c| c.eq_ignore_ascii_case("ALL")),
        no_new_privileges: security_opt
            .iter()
            .any(|o| o == "no-new-privileges" || o == "no-new-privileges:true"),
        security_opt,
        read_only_rootfs: hc.readonly_rootfs.unwrap_or(false),
        init: hc.init == Some(true),
        network_mode: hc.network_mode.clone().unwrap_or_default(),
        networks: networks_of(c),
        runtime: hc.runtime.clone().unwrap_or_default(),
        bind_mounts,
        tmpfs,
        other_mounts,
        memory_bytes: u64::try_from(hc.memory.unwrap_or(0)).unwrap_or(0),
        memory_swap_bytes: hc.memory_swap.unwrap_or(0),
        pids_limit: hc.pids_limit.unwrap_or(0),
        nano_cpus: nano_cpus_of(hc),
        restart_policy: hc
            .restart_policy
            .as_ref()
            .and_then(|p| p.name)
            .map(|n| n.as_ref().to_string())
            .unwrap_or_default(),
        devices: hc
            .devices
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|d| {
                format!(
                    "{}:{}",
                    d.path_on_host.unwrap_or_default(),
                    d.path_in_container.unwrap_or_default()
                )
            })
            .collect(),
        group_add: hc.group_add.clone().unwrap_or_default(),
        namespaces: namespaces_of(hc),
        published_ports: published_ports_of(hc, config),
    }
}

/// How an exited container last ended (none while it runs or before it ran).
pub(super) fn last_exit_of(
    state: &EngineState,
    container_state: &ContainerState,
) -> Option<LastExit> {
    match *container_state {
        ContainerState::Exited { code } => Some(LastExit::exited(
            code,
            state.oom_killed == Some(true),
            state
                .finished_at
                .as_deref()
                .and_then(epoch_seconds)
                .and_then(rfc3339_epoch),
            state.error.clone(),
        )),
        ContainerState::Created
        | ContainerState::Running
        | ContainerState::Paused
        | ContainerState::Restarting
        | ContainerState::Removing
        | ContainerState::Dead => None,
    }
}

/// The names of the networks a container is attached to (`none` is not one).
pub(super) fn networks_of(c: &ContainerInspectResponse) -> Vec<String> {
    let mut v: Vec<String> = c
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().filter(|k| *k != "none").cloned().collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The mounts by kind: binds, tmpfs (with `HostConfig.Tmpfs`'s options) and any other.
pub(super) type MountsOf = (Vec<Mount>, BTreeMap<String, String>, Vec<String>);

pub(super) fn mounts_of(mounts: Vec<MountPoint>, hc: &HostConfig) -> MountsOf {
    let mut bind_mounts = Vec::new();
    let mut tmpfs: BTreeMap<String, String> =
        hc.tmpfs.clone().unwrap_or_default().into_iter().collect();
    let mut other_mounts = Vec::new();
    for m in mounts {
        let typ = m.typ.unwrap_or_default();
        let source = m.source.unwrap_or_default();
        let destination = m.destination.unwrap_or_default();
        match typ.as_str() {
            "bind" => bind_mounts.push(Mount {
                source: source.into(),
                target: destination.into(),
                read_only: !m.rw.unwrap_or(false),
            }),
            "tmpfs" => {
                // A `--mount type=tmpfs` has no options in HostConfig.Tmpfs: its own.
                tmpfs.entry(destination).or_default();
            }
            _ => other_mounts.push(format!("{typ}:{source}:{destination}")),
        }
    }
    (bind_mounts, tmpfs, other_mounts)
}

/// The CPU limit in billionths of a CPU, whether set as `NanoCpus` or as a CFS quota.
pub(super) fn nano_cpus_of(hc: &HostConfig) -> u64 {
    match (hc.nano_cpus.unwrap_or(0), hc.cpu_quota.unwrap_or(0)) {
        (0, quota) if quota > 0 => {
            // The kernel's default CFS period when none is set.
            let period = hc.cpu_period.filter(|p| *p > 0).unwrap_or(100_000);
            u64::try_from(i128::from(quota) * 1_000_000_000 / i128::from(period)).unwrap_or(0)
        }
        (n, _) => u64::try_from(n).unwrap_or(0),
    }
}

pub(super) fn namespaces_of(hc: &HostConfig) -> BTreeMap<String, String> {
    [
        ("pid", hc.pid_mode.clone()),
        ("ipc", hc.ipc_mode.clone()),
        ("uts", hc.uts_mode.clone()),
        ("userns", hc.userns_mode.clone()),
        ("cgroupns", hc.cgroupns_mode.map(|m| m.as_ref().to_string())),
    ]
    .into_iter()
    .map(|(ns, mode)| (ns.to_string(), mode.unwrap_or_default()))
    .collect()
}

/// Ports published to the host (`all` for `-P`), then those the image exposes.
pub(super) fn published_ports_of(hc: &HostConfig, config: &ContainerConfig) -> Vec<String> {
    let mut published_ports: Vec<String> = hc
        .port_bindings
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, b)| b.as_ref().is_some_and(|b| !b.is_empty()))
        .map(|(port, _)| port)
        .collect();
    published_ports.sort();
    if hc.publish_all_ports == Some(true) {
        published_ports.push("all".into());
    }
    let mut exposed: Vec<String> = config
        .exposed_ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| format!("exposed:{p}"))
        .collect();
    exposed.sort();
    published_ports.extend(exposed);
    published_ports
}

/// RFC 3339 (`2024-05-01T12:00:00.123456789Z` or with `+hh:mm`) to seconds since the epoch.
pub(super) fn epoch_seconds(s: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(rest.as_bytes()[0], b'+' | b'-') => {
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            let o = oh * 3600 + om * 60;
            if rest.starts_with('-') { -o } else { o }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + sec - offset)
}
