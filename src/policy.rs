//! The container hardening, as data: what a member's container must look like, and a check of
//! what an engine reports (inspect) against it. The backends build their create requests from
//! the same `ContainerSpec`; this module is where "locked down" is defined and verified.

use std::fmt;

use serde::{Deserialize, Serialize};

pub(crate) use crate::core::container::Effective;
use crate::core::container::{
    ContainerRuntime, ContainerSpec, CreateRequest, EngineKind, GVISOR_RUNTIME, Mount, SpecNetwork,
};

/// One way a container differs from the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// What is checked: `image`, `user`, `memory`, `masked paths`...
    pub item: String,
    /// What the policy requires, as shown.
    pub expected: String,
    /// What the engine reports, as shown.
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
    /// The engine applies them: their absence is a violation.
    Enforced,
    /// It cannot, and the team allows that (`allowUnenforcedLimits`): `LIMIT_ITEMS` are waived.
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

/// Each group of checks in turn, each adding what it finds to one list, so that the
/// violations keep one order (the order `status` and the refusals show them in).
fn verify_all(spec: &ContainerSpec, found: &Effective) -> Vec<Violation> {
    let mut v = Violations::default();
    what_runs(&mut v, spec, found);
    confinement(&mut v, found);
    privileges(&mut v, found);
    network(&mut v, spec, found);
    mounts(&mut v, spec, found);
    limits(&mut v, spec, found);
    host_resources(&mut v, found);
    v.0
}

/// The violations found so far, in the order they were checked.
#[derive(Default)]
struct Violations(Vec<Violation>);

impl Violations {
    /// Adds a violation of `item` unless `ok`.
    fn check(&mut self, item: &str, ok: bool, expected: String, found: String) {
        if !ok {
            self.0.push(Violation {
                item: item.into(),
                expected,
                found,
            });
        }
    }
}

/// What the container runs, and as whom: the image, the gate before the command, the
/// command, the user.
fn what_runs(v: &mut Violations, spec: &ContainerSpec, found: &Effective) {
    v.check(
        "image",
        same_image(&found.image, &spec.image),
        spec.image.clone(),
        found.image.clone(),
    );
    let gate: Vec<String> = GATE_ENTRYPOINT.iter().map(|s| s.to_string()).collect();
    v.check(
        "entrypoint",
        found.entrypoint == gate,
        gate.join(" "),
        found.entrypoint.join(" "),
    );
    // Without a command in the manifest it is the image's own, found at create; it cannot
    // change afterwards.
    if let Some(cmd) = &spec.command {
        v.check(
            "command",
            &found.cmd == cmd,
            cmd.join(" "),
            found.cmd.join(" "),
        );
    }
    v.check(
        "user",
        found.user == spec.user,
        spec.user.clone(),
        found.user.clone(),
    );
    // A runc container where the manifest says gVisor has none of gVisor's boundary; the
    // other way round, the gate's checks would be of the wrong kind.
    v.check(
        "runtime",
        spec.runtime.reported_as(&found.runtime),
        spec.runtime.to_string(),
        if found.runtime.is_empty() {
            "the engine's default".into()
        } else {
            found.runtime.clone()
        },
    );
}

