//! `ateam doctor`: what this machine has of what ateam needs, one check at a time, each with
//! the fix when it falls short. The facts are read here (engine sockets, `/etc/subuid`,
//! `/proc`, `/sys/fs/cgroup`, tmux, the engines' images); judging a fact is a plain function
//! of it, tested by table.
//!
//! A check fails when ateam cannot do its work as asked (no engine answers, an engine the user
//! named does not, a manifest's image is missing, memory caps over the admission rule); it
//! warns when something works less well than it could (limits an engine cannot enforce, a
//! rootless setup that is incomplete); it is skipped when it does not apply here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::{App, Manifests};
use crate::backend::BackendError;
use crate::backend::connect::{Candidate, Engine, Env, candidates, connect_to, start_hint};
use crate::backend::host_cgroup_version;
use crate::core::quantity::human_bytes;
use crate::host::{memory_available, which};
use crate::manifest::validate::{DEFAULT_MEMORY, MEMORY_SHARE};
use crate::model::{BackendChoice, Team};

/// How long one engine may take to answer before it counts as not answering.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(10);

/// Subordinate ids rootless Podman needs at least: a whole 16-bit range, as images assume.
const MIN_SUBIDS: u64 = 65536;

/// The verdict of one check; ordered from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Does not apply on this machine (and says why).
    Skip,
    /// Works, but not as well as it could (and says what to do).
    Warn,
    /// ateam cannot work this way (and says what to do).
    Fail,
}

/// One line of the doctor's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was looked at: `engine`, `rootless`, `userns`, `cgroup`, `tmux`, `manifests`,
    /// `image`, `memory` or `workspace`.
    pub check: &'static str,
    /// The verdict.
    pub status: Status,
    /// What was found, in words.
    pub message: String,
    /// What to do about a warning or failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn new(check: &'static str, status: Status, message: impl Into<String>) -> Check {
        Check {
            check,
            status,
            message: message.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// Every check, in the order a person would fix them: engines, the rootless setup, cgroups,
/// tmux, then what `manifests` (when given) need.
pub async fn doctor(app: &App, manifests: Option<&Manifests>) -> Vec<Check> {
    let env = Env::from_process(app.host.uid);
    let podman = which("podman").is_some();
    let rootless = app.host.uid != 0 && podman;
    let choice = app.backend.unwrap_or(BackendChoice::Auto);
    let mut checks = engines(choice, &env, recorded(app, choice)).await;
    checks.extend(rootless_setup(app.host.uid, podman));
    checks.extend(cgroups(app.host.uid, rootless));

    let desired = match manifests {
        None => None,
        Some(m) => match app.judge(m) {
            Ok(d) => {
                checks.push(Check::new(
                    "manifests",
                    Status::Ok,
                    format!("{} team(s), valid on this host", d.teams.len()),
                ));
                Some(d)
            }
            Err(e) => {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default().to_string();
                checks.push(
                    Check::new("manifests", Status::Fail, format!("refused: {first}"))
                        .fix("`ateam validate -f ...` lists every problem"),
                );
                None
            }
        },
    };
    let sessions = desired
        .as_ref()
        .is_some_and(|d| d.teams.iter().any(|t| !t.sessions.is_empty()));
    checks.push(tmux(sessions));
    if let Some(d) = &desired {
        for t in &d.teams {
            checks.extend(images(app, t).await);
            checks.extend(gvisor(app, t).await);
        }
        checks.extend(would_refuse(app, d).await);
    }
    checks.push(memory(app, desired.as_ref().map(|d| d.teams.as_slice())));
    checks.extend(workspaces(app).await);
    checks
}

/// What apply would refuse before its first change (limits this engine cannot enforce,
/// secrets not set, folders the members or the person cannot write), all of it, as apply
/// says it: `valid on this host` is not all an apply needs.
async fn would_refuse(app: &App, desired: &crate::model::Model) -> Vec<Check> {
    let Ok(look) = app.look(desired, crate::plan::PlanOptions::default()).await else {
        // No engine answers: the engine's own check says so.
        return Vec::new();
    };
    let secret = |name: &str| std::env::var(name).ok();
    let refused = app.would_refuse(&look, &secret);
    if refused.is_empty() {
        return vec![Check::new(
            "apply",
            Status::Ok,
            "nothing apply checks first would be refused (limits, secrets, folders)",
        )];
    }
    refused
        .iter()
        .map(|f| {
            Check::new(
                "apply",
                Status::Fail,
                format!("apply would refuse: {}", f.error),
            )
        })
        .collect()
}

/// The applied teams' writers whose work is not yet yours: files not committed, commits
/// not collected (a warning each: `delete --purge` would take them, a `reset` too).
async fn workspaces(app: &App) -> Vec<Check> {
    let Ok(applied) = app.applied(None) else {
        return Vec::new();
    };
    let mut checks = Vec::new();
    for t in &applied.teams {
        for m in &t.members {
            let Some(p) = app.workspace_place(t, m).filter(|p| p.exists()) else {
                continue;
            };
            let who = format!("{}/{}", t.name, m.name);
            checks.push(match crate::workspace::changes(&p, false).await {
                Ok(c) if c.uncommitted.is_empty() && c.uncollected == 0 => Check::new(
                    "workspace",
                    Status::Ok,
                    format!("{who}: all its work is committed and collected"),
                ),
                Ok(c) => Check::new(
                    "workspace",
                    Status::Warn,
                    format!(
                        "{who}: {} file(s) not committed, {} commit(s) not collected",
                        c.uncommitted.len(),
                        c.uncollected
                    ),
                )
                .fix(format!("ateam changes {0}; ateam collect {0}", m.name)),
                Err(e) => Check::new("workspace", Status::Warn, format!("{who}: {e}")).fix(
                    format!("see docs/workspaces.md; ateam snapshots {}", m.name),
                ),
            });
        }
    }
    checks
}

/// The engines the store's teams were applied on (`App::connect` uses them first), each
/// once, that `choice` allows.
fn recorded(app: &App, choice: BackendChoice) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for team in app.store.team_names().unwrap_or_default() {
        let Ok(Some(r)) = app.store.engine(&team) else {
            continue;
        };
        let allowed = match choice {
            BackendChoice::Auto => true,
            BackendChoice::Docker => r.engine == Engine::Docker,
            BackendChoice::Podman => r.engine == Engine::Podman,
        };
        if allowed && !out.iter().any(|c| c.uri == r.uri) {
            out.push(Candidate {
                engine: r.engine,
                uri: r.uri,
                origin: "where this state folder's teams were applied",
            });
        }
    }
    out
}

