//! The inverse of `validate`: a team of the trusted model written back as manifests a person
//! can check in (`ateam export`), and the manifests a helper request is judged as
//! (`crate::requests`). Everything is written explicitly (absolute paths, limits in bytes,
//! maxMembers), so that what validation makes of it again is the very same model, and an apply
//! of it changes nothing.
//!
//! Members a member asked for are written as ordinary Members, each with an AccessGrant of its
//! own (`requested-<name>`, as the request made it), and an annotation that says who asked:
//! once checked in and applied, a manifest names them and they no longer go with their
//! requester.

use std::collections::BTreeMap;

use serde::Serialize;

use super::raw::{
    API_VERSION, AccessGrantSpec, AllowEntry, MainSessionSpec, MemberSpec, Metadata, NetworkSpec,
    Object, Quantity, Resources, TeamSpec,
};
use crate::model::{AccessGrant, Member, Network, Origin, Parent, Team};

/// The annotation an exported requested member carries: who asked for it, and when.
pub(crate) const REQUESTED_BY: &str = "ateam.dev/requested-by";
/// The annotation of an exported member made by `ateam fork`: its origin, and when.
pub(crate) const FORKED_FROM: &str = "ateam.dev/forked-from";

/// One manifest object of any kind, ready to serialize.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Manifest {
    /// `kind: Team`.
    Team(Object<TeamSpec>),
    /// `kind: MainSession`.
    MainSession(Object<MainSessionSpec>),
    /// `kind: AccessGrant`.
    AccessGrant(Object<AccessGrantSpec>),
    /// `kind: Member`; a requested one carries `REQUESTED_BY`.
    Member(Object<MemberSpec>),
}

fn object<S>(kind: &str, name: &str, labels: &BTreeMap<String, String>, spec: S) -> Object<S> {
    Object {
        api_version: API_VERSION.into(),
        kind: kind.into(),
        metadata: Metadata {
            name: name.into(),
            labels: labels.clone(),
            annotations: BTreeMap::new(),
        },
        spec,
    }
}

fn path_strings(v: &[std::path::PathBuf]) -> Vec<String> {
    v.iter().map(|p| p.display().to_string()).collect()
}

/// The AccessGrant object of `g`, in team `team`.
pub(crate) fn grant_object(team: &str, g: &AccessGrant) -> Object<AccessGrantSpec> {
    object(
        "AccessGrant",
        &g.name,
        &BTreeMap::new(),
        AccessGrantSpec {
            team: Some(team.into()),
            read: path_strings(&g.read),
            write: path_strings(&g.write),
            network: match &g.network {
                Network::None => NetworkSpec::None,
                // A host with rules in its map form, the others as written.
                Network::Allow(h) => NetworkSpec::Allow(
                    h.iter()
                        .map(|h| match g.intercept.iter().find(|i| i.host == *h) {
                            Some(i) => AllowEntry::Rules(super::rules::host_rules(i)),
                            None => AllowEntry::Host(h.clone()),
                        })
                        .collect(),
                ),
                Network::Open => NetworkSpec::Open,
            },
            host_listeners: g.host_listeners.clone(),
            deny: g.deny.clone(),
        },
    )
}

/// CPUs as validation reads them back exactly: thousandths when whole, else a number.
fn cpus(nano: u64) -> Quantity {
    if nano.is_multiple_of(1_000_000) {
        Quantity::Text(format!("{}m", nano / 1_000_000))
    } else {
        Quantity::Number(nano as f64 / 1e9)
    }
}

/// Memory as a person writes it (`64Mi`), when a binary unit says it exactly.
fn memory(bytes: u64) -> Quantity {
    for (unit, size) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return Quantity::Text(format!("{}{unit}", bytes / size));
        }
    }
    Quantity::Text(bytes.to_string())
}

