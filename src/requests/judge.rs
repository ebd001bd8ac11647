//! Judging a request as manifests are judged, plus what a request may not ask beyond its
//! requester (resources, hosts, folders).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::core::layout;
use crate::core::quantity;
use crate::host::Host;
use crate::manifest::export::{self, Manifest};
use crate::manifest::raw::{NetworkSpec, Resources};
use crate::manifest::{Problem, Source};
use crate::model::{Member, Origin, Parent, Team};

use super::records::record_path;
use super::{Refusal, Request};

/// What a request's hosts with rules need: the secrets they inject that the requester
/// declares (the helper's placeholders; one the requester lacks is refused as wider by the
/// manifest rules), and a refusal for an `upstreamCA` that names a file: a request is
/// judged on the host, which must not read files a member names.
fn request_rules(req: &Request, parent: &Member) -> (Vec<String>, Option<Refusal>) {
    use crate::manifest::raw::AllowEntry;
    let Some(NetworkSpec::Allow(allow)) = &req.network else {
        return (vec![], None);
    };
    let mut secrets = Vec::new();
    for (i, e) in allow.iter().enumerate() {
        let AllowEntry::Rules(r) = e else { continue };
        if let Some(ca) = &r.upstream_ca
            && !ca.trim_start().starts_with("-----BEGIN")
        {
            let field = format!("network.allow[{i}].upstreamCA");
            return (
                vec![],
                Some(Refusal::new(
                    422,
                    "narrower-than-requester",
                    Some(&field),
                    "in a request, `upstreamCA` is the PEM text of its requester's (a request never names a file on the host)",
                )),
            );
        }
        let Some(c) = &r.credentials else { continue };
        let named = [
            c.secret.as_deref(),
            c.bearer.as_deref(),
            c.basic.as_ref().map(|b| b.secret.as_str()),
        ];
        for s in named.into_iter().flatten() {
            if parent.secret_env.iter().any(|p| p == s) && !secrets.iter().any(|x| x == s) {
                secrets.push(s.to_string());
            }
        }
    }
    (secrets, None)
}