/// Each place an engine may answer, as `connect` would try them: first where the store's
/// teams were applied (`recorded`), then the environment's and the default sockets. A place
/// the teams use or the user named (`DOCKER_HOST`, `CONTAINER_HOST`) that does not answer
/// fails, a default socket that is not there is skipped, and no engine at all fails.
async fn engines(choice: BackendChoice, env: &Env, recorded: Vec<Candidate>) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut first = true;
    let teams: Vec<String> = recorded.iter().map(|c| c.uri.clone()).collect();
    let from_env = candidates(choice, env)
        .into_iter()
        .filter(|c| !teams.contains(&c.uri));
    for c in recorded.into_iter().chain(from_env) {
        let explicit =
            matches!(c.origin, "DOCKER_HOST" | "CONTAINER_HOST") || teams.contains(&c.uri);
        let place = format!("{} at {} ({})", c.engine.name(), c.uri, c.origin);
        if let Some(path) = c.uri.strip_prefix("unix://")
            && !explicit
            && !Path::new(path).exists()
        {
            checks.push(Check::new(
                "engine",
                Status::Skip,
                format!("{place}: no socket"),
            ));
            continue;
        }
        let answer = tokio::time::timeout(ENGINE_TIMEOUT, connect_to(&c)).await;
        checks.push(match answer {
            Ok(Ok((_, info))) => {
                let used = if first {
                    "; ateam uses it unless --backend or a Team's backend says otherwise"
                } else {
                    ""
                };
                first = false;
                let message = format!(
                    "{place}: {} {} (API {}), cgroup v{}{used}",
                    info.kind, info.version, info.api_version, info.cgroup_version
                );
                if info.limits_enforced {
                    Check::new("engine", Status::Ok, message)
                } else {
                    Check::new(
                        "engine",
                        Status::Warn,
                        format!(
                            "{message}; it accepts memory and pids limits but cannot enforce them (rootless on cgroup v1): members are refused unless their Team sets allowUnenforcedLimits"
                        ),
                    )
                    .fix("boot with cgroup v2 (kernel option systemd.unified_cgroup_hierarchy=1), or use a rootful engine")
                }
            }
            Ok(Err(e)) => unreachable(&c, &place, explicit, &e, env),
            Err(_) => Check::new(
                "engine",
                if explicit { Status::Fail } else { Status::Warn },
                format!(
                    "{place}: no answer within {}s",
                    ENGINE_TIMEOUT.as_secs()
                ),
            )
            .fix("check that the engine is running and not stuck"),
        });
    }
    if first {
        let which = match choice {
            BackendChoice::Docker => "no Docker engine answers",
            BackendChoice::Podman => "no Podman engine answers",
            BackendChoice::Auto => "no container engine answers",
        };
        checks.push(
            Check::new(
                "engine",
                Status::Fail,
                format!("{which}: ateam can apply nothing"),
            )
            .fix(start_hint(env)),
        );
    }
    checks
}