/// The Member object of `m`, in `team`.
pub(crate) fn member_object(team: &Team, m: &Member) -> Object<MemberSpec> {
    let mut o = object(
        "Member",
        &m.name,
        &m.labels,
        MemberSpec {
            team: Some(team.name.clone()),
            parent: match &m.parent {
                Parent::MainSession(s) => format!("MainSession/{s}"),
                Parent::Member(p) => format!("Member/{p}"),
            },
            access: (!m.access.name.is_empty()).then(|| m.access.name.clone()),
            image: Some(image_spec(m)),
            image_pull_policy: Some(m.image_pull_policy),
            command: m.command.clone(),
            cwd: Some(m.cwd.display().to_string()),
            env: m.env.clone(),
            secret_env: m.secret_env.clone(),
            resources: Resources {
                memory: Some(memory(m.memory_bytes)),
                pids: Some(m.pids),
                cpus: m.nano_cpus.map(cpus),
            },
            restart: m.restart,
            // The team's user is written on the Team; a member's only when it differs.
            user: m
                .user
                .filter(|u| Some(*u) != team.user)
                .map(|u| u.to_string()),
            workspace: m.workspace.as_ref().map(|w| {
                Box::new(super::raw::WorkspaceSpec {
                    repo: w.repo.display().to_string(),
                    base: Some(w.base.clone()),
                    branch: Some(w.branch.clone()),
                })
            }),
            share_writes: m.share_writes,
            runtime: (!m.runtime.is_runc()).then_some(m.runtime),
            agent: m.agent.as_ref().map(|a| Box::new(agent_spec(a))),
            snapshot_writes: m
                .snapshot_writes
                .map(|b| super::raw::Quantity::Text(b.to_string())),
        },
    );
    if let Some(a) = &m.agent {
        without_agent(&mut o.spec, a, &m.transcript_dir, &m.cwd);
    }
    match &m.origin {
        Origin::Requested { by, at } => {
            o.metadata
                .annotations
                .insert(REQUESTED_BY.into(), format!("{by} at {at}"));
        }
        Origin::Forked { from, at } => {
            o.metadata
                .annotations
                .insert(FORKED_FROM.into(), format!("{from} at {at}"));
        }
        Origin::Manifest => {}
    }
    o
}

/// Every object of `team`: the Team, its main sessions, its grants (those its members use
/// that no AccessGrant of the team defines, such as a requested member's, included) and its
/// members.
pub fn team_objects(team: &Team) -> Vec<Manifest> {
    let mut out = vec![Manifest::Team(object(
        "Team",
        &team.name,
        &team.labels,
        TeamSpec {
            backend: team.backend,
            image: team.image.clone(),
            image_pull_policy: None,
            max_members: Some(team.max_members),
            max_depth: Some(team.max_depth),
            session_dir: Some(team.session_dir.display().to_string()),
            allow_unenforced_limits: team.allow_unenforced_limits,
            user: team.user.map(|u| u.to_string()),
            allow_root_user: team.allow_root_user,
            helper_requests: team.helper_requests,
            board: team.board,
            // Each member's is written on it.
            runtime: None,
        },
    ))];
    for s in &team.sessions {
        out.push(Manifest::MainSession(object(
            "MainSession",
            &s.name,
            &s.labels,
            MainSessionSpec {
                team: Some(team.name.clone()),
                cwd: Some(s.cwd.display().to_string()),
                command: s.command.clone(),
                env: s.env.clone(),
                promoted_from: s.promoted_from.clone(),
                takes_over: s.takes_over.clone(),
            },
        )));
    }
    let mut grants: BTreeMap<String, AccessGrant> = team
        .grants
        .iter()
        .map(|g| (g.name.clone(), g.clone()))
        .collect();
    let mut members = Vec::new();
    for m in &team.members {
        let mut m = m.clone();
        // The model host `agent:` added is written as `agent:`, not in the grant.
        if let Some(h) = m.agent.as_ref().and_then(|a| a.model_host.as_deref()) {
            m.access.remove_model_host(h);
        }
        if !m.access.name.is_empty() {
            // A grant no AccessGrant of the team defines (a requested member's) is written
            // too; should its name be taken by a different grant, under a name of its own.
            let mut name = m.access.name.clone();
            let mut n = 1;
            while grants.get(&name).is_some_and(|g| {
                g.read != m.access.read
                    || g.write != m.access.write
                    || g.network != m.access.network
                    || g.intercept != m.access.intercept
            }) {
                n += 1;
                name = format!("{}-{n}", m.access.name);
            }
            m.access.name = name.clone();
            grants.entry(name).or_insert_with(|| m.access.clone());
        }
        members.push(m);
    }
    for g in grants.values() {
        out.push(Manifest::AccessGrant(grant_object(&team.name, g)));
    }
    for m in &members {
        out.push(Manifest::Member(member_object(team, m)));
    }
    out
}

