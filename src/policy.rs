//! The container hardening, as data: what a member's container must look like, and a check of
//! what an engine reports (inspect) against it. The backends build their create requests from
//! the same `ContainerSpec`; this module is where "locked down" is defined and verified.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Network;
use crate::plan::spec::{ContainerSpec, Mount};

/// A container's configuration as the engine reports it, reduced to what the policy covers.
/// Backends fill it from `inspect`; it is plain data so that the check is a pure function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Effective {
    pub user: String,
    pub privileged: bool,
    pub cap_add: Vec<String>,
    /// Capabilities the process keeps (after drops); "ALL" dropped means empty here.
    pub cap_drop_all: bool,
    pub no_new_privileges: bool,
    pub read_only_rootfs: bool,
    pub init: bool,
    /// `none` for no network; anything else is a network the member can use.
    pub network_mode: String,
    pub bind_mounts: Vec<Mount>,
    /// Mount points of tmpfs mounts.
    pub tmpfs: Vec<String>,
    /// Mounts of any other kind (volumes, the engine socket...): never allowed.
    pub other_mounts: Vec<String>,
    pub memory_bytes: u64,
    pub memory_swap_bytes: i64,
    pub pids_limit: i64,
    pub nano_cpus: u64,
    pub restart_policy: String,
    pub devices: Vec<String>,
    pub group_add: Vec<String>,
    /// pid, ipc, uts, cgroup namespace modes that say "host".
    pub host_namespaces: Vec<String>,
    pub published_ports: Vec<String>,
}

/// One way a container differs from the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub item: String,
    pub expected: String,
    pub found: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, found {}",
            self.item, self.expected, self.found
        )
    }
}

/// Whether the engine applies memory, pids and CPU limits. Rootless Podman on cgroup v1
/// accepts them and drops them; where the user allowed that, their absence is not a violation
/// (status still reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limits {
    Enforced,
    Unenforced,
}

/// The policy items that `Limits::Unenforced` waives.
const LIMIT_ITEMS: [&str; 4] = ["memory", "memory+swap", "pids limit", "cpus"];

/// Every difference between `found` and what the policy requires for `spec`. Empty means the
/// container may run.
pub fn verify(spec: &ContainerSpec, found: &Effective, limits: Limits) -> Vec<Violation> {
    let mut v = verify_all(spec, found);
    if limits == Limits::Unenforced {
        v.retain(|x| !LIMIT_ITEMS.contains(&x.item.as_str()));
    }
    v
}

fn verify_all(spec: &ContainerSpec, found: &Effective) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut check = |item: &str, ok: bool, expected: String, got: String| {
        if !ok {
            v.push(Violation {
                item: item.into(),
                expected,
                found: got,
            });
        }
    };
    check(
        "user",
        found.user == spec.user,
        spec.user.clone(),
        found.user.clone(),
    );
    check(
        "privileged",
        !found.privileged,
        "false".into(),
        found.privileged.to_string(),
    );
    check(
        "capabilities added",
        found.cap_add.is_empty(),
        "none".into(),
        found.cap_add.join(","),
    );
    check(
        "capabilities dropped",
        found.cap_drop_all,
        "ALL".into(),
        "not all".into(),
    );
    check(
        "no-new-privileges",
        found.no_new_privileges,
        "on".into(),
        "off".into(),
    );
    check(
        "read-only root filesystem",
        found.read_only_rootfs,
        "on".into(),
        "off".into(),
    );
    check("init", found.init, "on".into(), "off".into());
    let net_ok = match spec.network {
        // An allowlist reaches the network only through the egress proxy's socket.
        Network::None | Network::Allow(_) => found.network_mode == "none",
        Network::Open => found.network_mode != "host",
    };
    check(
        "network",
        net_ok,
        expected_network(&spec.network).into(),
        found.network_mode.clone(),
    );
    let mut want = spec.mounts.clone();
    want.sort();
    let mut got = found.bind_mounts.clone();
    got.sort();
    check(
        "bind mounts",
        want == got,
        show_mounts(&want),
        show_mounts(&got),
    );
    let mut want_tmpfs: Vec<String> = spec.tmpfs.keys().cloned().collect();
    want_tmpfs.sort();
    let mut got_tmpfs = found.tmpfs.clone();
    got_tmpfs.sort();
    check(
        "tmpfs",
        want_tmpfs == got_tmpfs,
        want_tmpfs.join(","),
        got_tmpfs.join(","),
    );
    check(
        "other mounts",
        found.other_mounts.is_empty(),
        "none".into(),
        found.other_mounts.join(","),
    );
    check(
        "memory",
        found.memory_bytes == spec.memory_bytes,
        spec.memory_bytes.to_string(),
        found.memory_bytes.to_string(),
    );
    check(
        "memory+swap",
        found.memory_swap_bytes == spec.memory_bytes as i64,
        spec.memory_bytes.to_string(),
        found.memory_swap_bytes.to_string(),
    );
    check(
        "pids limit",
        found.pids_limit == i64::from(spec.pids),
        spec.pids.to_string(),
        found.pids_limit.to_string(),
    );
    let cpus = spec.nano_cpus.unwrap_or(0);
    check(
        "cpus",
        found.nano_cpus == cpus,
        cpus.to_string(),
        found.nano_cpus.to_string(),
    );
    let restart_ok = matches!(found.restart_policy.as_str(), "" | "no");
    check(
        "engine restart policy",
        restart_ok,
        "no".into(),
        found.restart_policy.clone(),
    );
    check(
        "devices",
        found.devices.is_empty(),
        "none".into(),
        found.devices.join(","),
    );
    check(
        "extra groups",
        found.group_add.is_empty(),
        "none".into(),
        found.group_add.join(","),
    );
    check(
        "host namespaces",
        found.host_namespaces.is_empty(),
        "none".into(),
        found.host_namespaces.join(","),
    );
    check(
        "published ports",
        found.published_ports.is_empty(),
        "none".into(),
        found.published_ports.join(","),
    );
    v
}