fn unreachable(c: &Candidate, place: &str, explicit: bool, e: &BackendError, env: &Env) -> Check {
    let status = if explicit { Status::Fail } else { Status::Warn };
    let fix = match e {
        // The error already says what to do.
        BackendError::PermissionDenied { .. } => None,
        BackendError::Unavailable { .. }
        | BackendError::NoEngine { .. }
        | BackendError::ImageMissing { .. }
        | BackendError::PullFailed { .. }
        | BackendError::NameConflict { .. }
        | BackendError::NotFound { .. }
        | BackendError::Engine { .. } => Some(if explicit {
            format!(
                "start the engine that should listen there, or point {} at one that runs (unset it to let ateam look in the usual places)",
                c.origin
            )
        } else {
            start_hint(env)
        }),
    };
    let check = Check::new("engine", status, format!("{place}: {e}"));
    match fix {
        Some(f) => check.fix(f),
        None => check,
    }
}

/// What rootless Podman needs of the user and the kernel.
fn rootless_setup(uid: u32, podman: bool) -> Vec<Check> {
    if uid == 0 {
        return vec![Check::new(
            "rootless",
            Status::Skip,
            "running as root (rootless Podman is set up per user: run doctor as that user)",
        )];
    }
    if !podman {
        return vec![Check::new(
            "rootless",
            Status::Skip,
            "Podman is not installed",
        )];
    }
    let name = user_name(uid, &read("/etc/passwd").unwrap_or_default());
    let mut checks = vec![subids(
        name.as_deref(),
        uid,
        &read("/etc/subuid").unwrap_or_default(),
        &read("/etc/subgid").unwrap_or_default(),
    )];
    checks.push(
        if which("newuidmap").is_some() && which("newgidmap").is_some() {
            Check::new(
                "rootless",
                Status::Ok,
                "newuidmap and newgidmap are installed",
            )
        } else {
            Check::new(
                "rootless",
                Status::Warn,
                "newuidmap or newgidmap is missing: rootless Podman cannot map your subordinate ids",
            )
            .fix("install them: apt-get install uidmap")
        },
    );
    checks.push(userns(
        read("/proc/sys/user/max_user_namespaces").as_deref(),
        read("/proc/sys/kernel/unprivileged_userns_clone").as_deref(),
    ));
    checks
}