/// `objects` as one YAML stream, documents separated by `---`. Fields left at their default
/// (nothing, no labels, no env) are left out, as a person would write them.
pub fn to_yaml(objects: &[Manifest]) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for o in objects {
        let mut v = serde_json::to_value(o).expect("a manifest serializes");
        prune(&mut v);
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&v)?);
    }
    Ok(out)
}

/// Removes nulls, and empty mappings and lists, from mappings (`command: []` stays: it is
/// never written, and would mean something).
fn prune(v: &mut serde_json::Value) {
    use serde_json::Value;
    if let Value::Object(m) = v {
        for x in m.values_mut() {
            prune(x);
        }
        m.retain(|_, x| match x {
            Value::Null => false,
            Value::Object(o) => !o.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Bool(_) | Value::Number(_) | Value::String(_) => true,
        });
    } else if let Value::Array(a) = v {
        a.iter_mut().for_each(prune);
    }
}

/// `image:` as the manifest said it: a name, or the definition ateam builds.
fn image_spec(m: &Member) -> super::raw::ImageSpec {
    use super::raw::{BuildSpec, ImageDefinition, ImageSpec};
    let Some(b) = &m.image_build else {
        return ImageSpec::Name(m.image.clone());
    };
    let d = match &b.devcontainer {
        Some(file) => ImageDefinition {
            devcontainer: Some(file.display().to_string()),
            build: None,
        },
        None => ImageDefinition {
            devcontainer: None,
            build: Some(BuildSpec {
                context: Some(b.context.display().to_string()),
                dockerfile: Some(b.dockerfile.clone()),
                args: b.args.clone(),
                target: b.target.clone(),
            }),
        },
    };
    ImageSpec::Defined(Box::new(d))
}

/// `agent:` as the manifest said it: its version and checksum only when not ateam's pins.
fn agent_spec(a: &crate::model::Agent) -> super::raw::AgentSpec {
    let pinned = crate::core::agents::AgentKind::parse(&a.name).map(|k| k.pinned());
    let same_version = pinned.as_ref().map(|p| &p.version) == a.version.as_ref();
    let same_sum = same_version && pinned.as_ref().map(|p| &p.sha256) == a.sha256.as_ref();
    super::raw::AgentSpec {
        name: a.name.clone(),
        task: a.task.clone(),
        model: a.model.clone(),
        model_url: a.model_url.clone(),
        args: a.args.clone(),
        interactive: a.interactive,
        version: a.version.clone().filter(|_| !same_version),
        sha256: a.sha256.clone().filter(|_| !same_sum),
        login: (!a.login.is_api_key()).then(|| a.login.name().to_string()),
        model_ca: a.model_ca.clone(),
    }
}

/// A member with `agent:` is written as the manifest said it: without the command and the
/// environment its agent expands to (validation adds them again).
fn without_agent(
    spec: &mut MemberSpec,
    a: &crate::model::Agent,
    transcripts: &std::path::Path,
    cwd: &std::path::Path,
) {
    let Some(x) = a.expand(transcripts, cwd) else {
        return;
    };
    spec.command = None;
    spec.env.retain(|k, v| x.env.get(k) != Some(v));
    spec.secret_env.retain(|s| Some(s.as_str()) != x.secret);
}