/// The confinement the engine applies by default (seccomp, AppArmor, masked and read-only
/// kernel paths, the cgroup), which a create request can loosen.
fn confinement(v: &mut Violations, found: &Effective) {
    let unknown_opts: Vec<String> = found
        .security_opt
        .iter()
        .filter(|o| !ALLOWED_SECURITY_OPTS.contains(&o.as_str()))
        .cloned()
        .collect();
    v.check(
        "security options",
        unknown_opts.is_empty(),
        "no-new-privileges only (default seccomp, AppArmor and SELinux)".into(),
        unknown_opts.join(","),
    );
    v.check(
        "AppArmor profile",
        found.apparmor_profile != "unconfined",
        "the engine's default".into(),
        found.apparmor_profile.clone(),
    );
    for (item, list, must) in [
        ("masked paths", &found.masked_paths, &MUST_MASK[..]),
        (
            "read-only paths",
            &found.readonly_paths,
            &MUST_READ_ONLY[..],
        ),
    ] {
        if let Some(list) = list {
            let missing: Vec<&str> = must
                .iter()
                .filter(|p| !list.iter().any(|l| l == *p))
                .copied()
                .collect();
            v.check(
                item,
                missing.is_empty(),
                format!("at least {}", must.join(",")),
                format!("without {}", missing.join(",")),
            );
        }
    }
    v.check(
        "sysctls",
        found.sysctls.is_empty(),
        "none".into(),
        found.sysctls.join(","),
    );
    v.check(
        "cgroup parent",
        found.cgroup_parent.is_empty(),
        "the engine's default".into(),
        found.cgroup_parent.clone(),
    );
    v.check(
        "OOM killer",
        !found.oom_kill_disable,
        "enabled".into(),
        "disabled".into(),
    );
    v.check(
        "device cgroup rules",
        found.device_cgroup_rules.is_empty(),
        "none".into(),
        found.device_cgroup_rules.join(","),
    );
}

/// What the member's processes may do: no privilege, no capability, no gaining one, a
/// read-only root, and an init that reaps them.
fn privileges(v: &mut Violations, found: &Effective) {
    v.check(
        "privileged",
        !found.privileged,
        "false".into(),
        found.privileged.to_string(),
    );
    v.check(
        "capabilities added",
        found.cap_add.is_empty(),
        "none".into(),
        found.cap_add.join(","),
    );
    v.check(
        "capabilities dropped",
        found.cap_drop_all,
        "ALL".into(),
        "not all".into(),
    );
    v.check(
        "no-new-privileges",
        found.no_new_privileges,
        "on".into(),
        "off".into(),
    );
    v.check(
        "read-only root filesystem",
        found.read_only_rootfs,
        "on".into(),
        "off".into(),
    );
    v.check("init", found.init, "on".into(), "off".into());
}

/// The network: none at all for a member without one or behind its egress proxy, its
/// team's network alone otherwise.
fn network(v: &mut Violations, spec: &ContainerSpec, found: &Effective) {
    let net_ok = match &spec.network {
        // An allowlist reaches the network only through the egress proxy's socket.
        SpecNetwork::None | SpecNetwork::Proxy => found.network_mode == "none",
        // Never the host's, nor another container's.
        // Only its team's network: never the host's, another container's, nor a second one.
        SpecNetwork::Open(_) => {
            !found.network_mode.is_empty()
                && found.network_mode != "host"
                && !found.network_mode.starts_with("container:")
                && !found.network_mode.starts_with("ns:")
                && spec
                    .network
                    .name()
                    .map(str::to_string)
                    .into_iter()
                    .collect::<Vec<_>>()
                    == found.networks
        }
    };
    v.check(
        "network",
        net_ok,
        match spec.network.name() {
            Some(n) => format!("{} ({n})", expected_network(&spec.network)),
            None => expected_network(&spec.network).into(),
        },
        if found.networks.is_empty() {
            found.network_mode.clone()
        } else {
            format!("{} ({})", found.network_mode, found.networks.join(","))
        },
    );
}

/// The file systems: exactly the bind mounts and tmpfs mounts of the spec, nothing else.
fn mounts(v: &mut Violations, spec: &ContainerSpec, found: &Effective) {
    let mut want = spec.mounts.clone();
    want.sort();
    let mut got = found.bind_mounts.clone();
    got.sort();
    v.check(
        "bind mounts",
        want == got,
        show_mounts(&want),
        show_mounts(&got),
    );
    let tmpfs = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| format!("{k}:{}", tmpfs_options(v).join(",")))
            .collect::<Vec<_>>()
    };
    let found_tmpfs = found_tmpfs(&found.tmpfs, &spec.user);
    v.check(
        "tmpfs",
        tmpfs(&spec.tmpfs) == tmpfs(&found_tmpfs),
        tmpfs(&spec.tmpfs).join(" "),
        tmpfs(&found_tmpfs).join(" "),
    );
    v.check(
        "other mounts",
        found.other_mounts.is_empty(),
        "none".into(),
        found.other_mounts.join(","),
    );
}