/// The hosts `req` asks for that its requester's grant does not let through at all (as
/// entries, each once): what the person could grant the requester, so that the request
/// would pass (`approvals::asks`). A host the requester reaches with rules is not one: its
/// rules are the person's, and an entry would not change them.
pub fn hosts_wanted(req: &Request, requester: &Member) -> Vec<String> {
    use crate::core::egress::{Allowlist, Entry};
    use crate::model::Network;
    let Some(NetworkSpec::Allow(asked)) = &req.network else {
        return Vec::new();
    };
    let has = match &requester.access.network {
        Network::Open => return Vec::new(),
        Network::None => Allowlist::default(),
        Network::Allow(list) => Allowlist::parse(list).unwrap_or_default(),
    };
    let ruled: Vec<Entry> = requester
        .access
        .intercept
        .iter()
        .filter_map(|i| Entry::parse(&i.host).ok())
        .collect();
    let mut out: Vec<String> = Vec::new();
    for e in asked {
        let Ok(entry) = Entry::parse(e.host()) else {
            continue;
        };
        let reached = has.entries.iter().any(|h| h.covers(&entry))
            || ruled.iter().any(|r| r.covers(&entry) || entry.covers(r));
        let text = entry.to_string();
        if !reached && !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

/// A requested member is kept only while it is no wider than its requester now (a manifest
/// may have narrowed the requester since).
pub(super) fn still_within(m: &Member, parent: &Member) -> Result<(), String> {
    crate::manifest::validate::narrower(&m.access, &parent.access)
        .map_err(|(_, why)| format!("its grant {why} (its requester's grant was narrowed)"))?;
    resources_within(m, parent).map_err(|r| r.message)
}

/// Memory, pids and CPUs: no more than the requester's.
fn resources_within(m: &Member, parent: &Member) -> Result<(), Refusal> {
    let refuse = |field: &str, what: String| {
        Err(Refusal::new(
            422,
            "resources-within-requester",
            Some(field),
            format!(
                "{what}; a requested member may have no more than its requester `{}`",
                parent.name
            ),
        ))
    };
    if m.memory_bytes > parent.memory_bytes {
        return refuse(
            "resources.memory",
            format!(
                "memory {} is more than the requester's {}",
                quantity::human_bytes(m.memory_bytes),
                quantity::human_bytes(parent.memory_bytes)
            ),
        );
    }
    if m.pids > parent.pids {
        return refuse(
            "resources.pids",
            format!(
                "pids {} is more than the requester's {}",
                m.pids, parent.pids
            ),
        );
    }
    match (m.nano_cpus, parent.nano_cpus) {
        (_, None) => {}
        (None, Some(_)) => {
            return refuse(
                "resources.cpus",
                "no CPU limit, but the requester has one".to_string(),
            );
        }
        (Some(c), Some(p)) if c > p => {
            return refuse(
                "resources.cpus",
                format!(
                    "cpus {} is more than the requester's {}",
                    c as f64 / 1e9,
                    p as f64 / 1e9
                ),
            );
        }
        (Some(_), Some(_)) => {}
    }
    Ok(())
}

/// Refuses a requested folder that is not, by name, inside the requester's own grants,
/// before anything looks at the file system: the checks of a grant path (exists, is a folder,
/// no symlink) run as the helper server's user, often root, and their answers differ, so a
/// member could otherwise learn what exists anywhere on the host, outside what it may see.
fn outside_requester(req: &Request, parent: &Member) -> Result<(), Refusal> {
    let lists: [(&str, &[String], Vec<&PathBuf>); 2] = [
        (
            "read",
            &req.read,
            parent
                .access
                .read
                .iter()
                .chain(&parent.access.write)
                .collect(),
        ),
        ("write", &req.write, parent.access.write.iter().collect()),
    ];
    for (field, asked, may) in lists {
        for (i, p) in asked.iter().enumerate() {
            let named = crate::manifest::paths::resolve(p, Path::new("/"), Path::new("/"));
            if !may
                .iter()
                .any(|g| crate::manifest::paths::within(&named, g))
            {
                return Err(Refusal::new(
                    422,
                    "narrower-than-requester",
                    Some(&format!("{field}[{i}]")),
                    format!(
                        "grant `{}` {field}s `{}`, which its parent may not {field} (`{}`); a member's access must be the same as or narrower than its parent's",
                        grant_name(&req.name),
                        named.display(),
                        parent.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a request whose command, environment or working folder holds a control character
/// (beyond tabs and line ends), a bidi override, isolate or mark, a line separator or a
/// byte-order mark (`core::untrusted`): `export` writes them back as YAML for a person to read, and YAML
/// leaves a bidi override as it is, so the person would read another command than the one
/// that runs. Folders are refused by the grant rules (`manifest::paths::check_grant`).
fn plain_text(req: &Request) -> Result<(), Refusal> {
    let fields = req
        .command
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, a)| (format!("command[{i}]"), a))
        .chain(
            req.env
                .iter()
                .flat_map(|(k, v)| [(format!("env.{k}"), k), (format!("env.{k}"), v)]),
        )
        .chain(req.cwd.iter().map(|c| ("cwd".to_string(), c)));
    for (field, text) in fields {
        if crate::core::untrusted::hidden_steering(text) {
            return Err(Refusal::new(
                422,
                "plain-text",
                Some(&field),
                format!(
                    "`{}` holds a control, bidirectional or line-separator character (shown escaped); a request's text is shown to people and must read as it runs",
                    crate::core::untrusted::shown(text)
                ),
            ));
        }
    }
    Ok(())
}

/// The name of the AccessGrant a request makes for its member.
pub fn grant_name(member: &str) -> String {
    let mut n = format!("requested-{member}");
    n.truncate(63);
    n.trim_end_matches('-').to_string()
}

/// Where problems of a judged request are said to be.
const REQUEST_FILE: &str = "<helper request>";

/// Judges `req` from member `by` of `team` (with its requested members merged in), against
/// the other teams of the store (`applied`, requests merged in too): the member it makes, or
/// the rule it breaks. `at` is the time of the request (RFC 3339).
pub fn judge(
    req: &Request,
    by: &str,
    team: &Team,
    applied: &[Team],
    host: &Host,
    at: &str,
) -> Result<Member, Refusal> {
    let parent = requester(req, by, team)?;
    absolute_paths(req)?;
    outside_requester(req, parent)?;
    plain_text(req)?;
    if let Some(c) = &req.cwd
        && !c.starts_with('/')
    {
        return Err(Refusal::new(
            400,
            "absolute-paths",
            Some("cwd"),
            format!("`{c}` is not an absolute path"),
        ));
    }
    image_from_manifests(req, team)?;
    let (secret_env, refusal) = request_rules(req, parent);
    if let Some(r) = refusal {
        return Err(r);
    }
    let (child, text) = as_manifests(req, by, team, parent, secret_env, at)?;
    let mut made = validated(text, req, host, applied)?;
    made.origin = child.origin;
    resources_within(&made, parent)?;
    Ok(made)
}

/// The member asking, when its team lets members ask and the name is free of its members and
/// main sessions.
fn requester<'t>(req: &Request, by: &str, team: &'t Team) -> Result<&'t Member, Refusal> {
    if !team.helper_requests {
        return Err(Refusal::new(
            403,
            "helperRequests",
            None,
            format!(
                "team `{}` does not allow helper requests (its Team sets no `helperRequests: true`)",
                team.name
            ),
        ));
    }
    let Some(parent) = team.members.iter().find(|m| m.name == by) else {
        return Err(Refusal::new(
            403,
            "requester",
            None,
            format!("`{by}` is not a member of team `{}` now", team.name),
        ));
    };
    if team.members.iter().any(|m| m.name == req.name) {
        return Err(Refusal::new(
            409,
            "unique-name",
            Some("name"),
            format!(
                "team `{}` already has a member `{}`; choose another name",
                team.name, req.name
            ),
        ));
    }
    if team.sessions.iter().any(|s| s.name == req.name) {
        return Err(Refusal::new(
            409,
            "session-name",
            Some("name"),
            format!(
                "`{}` is a main session of team `{}`; a helper may not take its name",
                req.name, team.name
            ),
        ));
    }
    Ok(parent)
}

/// Folders are named as the requester sees them: absolute paths.
fn absolute_paths(req: &Request) -> Result<(), Refusal> {
    for (field, list) in [("read", &req.read), ("write", &req.write)] {
        for (i, p) in list.iter().enumerate() {
            if !p.starts_with('/') {
                return Err(Refusal::new(
                    400,
                    "absolute-paths",
                    Some(&format!("{field}[{i}]")),
                    format!(
                        "`{p}` is not an absolute path; a request names folders as the requester sees them (ATEAM_READ_DIRS, ATEAM_WRITE_DIRS)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// An image is a name the engine may fetch from a registry, on the host's network: a
/// member choosing any would have a way out that its grant does not give it (an image
/// name can carry data to a registry of its choosing). So: an image a person named for
/// this team.
fn image_from_manifests(req: &Request, team: &Team) -> Result<(), Refusal> {
    if let Some(image) = &req.image
        && team.image.as_ref() != Some(image)
        && !team.members.iter().any(|m| m.image == *image)
    {
        return Err(Refusal::new(
            422,
            "image-from-manifests",
            Some("image"),
            format!(
                "`{image}` is not an image the team's manifests name (its Team's image or a member's); a requested member may only use one of those"
            ),
        ));
    }
    Ok(())
}

/// The requested member as a person would write it: the team's manifests, a grant and a
/// member; with the member as the model holds it before judging.
fn as_manifests(
    req: &Request,
    by: &str,
    team: &Team,
    parent: &Member,
    secret_env: Vec<String>,
    at: &str,
) -> Result<(Member, String), Refusal> {
    // The member as a manifest would write it.
    let grant = crate::model::AccessGrant {
        name: grant_name(&req.name),
        read: vec![],
        write: vec![],
        network: crate::model::Network::None,
        intercept: vec![],
        // A helper's own: a requested grant names no other user's listeners.
        host_listeners: vec![],
        deny: vec![],
    };
    let mut grant_obj = export::grant_object(&team.name, &grant);
    grant_obj.spec.read = req.read.clone();
    grant_obj.spec.write = req.write.clone();
    grant_obj.spec.network = req.network.clone().unwrap_or(NetworkSpec::None);
    let child = Member {
        name: req.name.clone(),
        parent: Parent::Member(by.to_string()),
        user: parent.user,
        depth: parent.depth + 1,
        access: grant.clone(),
        image: req
            .image
            .clone()
            .or_else(|| team.image.clone())
            .unwrap_or_else(|| parent.image.clone()),
        image_build: None,
        command: req.command.clone(),
        cwd: PathBuf::new(),
        env: req.env.clone(),
        secret_env,
        memory_bytes: parent.memory_bytes,
        pids: parent.pids,
        nano_cpus: parent.nano_cpus,
        restart: req.restart.unwrap_or_default(),
        image_pull_policy: parent.image_pull_policy,
        labels: BTreeMap::new(),
        transcript_dir: PathBuf::new(),
        workspace: None,
        agent: None,
        snapshot_writes: None,
        origin: Origin::Requested {
            by: by.to_string(),
            at: at.to_string(),
        },
        // Its asker's word: a person who let the asker share its folders lets its helpers
        // share them too; otherwise a helper may not write where another member writes.
        share_writes: parent.share_writes,
        // No wider than its asker: an asker under gVisor gets helpers under gVisor.
        runtime: parent.runtime,
    };
    let mut member_obj = export::member_object(team, &child);
    member_obj.spec.cwd = req.cwd.clone();
    let r = &req.resources;
    member_obj.spec.resources = Resources {
        memory: r.memory.clone().or(member_obj.spec.resources.memory),
        pids: r.pids.or(member_obj.spec.resources.pids),
        cpus: r.cpus.clone().or(member_obj.spec.resources.cpus),
    };
    member_obj.spec.user = parent.user.map(|u| u.to_string());
    let mut objects = export::team_objects(team);
    objects.push(Manifest::AccessGrant(grant_obj));
    objects.push(Manifest::Member(member_obj));
    let text = export::to_yaml(&objects).map_err(|e| {
        Refusal::new(
            400,
            "manifest-rules",
            None,
            format!("the request cannot be written as a manifest: {e}"),
        )
    })?;
    Ok((child, text))
}

/// The manifests judged by every rule a person's are, with the other teams applied: the member
/// they make.
pub(super) fn validated(
    text: String,
    req: &Request,
    host: &Host,
    applied: &[Team],
) -> Result<Member, Refusal> {
    let source = Source {
        path: REQUEST_FILE.into(),
        dir: "/".into(),
        text,
        given: None,
    };
    let desired = crate::manifest::validate(std::slice::from_ref(&source), host, applied)
        .map_err(|problems| refusal_of(&problems, &req.name))?;
    desired
        .teams
        .into_iter()
        .flat_map(|t| t.members)
        .find(|m| m.name == req.name)
        .ok_or_else(|| {
            Refusal::new(
                500,
                "internal",
                None,
                "the request was judged but its member is not in the result",
            )
        })
}

/// Whether the store or the machine remembers something by `name` in `team`, which a new
/// helper of that name would take over: the folder of a member ateam ran (its container
/// record, gate and sockets), a request record not yet forgotten, or a transcript folder (a
/// removed member's, kept: the helper would mount it, and its asker read what it could
/// never read). Looked at with `lstat`: a symlink or a FIFO a member planted there counts.
/// `name` must be a valid name (`judge` said so): it is a path component here.
pub fn remembered(state_dir: &Path, team: &Team, name: &str) -> Result<(), Refusal> {
    let run_dir = layout::team_run_dir(state_dir, &team.name);
    let places = [
        (
            layout::members_dir(&run_dir).join(name),
            "the store remembers a member of this name: its folder",
        ),
        (
            record_path(state_dir, &team.name, name),
            "a helper of this name is still recorded",
        ),
        (
            layout::transcript_dir(&team.session_dir, name),
            "a transcript folder of this name is kept",
        ),
    ];
    for (path, what) in places {
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(Refusal::new(
                409,
                "remembered-name",
                Some("name"),
                format!(
                    "`{name}`: {what} ({}), and a new helper may not take over what another member left; choose another name",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The first problem that concerns the request, as the rule it breaks; else the first.
fn refusal_of(problems: &[Problem], name: &str) -> Refusal {
    let ours = |p: &&Problem| {
        p.object.as_deref() == Some(&format!("Member/{name}"))
            || p.object.as_deref() == Some(&format!("AccessGrant/{}", grant_name(name)))
            || p.message.contains("maxMembers")
    };
    // A problem of another object (the team's own, or the request's effect on another
    // member) names the person's files and paths, which are not the member's to read: the
    // member hears its rule only.
    let (p, own) = match problems.iter().find(ours) {
        Some(p) => (p, true),
        None => (
            problems.first().expect("a refused validation has problems"),
            false,
        ),
    };
    let field = p.field.as_deref().map(|f| {
        f.strip_prefix("spec.")
            .unwrap_or(f)
            .replace("metadata.name", "name")
    });
    let rule = if p.message.contains("maxMembers") {
        "maxMembers"
    } else if p.message.contains("maxDepth") {
        "maxDepth"
    } else if p.message.contains("narrower than its parent") {
        "narrower-than-requester"
    } else if p.message.contains(crate::manifest::validate::ONE_WRITER) {
        "one-writer"
    } else if field.as_deref() == Some("name") {
        "name"
    } else if p.message.contains("defined twice") {
        "unique-name"
    } else if matches!(field.as_deref(), Some(f) if f.starts_with("read") || f.starts_with("write"))
    {
        "grant-paths"
    } else {
        "manifest-rules"
    };
    let status = if rule == "unique-name" { 409 } else { 422 };
    let field = match rule {
        // The team's limits are not a field of the request.
        "maxMembers" => None,
        "narrower-than-requester" => narrower_field(&p.message),
        // Said at the member's grant, which the request writes as `write`.
        "one-writer" => Some("write".into()),
        _ => field,
    };
    if !own {
        return Refusal::new(
            status,
            rule,
            None,
            format!(
                "with `{name}` the team does not validate ({} problem(s), of other objects than this request; ask the person to look with ateam validate)",
                problems.len()
            ),
        );
    }
    Refusal::new(status, rule, field.as_deref(), p.message.clone())
}

/// The request's field named in a "narrower" problem (`...: network.allow[0]); ...`).
fn narrower_field(message: &str) -> Option<String> {
    let after = message.rsplit_once(": ")?.1;
    let field = after.split(')').next()?;
    Some(field.to_string())
}