/// The user's subordinate uid and gid ranges (`/etc/subuid`, `/etc/subgid`: `name:start:count`
/// lines, where the name may also be the uid).
pub(crate) fn subids(name: Option<&str>, uid: u32, subuid: &str, subgid: &str) -> Check {
    let count = |text: &str| -> u64 {
        text.lines()
            .filter_map(|l| {
                let mut parts = l.trim().split(':');
                let (who, _start, count) = (parts.next()?, parts.next()?, parts.next()?);
                (Some(who) == name || who == uid.to_string())
                    .then(|| count.parse::<u64>().ok())
                    .flatten()
            })
            .sum()
    };
    let (u, g) = (count(subuid), count(subgid));
    let who = name.map_or_else(|| format!("uid {uid}"), str::to_string);
    if u >= MIN_SUBIDS && g >= MIN_SUBIDS {
        Check::new(
            "rootless",
            Status::Ok,
            format!("{who} has {u} subordinate uids and {g} gids"),
        )
    } else {
        Check::new(
            "rootless",
            Status::Warn,
            format!(
                "{who} has {u} subordinate uids and {g} gids in /etc/subuid and /etc/subgid; rootless Podman needs {MIN_SUBIDS} of each"
            ),
        )
        .fix(format!(
            "as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {who}; then, as {who}: podman system migrate"
        ))
    }
}

/// Whether an unprivileged user may create user namespaces: `max_user_namespaces` above 0 and,
/// where the kernel has Debian's switch, `unprivileged_userns_clone` on.
pub fn userns(max_user_namespaces: Option<&str>, unprivileged_clone: Option<&str>) -> Check {
    let max = max_user_namespaces.and_then(|s| s.trim().parse::<u64>().ok());
    let clone = unprivileged_clone.map(str::trim);
    if max == Some(0) {
        Check::new(
            "userns",
            Status::Warn,
            "user namespaces are disabled (user.max_user_namespaces = 0): rootless Podman cannot start",
        )
        .fix("as root: sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)")
    } else if clone == Some("0") {
        Check::new(
            "userns",
            Status::Warn,
            "unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0): rootless Podman cannot start",
        )
        .fix("as root: sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/ to keep it)")
    } else {
        Check::new(
            "userns",
            Status::Ok,
            match max {
                Some(n) => format!("unprivileged user namespaces are allowed (up to {n})"),
                None => "unprivileged user namespaces are allowed".to_string(),
            },
        )
    }
}

/// The cgroup version, and whether the memory and pids controllers (which enforce members'
/// limits) are there: for rootful engines on the host, for rootless Podman delegated to the
/// user.
fn cgroups(uid: u32, rootless: bool) -> Vec<Check> {
    if host_cgroup_version() == 2 {
        let user = format!(
            "/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers"
        );
        cgroup_v2(
            &read("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default(),
            rootless.then(|| read(&user)),
        )
    } else {
        cgroup_v1(
            &read("/proc/cgroups").unwrap_or_default(),
            Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists(),
            rootless,
        )
    }
}

/// cgroup v2: `root` is the root cgroup's `cgroup.controllers`; `user`, for a rootless user,
/// that of their systemd user service (`None` inside: not found).
pub(crate) fn cgroup_v2(root: &str, user: Option<Option<String>>) -> Vec<Check> {
    let has = |text: &str, c: &str| text.split_whitespace().any(|x| x == c);
    let missing = |text: &str| -> Vec<&str> {
        ["memory", "pids"]
            .into_iter()
            .filter(|c| !has(text, c))
            .collect()
    };
    let mut checks = vec![match missing(root)[..] {
        [] => Check::new(
            "cgroup",
            Status::Ok,
            "cgroup v2 with the memory and pids controllers: members' limits are enforced",
        ),
        ref gone => Check::new(
            "cgroup",
            Status::Fail,
            format!(
                "cgroup v2 without the {} controller: members' limits cannot be enforced",
                gone.join(" and ")
            ),
        )
        .fix("enable the controllers in the kernel (cgroup_enable=memory on the kernel command line)"),
    }];
    let delegate = "as root: printf '[Service]\\nDelegate=cpu cpuset io memory pids\\n' > /etc/systemd/system/user@.service.d/delegate.conf (mkdir -p the folder first); systemctl daemon-reload; then log in again";
    match user {
        None => {}
        Some(None) => checks.push(
            Check::new(
                "cgroup",
                Status::Warn,
                "no systemd user service cgroup found for you: rootless Podman may not be able to enforce memory and pids limits",
            )
            .fix(format!("log in through systemd (loginctl enable-linger $USER), and delegate the controllers: {delegate}")),
        ),
        Some(Some(text)) => checks.push(match missing(&text)[..] {
            [] => Check::new(
                "cgroup",
                Status::Ok,
                "memory and pids are delegated to your user: rootless Podman enforces limits",
            ),
            ref gone => Check::new(
                "cgroup",
                Status::Warn,
                format!(
                    "the {} controller is not delegated to your user: rootless Podman cannot enforce that limit",
                    gone.join(" and ")
                ),
            )
            .fix(delegate),
        }),
    }
    checks
}

/// cgroup v1: `proc_cgroups` is `/proc/cgroups`; `memsw` whether swap accounting is on;
/// `rootless` whether the user runs rootless Podman (which cannot enforce limits on v1).
pub(crate) fn cgroup_v1(proc_cgroups: &str, memsw: bool, rootless: bool) -> Vec<Check> {
    let enabled = |c: &str| {
        proc_cgroups.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&c) && f.get(3) == Some(&"1")
        })
    };
    let gone: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| !enabled(c))
        .collect();
    let mut checks = vec![if gone.is_empty() {
        Check::new(
            "cgroup",
            Status::Ok,
            if rootless {
                // The rootless engine's own check warns about it.
                "cgroup v1 with the memory and pids controllers: rootful engines enforce members' limits (rootless Podman cannot: see its engine line)"
            } else {
                "cgroup v1 with the memory and pids controllers: rootful engines enforce members' limits"
            },
        )
    } else {
        Check::new(
            "cgroup",
            Status::Fail,
            format!(
                "cgroup v1 without the {} controller: members' limits cannot be enforced",
                gone.join(" and ")
            ),
        )
        .fix("enable the controllers in the kernel (cgroup_enable=memory on the kernel command line)")
    }];
    if !memsw {
        checks.push(
            Check::new(
                "cgroup",
                Status::Warn,
                "swap accounting is off: a member's memory cap holds, but it may also use swap",
            )
            .fix("boot with the kernel option swapaccount=1"),
        );
    }
    checks
}