/// The resource limits; their items are `LIMIT_ITEMS`, which `Limits::Unenforced` waives.
fn limits(v: &mut Violations, spec: &ContainerSpec, found: &Effective) {
    v.check(
        "memory",
        found.memory_bytes == spec.engine_memory(),
        spec.engine_memory().to_string(),
        found.memory_bytes.to_string(),
    );
    v.check(
        "memory+swap",
        found.memory_swap_bytes == spec.engine_memory() as i64,
        spec.engine_memory().to_string(),
        found.memory_swap_bytes.to_string(),
    );
    v.check(
        "pids limit",
        found.pids_limit == i64::from(spec.engine_pids()),
        spec.engine_pids().to_string(),
        found.pids_limit.to_string(),
    );
    let cpus = spec.nano_cpus.unwrap_or(0);
    v.check(
        "cpus",
        found.nano_cpus == cpus,
        cpus.to_string(),
        found.nano_cpus.to_string(),
    );
}

/// What the container may share with the host or have the engine do for it: no engine
/// restarts (ateam restarts, through the gate), no devices, groups, shared namespaces or
/// published ports.
fn host_resources(v: &mut Violations, found: &Effective) {
    let restart_ok = matches!(found.restart_policy.as_str(), "" | "no");
    v.check(
        "engine restart policy",
        restart_ok,
        "no".into(),
        found.restart_policy.clone(),
    );
    v.check(
        "devices",
        found.devices.is_empty(),
        "none".into(),
        found.devices.join(","),
    );
    v.check(
        "extra groups",
        found.group_add.is_empty(),
        "none".into(),
        found.group_add.join(","),
    );
    let shared: Vec<String> = found
        .namespaces
        .iter()
        .filter(|(ns, mode)| !private_namespace(ns, mode))
        .map(|(ns, mode)| format!("{ns}={mode}"))
        .collect();
    v.check(
        "namespaces",
        shared.is_empty(),
        "private".into(),
        shared.join(","),
    );
    v.check(
        "published ports",
        found.published_ports.is_empty(),
        "none".into(),
        found.published_ports.join(","),
    );
}

/// The only `--security-opt` values a member may have: anything else (seccomp or AppArmor
/// unconfined, SELinux labels off, `systempaths=unconfined`) loosens the engine's defaults.
const ALLOWED_SECURITY_OPTS: [&str; 3] = [
    "no-new-privileges",
    "no-new-privileges:true",
    "no-new-privileges=true",
];

/// Kernel interfaces the engines hide by default; a list without them was loosened. (Docker
/// reports the lists; Podman's libpod inspect does not, and there `systempaths=unconfined`
/// would show in the security options.)
const MUST_MASK: [&str; 3] = ["/proc/kcore", "/proc/keys", "/sys/firmware"];
const MUST_READ_ONLY: [&str; 2] = ["/proc/sys", "/proc/sysrq-trigger"];

/// Whether a namespace mode keeps the member in a namespace of its own.
fn private_namespace(ns: &str, mode: &str) -> bool {
    match ns {
        "ipc" => matches!(mode, "" | "private" | "shareable" | "none"),
        "userns" => matches!(mode, "" | "private" | "keep-id"),
        "cgroupns" => mode == "private",
        _ => matches!(mode, "" | "private"),
    }
}