fn expected_network(n: &Network) -> &'static str {
    match n {
        Network::None | Network::Allow(_) => "none",
        Network::Open => "a private network",
    }
}

fn show_mounts(m: &[Mount]) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|m| {
            let mode = if m.read_only { "ro" } else { "rw" };
            format!("{}:{}:{mode}", m.source.display(), m.target.display())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What a spec requires, as an `Effective` value: the compliant configuration. Used by tests
/// and as the reference a backend's create request must produce.
pub fn compliant(spec: &ContainerSpec) -> Effective {
    Effective {
        user: spec.user.clone(),
        privileged: false,
        cap_add: vec![],
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        network_mode: match spec.network {
            Network::None | Network::Allow(_) => "none".into(),
            Network::Open => "bridge".into(),
        },
        bind_mounts: spec.mounts.clone(),
        tmpfs: spec.tmpfs.keys().cloned().collect(),
        other_mounts: vec![],
        memory_bytes: spec.memory_bytes,
        memory_swap_bytes: spec.memory_bytes as i64,
        pids_limit: i64::from(spec.pids),
        nano_cpus: spec.nano_cpus.unwrap_or(0),
        restart_policy: "no".into(),
        devices: vec![],
        group_add: vec![],
        host_namespaces: vec![],
        published_ports: vec![],
    }
}

/// The entrypoint of every member: ateam's start gate, which runs the member's command once
/// ateam has checked the started container (see gate/main.rs).
pub const GATE_ENTRYPOINT: [&str; 2] = ["/.ateam/gate", "--"];

/// The create request for a member: the hardening is all here, so that both backends make the
/// same container. `cmd` is the member's command (or the image's own, resolved by the caller).
pub fn create_request(
    spec: &ContainerSpec,
    labels: std::collections::BTreeMap<String, String>,
    cmd: Vec<String>,
    engine: crate::backend::EngineKind,
) -> crate::backend::CreateRequest {
    crate::backend::CreateRequest {
        name: spec.name.clone(),
        image: spec.image.clone(),
        entrypoint: GATE_ENTRYPOINT.iter().map(|s| s.to_string()).collect(),
        cmd,
        env: spec.env.clone(),
        user: spec.user.clone(),
        workdir: spec.cwd.clone(),
        mounts: spec.mounts.clone(),
        tmpfs: spec.tmpfs.clone(),
        memory_bytes: spec.memory_bytes,
        memory_swap_bytes: spec.memory_bytes,
        pids: spec.pids,
        nano_cpus: spec.nano_cpus,
        // An allowlist reaches the network only through the egress proxy's socket.
        network_none: !matches!(spec.network, Network::Open),
        labels,
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        userns_keep_id: engine == crate::backend::EngineKind::Podman { rootless: true },
        // Engines on cgroup v1 default to the host's cgroup namespace, which the policy refuses.
        cgroupns_private: true,
    }
}