/// Main sessions run in tmux: missing, it fails when the manifests have a main session.
fn tmux(needed: bool) -> Check {
    let version = which("tmux").and_then(|bin| {
        let out = std::process::Command::new(bin).arg("-V").output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    match version {
        Some(v) => Check::new("tmux", Status::Ok, format!("{v} (main sessions run in it)")),
        None => Check::new(
            "tmux",
            if needed { Status::Fail } else { Status::Warn },
            "tmux is not installed: main sessions cannot start",
        )
        .fix("install it: apt-get install tmux"),
    }
}

/// Every image a team's members use is on the engine the team would be applied on: ateam
/// never pulls.
/// Whether the team's engine runs its members that say `runtime: gvisor` (none: no check).
async fn gvisor(app: &App, team: &Team) -> Option<Check> {
    use crate::backend::GvisorSupport;
    let wanting: Vec<&str> = team
        .members
        .iter()
        .filter(|m| m.runtime == crate::core::container::ContainerRuntime::Gvisor)
        .map(|m| m.name.as_str())
        .collect();
    if wanting.is_empty() {
        return None;
    }
    let who = format!("team {} ({})", team.name, wanting.join(", "));
    let connected =
        tokio::time::timeout(ENGINE_TIMEOUT, app.connect(std::slice::from_ref(team))).await;
    let Ok(Ok((backend, info))) = connected else {
        return Some(Check::new(
            "gvisor",
            Status::Fail,
            format!("{who}: no engine answers to run it under gVisor"),
        ));
    };
    Some(match backend.gvisor().await {
        Ok(GvisorSupport::PerContainer) => Check::new(
            "gvisor",
            Status::Ok,
            format!("{who}: {} runs it under its runtime `runsc`", info.kind),
        ),
        Ok(GvisorSupport::Everything) => Check::new(
            "gvisor",
            Status::Ok,
            format!(
                "{who}: this {} service runs every container under gVisor; its members that say runc are refused here",
                info.kind
            ),
        ),
        Ok(GvisorSupport::Absent(why)) => {
            Check::new("gvisor", Status::Fail, format!("{who}: {why}")).fix("see docs/gvisor.md")
        }
        Err(e) => Check::new(
            "gvisor",
            Status::Fail,
            format!("{who}: the engine did not say whether it can run gVisor: {e}"),
        ),
    })
}

async fn images(app: &App, team: &Team) -> Vec<Check> {
    let wanted: BTreeSet<&str> = team.members.iter().map(|m| m.image.as_str()).collect();
    if wanted.is_empty() {
        return vec![];
    }
    let connected =
        tokio::time::timeout(ENGINE_TIMEOUT, app.connect(std::slice::from_ref(team))).await;
    let backend = match connected {
        Ok(Ok((backend, _))) => backend,
        Ok(Err(e)) => {
            return vec![Check::new(
                "image",
                Status::Fail,
                format!("team {}: no engine to look for its images: {e}", team.name),
            )];
        }
        Err(_) => {
            return vec![Check::new(
                "image",
                Status::Fail,
                format!(
                    "team {}: its engine did not answer within {}s",
                    team.name,
                    ENGINE_TIMEOUT.as_secs()
                ),
            )];
        }
    };
    let engine = backend.kind().engine();
    let mut checks = Vec::new();
    for image in wanted {
        let place = format!(
            "team {}: image {image} on {engine} at {}",
            team.name,
            backend.endpoint()
        );
        checks.push(match backend.image_command(image).await {
            Ok(_) => Check::new("image", Status::Ok, format!("{place}: present")),
            Err(BackendError::ImageMissing { .. }) => {
                Check::new("image", Status::Fail, format!("{place}: missing (ateam never pulls)"))
                    .fix(format!(
                        "build or load it on that engine: `{engine} build -t {image} DIR`, or `{engine} load -i FILE` (for the demo image: scripts/engines.sh)"
                    ))
            }
            Err(e) => Check::new("image", Status::Fail, format!("{place}: {e}")),
        });
    }
    checks
}

/// The admission rule (members' memory caps add up to at most `MEMORY_SHARE` of the host's
/// memory), with the teams applied before and those the manifests define, against the memory
/// free now.
fn memory(app: &App, manifests: Option<&[Team]>) -> Check {
    let applied = app.store.teams().unwrap_or_default();
    let mut caps: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &applied {
        caps.insert(&t.name, team_caps(t));
    }
    for t in manifests.unwrap_or_default() {
        caps.insert(&t.name, team_caps(t));
    }
    let members = caps.values().map(|(n, _)| n).sum();
    let committed = caps.values().map(|(_, b)| b).sum();
    memory_verdict(
        app.host.memory_bytes,
        memory_available(),
        members,
        committed,
    )
}

fn team_caps(t: &Team) -> (usize, u64) {
    (
        t.members.len(),
        t.members.iter().map(|m| m.memory_bytes).sum(),
    )
}

/// `total` and `available` host memory; `members` whose caps add up to `committed`.
pub(crate) fn memory_verdict(
    total: u64,
    available: Option<u64>,
    members: usize,
    committed: u64,
) -> Check {
    let budget = (total as f64 * MEMORY_SHARE) as u64;
    let share = (MEMORY_SHARE * 100.0).round();
    let free = available.map_or_else(String::new, |a| format!("; {} free now", human_bytes(a)));
    let message = format!(
        "{members} member(s) with caps adding up to {} of the {} allowed ({share}% of {}){free}",
        human_bytes(committed),
        human_bytes(budget),
        human_bytes(total)
    );
    let room = budget.saturating_sub(committed);
    if committed > budget {
        Check::new(
            "memory",
            Status::Fail,
            format!("{message}: apply refuses more than that"),
        )
        .fix("lower some members' resources.memory, or run fewer members")
    } else if let Some(a) = available
        && a < room.min(DEFAULT_MEMORY)
    {
        Check::new(
            "memory",
            Status::Warn,
            format!(
                "{message}: the admission rule leaves room for {} more, but less than {} is free: new members may be killed for lack of memory",
                human_bytes(room),
                human_bytes(room.min(DEFAULT_MEMORY))
            ),
        )
        .fix("free memory on the host, or give members lower caps")
    } else {
        Check::new("memory", Status::Ok, message)
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The name of `uid` in `/etc/passwd` text.
fn user_name(uid: u32, passwd: &str) -> Option<String> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.get(2) == Some(&uid.to_string().as_str())).then(|| f[0].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statuses(checks: &[Check]) -> Vec<Status> {
        checks.iter().map(|c| c.status).collect()
    }

    #[test]
    fn subordinate_ids_by_name_or_uid() {
        let sub = "ateamci:100000:65536\nother:165536:65536\n";
        assert_eq!(subids(Some("ateamci"), 1001, sub, sub).status, Status::Ok);
        // By uid, in two ranges that add up.
        let split = "1001:100000:32768\n1001:200000:32768\n";
        assert_eq!(subids(None, 1001, split, split).status, Status::Ok);
        let c = subids(Some("nobody"), 1002, sub, sub);
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.unwrap().contains("usermod --add-subuids"));
        // Uids but no gids.
        assert_eq!(subids(Some("ateamci"), 1001, sub, "").status, Status::Warn);
    }

    #[test]
    fn user_namespaces() {
        assert_eq!(userns(Some("96365\n"), None).status, Status::Ok);
        assert_eq!(userns(Some("96365"), Some("1")).status, Status::Ok);
        assert_eq!(userns(Some("0"), None).status, Status::Warn);
        assert_eq!(userns(Some("96365"), Some("0\n")).status, Status::Warn);
    }

    #[test]
    fn cgroup_v1_controllers_swap_and_rootless() {
        let all =
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t4\t112\t1\npids\t8\t104\t1\n";
        assert_eq!(statuses(&cgroup_v1(all, true, false)), [Status::Ok]);
        assert_eq!(
            statuses(&cgroup_v1(all, false, true)),
            [Status::Ok, Status::Warn]
        );
        let no_pids = "memory\t4\t112\t1\npids\t8\t104\t0\n";
        let c = cgroup_v1(no_pids, true, false);
        assert_eq!(c[0].status, Status::Fail);
        assert!(c[0].message.contains("pids"), "{}", c[0].message);
    }

    #[test]
    fn cgroup_v2_controllers_and_delegation() {
        let root = "cpuset cpu io memory hugetlb pids rdma misc\n";
        assert_eq!(statuses(&cgroup_v2(root, None)), [Status::Ok]);
        assert_eq!(
            statuses(&cgroup_v2(root, Some(Some("memory pids".into())))),
            [Status::Ok, Status::Ok]
        );
        let c = cgroup_v2(root, Some(Some("cpu io\n".into())));
        assert_eq!(statuses(&c), [Status::Ok, Status::Warn]);
        assert!(c[1].message.contains("memory and pids"), "{}", c[1].message);
        assert!(c[1].fix.as_deref().unwrap().contains("Delegate="));
        assert_eq!(
            statuses(&cgroup_v2(root, Some(None))),
            [Status::Ok, Status::Warn]
        );
        assert_eq!(statuses(&cgroup_v2("cpu io", None)), [Status::Fail]);
    }

    #[test]
    fn memory_against_the_admission_rule() {
        const G: u64 = 1 << 30;
        // 8 GiB: caps may add up to 6 GiB.
        let ok = memory_verdict(8 * G, Some(5 * G), 3, 2 * G);
        assert_eq!(ok.status, Status::Ok, "{}", ok.message);
        assert!(
            ok.message
                .contains("2GiB of the 6GiB allowed (75% of 8GiB)"),
            "{}",
            ok.message
        );
        assert_eq!(memory_verdict(8 * G, None, 7, 7 * G).status, Status::Fail);
        // Room for 4 GiB more by the rule, but only 512 MiB free.
        assert_eq!(
            memory_verdict(8 * G, Some(G / 2), 2, 2 * G).status,
            Status::Warn
        );
        // Full by the rule and little free: nothing more will be admitted anyway.
        assert_eq!(memory_verdict(8 * G, Some(0), 6, 6 * G).status, Status::Ok);
    }

    #[test]
    fn user_names_from_passwd() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\nateamci:x:1001:1001::/home/ateamci:/bin/sh\n";
        assert_eq!(user_name(1001, passwd).as_deref(), Some("ateamci"));
        assert_eq!(user_name(1002, passwd), None);
    }
}