/// The same image, whichever way the engine spells a local one.
fn same_image(found: &str, want: &str) -> bool {
    let bare = |s: &str| {
        let s = s.strip_prefix("localhost/").unwrap_or(s);
        let s = s.strip_prefix("docker.io/").unwrap_or(s);
        s.strip_prefix("library/").unwrap_or(s).to_string()
    };
    bare(found) == bare(want)
}

/// The tmpfs mounts as `engine` takes them. Podman (4.3) knows no `uid=`/`gid=` tmpfs option:
/// its `U` makes the tmpfs the container user's, which is the same thing here (the spec's
/// owner is always the member's user, and that user is checked apart).
pub(crate) fn engine_tmpfs(
    tmpfs: &std::collections::BTreeMap<String, String>,
    engine: EngineKind,
) -> std::collections::BTreeMap<String, String> {
    match engine {
        EngineKind::Docker => tmpfs.clone(),
        EngineKind::Podman { .. } => tmpfs
            .iter()
            .map(|(k, v)| {
                let mut owned = false;
                let mut opts: Vec<&str> = Vec::new();
                for o in v.split(',') {
                    if o.starts_with("uid=") || o.starts_with("gid=") {
                        owned = true;
                    } else {
                        opts.push(o);
                    }
                }
                if owned {
                    opts.push("U");
                }
                (k.clone(), opts.join(","))
            })
            .collect(),
    }
}

/// What an engine reports of tmpfs mounts, in the spec's words: Podman's `U` is the member's
/// `uid=`/`gid=` (`engine_tmpfs`).
fn found_tmpfs(
    found: &std::collections::BTreeMap<String, String>,
    user: &str,
) -> std::collections::BTreeMap<String, String> {
    let (uid, gid) = user.split_once(':').unwrap_or((user, ""));
    found
        .iter()
        .map(|(k, v)| {
            let opts: Vec<String> = v
                .split(',')
                .flat_map(|o| match o {
                    "U" => vec![format!("uid={uid}"), format!("gid={gid}")],
                    o => vec![o.to_string()],
                })
                .collect();
            (k.clone(), opts.join(","))
        })
        .collect()
}

/// Tmpfs options as a sorted list, without those Podman adds on its own (`rprivate`,
/// `tmpcopyup`): what remains must be exactly what the spec asked for.
fn tmpfs_options(opts: &str) -> Vec<&str> {
    let mut v: Vec<&str> = opts
        .split(',')
        .filter(|o| !o.is_empty() && !matches!(*o, "rprivate" | "tmpcopyup"))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn expected_network(n: &SpecNetwork) -> &'static str {
    match n {
        SpecNetwork::None | SpecNetwork::Proxy => "none",
        SpecNetwork::Open(_) => "its team's network",
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
        image: spec.image.clone(),
        entrypoint: GATE_ENTRYPOINT.iter().map(|s| s.to_string()).collect(),
        cmd: spec.command.clone().unwrap_or_default(),
        security_opt: vec!["no-new-privileges".into()],
        apparmor_profile: String::new(),
        masked_paths: None,
        readonly_paths: None,
        sysctls: vec![],
        cgroup_parent: String::new(),
        oom_kill_disable: false,
        device_cgroup_rules: vec![],
        user: spec.user.clone(),
        privileged: false,
        cap_add: vec![],
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        network_mode: match &spec.network {
            SpecNetwork::None | SpecNetwork::Proxy => "none".into(),
            SpecNetwork::Open(n) => n.clone(),
        },
        networks: spec
            .network
            .name()
            .map(str::to_string)
            .into_iter()
            .collect(),
        bind_mounts: spec.mounts.clone(),
        tmpfs: spec.tmpfs.clone(),
        other_mounts: vec![],
        memory_bytes: spec.engine_memory(),
        memory_swap_bytes: spec.engine_memory() as i64,
        pids_limit: i64::from(spec.engine_pids()),
        nano_cpus: spec.nano_cpus.unwrap_or(0),
        restart_policy: "no".into(),
        devices: vec![],
        group_add: vec![],
        namespaces: [("cgroupns", "private")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        published_ports: vec![],
        runtime: match spec.runtime {
            ContainerRuntime::Runc => "runc".into(),
            ContainerRuntime::Gvisor => GVISOR_RUNTIME.into(),
        },
    }
}

/// The entrypoint of every member: ateam's start gate, which runs the member's command once
/// ateam has checked the started container (see gate/main.rs).
pub(crate) const GATE_ENTRYPOINT: [&str; 2] = ["/.ateam/gate", "--"];

/// What `ateam exec` puts before a command: the gate, which runs it only in a start ateam
/// released (see gate/main.rs); `ateam exec` adds `--alive FILE` before the `--`, so that
/// the command ends with its client (`runtime::gate::ExecLease`).
pub const GATE_EXEC: [&str; 3] = ["/.ateam/gate", "--exec", "--"];

/// The create request for a member: the hardening is all here, so that both backends make the
/// same container. `cmd` is the member's command (or the image's own, resolved by the caller).
pub(crate) fn create_request(
    spec: &ContainerSpec,
    labels: std::collections::BTreeMap<String, String>,
    cmd: Vec<String>,
    engine: EngineKind,
) -> CreateRequest {
    CreateRequest {
        name: spec.name.clone(),
        image: spec.image.clone(),
        entrypoint: GATE_ENTRYPOINT.iter().map(|s| s.to_string()).collect(),
        cmd,
        env: spec.env.clone(),
        user: spec.user.clone(),
        workdir: spec.cwd.clone(),
        mounts: spec.mounts.clone(),
        tmpfs: engine_tmpfs(&spec.tmpfs, engine),
        memory_bytes: spec.engine_memory(),
        memory_swap_bytes: spec.engine_memory(),
        pids: spec.engine_pids(),
        nano_cpus: spec.nano_cpus,
        // An allowlist reaches the network only through the egress proxy's socket.
        network_none: !matches!(spec.network, SpecNetwork::Open(_)),
        network_name: spec.network.name().map(str::to_string),
        labels,
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        userns_keep_id: engine == EngineKind::Podman { rootless: true },
        // Engines on cgroup v1 default to the host's cgroup namespace, which the policy refuses.
        cgroupns_private: true,
        terminal: spec.terminal,
        gvisor: spec.runtime == ContainerRuntime::Gvisor,
        nproc: (spec.runtime == ContainerRuntime::Gvisor).then_some(spec.pids),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_home_owned_by_the_member_is_said_in_each_engines_words() {
        let spec = BTreeMap::from([
            ("/tmp".to_string(), "rw,size=1m".to_string()),
            (
                "/home/agent".to_string(),
                "rw,size=1m,uid=7,gid=8,mode=0700".to_string(),
            ),
        ]);
        assert_eq!(engine_tmpfs(&spec, EngineKind::Docker), spec);
        let podman = engine_tmpfs(&spec, EngineKind::Podman { rootless: false });
        assert_eq!(podman["/home/agent"], "rw,size=1m,mode=0700,U");
        assert_eq!(podman["/tmp"], "rw,size=1m");
        // What Podman reports back reads as the spec for the member's user, and only for it.
        let reported = BTreeMap::from([(
            "/home/agent".to_string(),
            "rw,size=1m,mode=0700,U,rprivate,tmpcopyup".to_string(),
        )]);
        let opts = |m: &BTreeMap<String, String>| tmpfs_options(&m["/home/agent"]).join(",");
        assert_eq!(opts(&found_tmpfs(&reported, "7:8")), opts(&spec));
        assert_ne!(opts(&found_tmpfs(&reported, "7:9")), opts(&spec));
        // Without the option the tmpfs is root's: a difference.
        let root_home =
            BTreeMap::from([("/home/agent".to_string(), "rw,size=1m,mode=0700".into())]);
        assert_ne!(opts(&found_tmpfs(&root_home, "7:8")), opts(&spec));
    }
}
