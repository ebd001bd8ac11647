//! The manifest format as users write it. These types only describe shape (serde parses them,
//! schemars documents them); `validate` turns them into the trusted model in `crate::model`.
//! Every struct denies unknown fields: a typo must be an error, not a silently ignored line.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::core::container::ContainerRuntime;
use crate::core::quantity;
pub(crate) use crate::model::RestartPolicy;
pub use crate::model::{BackendChoice, PullPolicy};

/// The one `apiVersion` this version of ateam reads and writes.
pub(crate) const API_VERSION: &str = "ateam.dev/v1alpha1";

/// Every object: `apiVersion`, `kind`, `metadata`, `spec`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Object<S> {
    /// Always `ateam.dev/v1alpha1`.
    pub api_version: String,
    /// `Team`, `MainSession`, `Member` or `AccessGrant`.
    pub kind: String,
    /// Its name, labels and annotations.
    pub metadata: Metadata,
    /// The settings of its kind.
    pub spec: S,
}

/// The name and labels of an object.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// A DNS-1123 label: lowercase letters, digits and `-`, at most 63 characters, starting and
    /// ending with a letter or digit.
    pub name: String,
    /// Copied onto the member's container.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Free-form notes; ateam ignores them.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `kind: Team`: the shared settings of a set of sessions and members.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeamSpec {
    /// Container engine; default `auto`.
    #[serde(default)]
    pub backend: BackendChoice,
    /// Default image for members that name none.
    pub image: Option<String>,
    /// When the engine fetches member images: `IfNotPresent` (default), `Never` or `Always`.
    pub image_pull_policy: Option<PullPolicy>,
    /// Most members the team may have; default 10. A larger value must be written here.
    pub max_members: Option<u32>,
    /// Deepest nesting of members; a main session is depth 0, its members depth 1. Default 3.
    pub max_depth: Option<u32>,
    /// Where transcripts live; default `~/.local/share/ateam/<team>`. Relative paths are
    /// relative to the manifest's folder.
    pub session_dir: Option<String>,
    /// Start members even when the engine cannot enforce their memory and pids limits
    /// (rootless Podman on cgroup v1). Default false: such members are refused.
    #[serde(default)]
    pub allow_unenforced_limits: bool,
    /// `UID:GID` its members run as, unless a Member says otherwise. Default: the user who
    /// runs ateam; when that is root, the user who ran sudo (SUDO_UID), else the owner of the
    /// Team manifest's folder unless that is root, else 65534:65534.
    pub user: Option<String>,
    /// Let members run as uid 0 or gid 0. Default false: root in a member owns every
    /// root-owned file in its grants, so `user: 0:0` is refused without this.
    #[serde(default)]
    pub allow_root_user: bool,
    /// Give each member a socket (`/.ateam/helpers.sock`, reached at `ATEAM_HELPERS_URL`)
    /// through which it may ask for helper members, each no wider than itself. Default
    /// false: a request widens the team at run time, so a person opts in.
    #[serde(default)]
    pub helper_requests: bool,
    /// Give every session of the team the team's board as MCP tools (`team_task`,
    /// `team_message`; `team_agent` too with `helperRequests`): members through
    /// `/.ateam/mcp.sock`, main sessions through `ateam mcp`. Default false.
    #[serde(default)]
    pub board: bool,
    /// `runc` (default) or `gvisor`: the OCI runtime its members run under, unless a Member
    /// says otherwise. gVisor puts a user-space kernel between a member and the host's
    /// (docs/gvisor.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<ContainerRuntime>,
}

/// `kind: MainSession`: a session a person drives, on the host, with the person's own access.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MainSessionSpec {
    /// The team; may be left out when the manifests hold exactly one Team.
    pub team: Option<String>,
    /// Working directory; default the manifest's folder.
    pub cwd: Option<String>,
    /// The command and its arguments, for example `[claude]`.
    pub command: Vec<String>,
    /// Extra environment; the session otherwise starts with a clean environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The Member this session was, by its name (the session's own): apply stops that
    /// member, moves its transcript to the session's place and starts the session with it.
    /// Required to turn a Member into a MainSession, because the session runs on the host
    /// with your full access.
    pub promoted_from: Option<String>,
    /// A MainSession removed in the same change whose members this session takes over:
    /// their `parent` may keep naming it, and the session starts with a resume file
    /// (`RESUME.md` in its transcript folder) summarising each member.
    pub takes_over: Option<String>,
}

/// Network access of a grant.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum NetworkSpec {
    /// No network at all (only loopback).
    #[serde(rename = "none")]
    None,
    /// Only these hosts, through ateam's egress proxy: `host`, `host:port`, `*.example.com`
    /// (a tunnel), or `{host: ..., credentials/http/git/upstreamCA: ...}` (a host with rules).
    #[serde(rename = "allow")]
    Allow(Vec<AllowEntry>),
    /// Unrestricted network.
    #[serde(rename = "open")]
    Open,
}

/// One entry of `network.allow`: a host tunnelled as it is, or a host with rules, whose TLS
/// the member's proxy terminates to judge each request and inject a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum AllowEntry {
    /// `host`, `host:port`, `*.domain`, an address: a tunnel, end-to-end TLS.
    Host(String),
    /// A host with rules.
    Rules(HostRules),
}

impl AllowEntry {
    /// The host as written, whichever the form.
    pub fn host(&self) -> &str {
        match self {
            AllowEntry::Host(h) => h,
            AllowEntry::Rules(r) => &r.host,
        }
    }
}

impl From<&str> for AllowEntry {
    fn from(h: &str) -> Self {
        AllowEntry::Host(h.to_string())
    }
}

// By hand rather than `untagged`: a map must be read as `HostRules` so that an unknown key
// or a bad field is reported where it is, not as "matched no variant".
impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AllowEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a host (`api.example.org`) or a mapping with `host` and its rules")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AllowEntry, E> {
                Ok(AllowEntry::Host(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<AllowEntry, A::Error> {
                HostRules::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(AllowEntry::Rules)
            }
        }
        d.deserialize_any(V)
    }
}

/// A host with rules. With neither `http` nor `git` every request is allowed; with either,
/// a request must match one of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostRules {
    /// A name or an address with an optional port (`api.openai.com`,
    /// `host.ateam.internal:8443`); not a wildcard.
    pub host: String,
    /// The credential the proxy puts on every request; the member's variable of that name
    /// holds a placeholder, never the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Box<CredentialsSpec>>,
    /// Requests allowed by method and path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpRuleSpec>,
    /// git over smart HTTP: which repositories, and whether push is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSpec>,
    /// A PEM file of certificates trusted for this upstream besides the host's roots,
    /// relative to the manifest's folder (or the PEM text itself, as `export` writes it).
    #[serde(
        default,
        rename = "upstreamCA",
        skip_serializing_if = "Option::is_none"
    )]
    pub upstream_ca: Option<String>,
}

/// Exactly one of `{header, secret}`, `{bearer}`, `{basic: {username, secret}}` or `{login}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialsSpec {
    /// A header to set (`x-api-key`), with `secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The `secretEnv` whose value goes in `header`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The `secretEnv` sent as `Authorization: Bearer <value>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<String>,
    /// `Authorization: Basic` with this username and a `secretEnv` as the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicSpec>,
    /// The person's subscription login of an agent, `claude` or `codex` (`ateam login
    /// import`): `Authorization: Bearer` with its access token, which ateam refreshes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
}

/// `Authorization: Basic` credentials: a username and the `secretEnv` holding the password.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BasicSpec {
    /// The username, sent as written.
    pub username: String,
    /// The `secretEnv` used as the password.
    pub secret: String,
}

/// Requests allowed by method and path; an empty list allows any method (or path).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRuleSpec {
    /// `GET`, `POST`, ... as sent (methods are case-sensitive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Patterns starting with `/`, matched without the query: `*` is any characters but
    /// `/`, `**` any characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// git over smart HTTP: fetch and clone of `repositories` (any when empty); push only with
/// `push: true`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitSpec {
    /// `owner/name` paths on the host, with or without `.git`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// Default false.
    #[serde(default)]
    pub push: bool,
}

/// `kind: AccessGrant`: the folders and network a member may use.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccessGrantSpec {
    /// The team; may be left out when the manifests hold exactly one Team.
    pub team: Option<String>,
    /// Folders mounted read-only.
    #[serde(default)]
    pub read: Vec<String>,
    /// Folders mounted read-write (write implies read).
    #[serde(default)]
    pub write: Vec<String>,
    /// `none` (default), `open`, or `{allow: [hosts]}`.
    #[serde(default = "network_none")]
    pub network: NetworkSpec,
    /// Uids (numbers) whose listeners on this host the members may reach, besides the
    /// person who applied the team: `host.ateam.internal:PORT` and entries naming a
    /// loopback or host address connect only to a listener one of them owns. Only with
    /// `network: {allow: [...]}`; a member's grant may only name uids its parent's names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_listeners: Vec<u32>,
    /// Destinations never allowed, even where an entry of `network.allow` (a wildcard)
    /// reaches them: `host`, `host:port`, `*.domain`, an address, as allow entries are
    /// written. The proxy refuses them, and they are never suggested nor asked again as
    /// approvals (`ateam approvals deny ID --always` adds to it). Only with an allow list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

fn network_none() -> NetworkSpec {
    NetworkSpec::None
}

/// A memory size (`512Mi`, `2G`, `1073741824`) or a CPU count (`1.5`, `500m`), as written;
/// `quantity` parses it, and the schemas below describe each.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Quantity {
    /// As a string: `512Mi`, `500m`.
    Text(String),
    /// As a bare YAML number: `1073741824`, `1.5`.
    Number(f64),
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a quantity such as 512Mi, 2G or 1.5")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity::Text(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity::Number(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::Number(v as f64))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                Ok(Quantity::Number(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// The schema of a memory quantity (parsed as `Quantity`, checked by `quantity::parse_memory`):
/// editors flag `1gb` as validation does.
struct MemoryQuantity;

impl JsonSchema for MemoryQuantity {
    fn schema_name() -> Cow<'static, str> {
        "MemoryQuantity".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Bytes, or a number with a Kubernetes suffix: Ki Mi Gi Ti Pi Ei (powers of 1024) or k M G T P E (powers of 1000), case-sensitive: `512Mi`, `2Gi`, `1G`.",
            "anyOf": [
                { "type": "string", "pattern": quantity::MEMORY_PATTERN },
                { "type": "integer", "minimum": 1 }
            ]
        })
    }
}

/// The schema of a CPU quantity: `1.5`, `2`, `500m`.
struct CpuQuantity;

impl JsonSchema for CpuQuantity {
    fn schema_name() -> Cow<'static, str> {
        "CpuQuantity".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "CPUs (`1.5`, `2`) or thousandths of one (`500m`).",
            "anyOf": [
                { "type": "string", "pattern": quantity::CPUS_PATTERN },
                { "type": "number", "exclusiveMinimum": 0 }
            ]
        })
    }
}

/// Limits of a member's container.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    /// Memory cap (also the memory+swap cap); default `1Gi`.
    #[schemars(with = "Option<MemoryQuantity>")]
    pub memory: Option<Quantity>,
    /// Most processes; default 512.
    pub pids: Option<u32>,
    /// CPU share (`1.5`, `500m`); default unlimited.
    #[schemars(with = "Option<CpuQuantity>")]
    pub cpus: Option<Quantity>,
}

/// `kind: Member`: a helper agent in a locked-down container.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberSpec {
    /// The team; may be left out when the manifests hold exactly one Team.
    pub team: Option<String>,
    /// The MainSession or Member this one works for (`lead`, or `MainSession/lead` when a main
    /// session and a member share the name).
    pub parent: String,
    /// The AccessGrant it runs with; without one it gets no folders and no network.
    pub access: Option<String>,
    /// Image: a name, or what the repository defines (`{devcontainer: ...}`, `{build:
    /// ...}`), which ateam builds from local images; default the Team's `image`.
    pub image: Option<ImageSpec>,
    /// `IfNotPresent`, `Never` or `Always`; default the Team's, else `IfNotPresent`.
    pub image_pull_policy: Option<PullPolicy>,
    /// Command and arguments; default the image's own.
    pub command: Option<Vec<String>>,
    /// Working directory inside its grants; default the first write grant, else the first read
    /// grant, else its transcript folder.
    pub cwd: Option<String>,
    /// Plain environment variables (visible in the engine's configuration: no secrets here).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of variables whose values are taken from the environment of `ateam apply` and
    /// handed over in a private file, never in the container's configuration.
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// Memory, pids and CPU limits.
    #[serde(default)]
    pub resources: Resources,
    /// `Never`, `OnFailure` (default) or `Always`; ateam restarts, not the engine.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// `UID:GID` it runs as; default the Team's `user`. On rootless Podman members always run
    /// as you.
    pub user: Option<String>,
    /// Let other members write the folders it writes (or folders inside or around them).
    /// Default false: a write grant that overlaps another member's is refused unless both
    /// members set this, so that two agents do not edit one tree unawares.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share_writes: bool,
    /// A repository of its own to work in, on a branch of its own (docs/workspaces.md).
    pub workspace: Option<Box<WorkspaceSpec>>,
    /// Claude Code or Codex CLI and its first task: ateam fills in the command, flags and
    /// environment (docs/agents.md); not with `command`.
    pub agent: Option<Box<AgentSpec>>,
    /// Copy its write grants before every start, up to this many bytes in all (`256Mi`); a
    /// start whose folders hold more is held. Default: no copy (docs/workspaces.md).
    #[schemars(with = "Option<MemoryQuantity>")]
    pub snapshot_writes: Option<Quantity>,
    /// `runc` or `gvisor`; default the Team's `runtime`, else `runc` (docs/gvisor.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<ContainerRuntime>,
}

/// A member's image: a name the engine has (or pulls), or the one a repository defines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ImageSpec {
    /// `name:tag`.
    Name(String),
    /// `{devcontainer: path}` or `{build: {...}}`.
    Defined(Box<ImageDefinition>),
}

// By hand rather than `untagged`, as `AllowEntry`: a map is read as `ImageDefinition`, so an
// unknown key is reported where it is.
impl<'de> Deserialize<'de> for ImageSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ImageSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an image (`name:tag`), `{devcontainer: path}` or `{build: {context, dockerfile, args}}`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ImageSpec, E> {
                Ok(ImageSpec::Name(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ImageSpec, A::Error> {
                ImageDefinition::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|d| ImageSpec::Defined(Box::new(d)))
            }
        }
        d.deserialize_any(V)
    }
}

/// The image a repository defines, which ateam builds with the engine from local images
/// only, with no network, and tags by a hash of what it reads. One of the two.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageDefinition {
    /// A `devcontainer.json` (relative to the manifest): its `image`, or the Dockerfile of its
    /// `build` (`dockerfile`, `context`, `args`, `target`), which must lie in its repository
    /// (the folder holding `.devcontainer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<String>,
    /// A Dockerfile and its context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildSpec>,
}

/// A Dockerfile build.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildSpec {
    /// The context folder, relative to the manifest; default the manifest's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The Dockerfile, relative to the context and inside it; default `Dockerfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dockerfile: Option<String>,
    /// Build arguments (`ARG`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// The stage to build; default the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A coding agent as a member runs it (`core::agents::expand`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentSpec {
    /// `claude` (Claude Code) or `codex` (Codex CLI).
    pub name: String,
    /// Its first task: the prompt it starts with (`ateam task` gives the next ones). An
    /// interactive agent may start without one.
    #[serde(default)]
    pub task: String,
    /// Runs the agent's own terminal UI, which the person joins with `ateam attach` (type,
    /// read, detach; it keeps running), instead of one task in print mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// The model, if not the agent's default.
    pub model: Option<String>,
    /// The model's base URL, if not the vendor's (a local server, a gateway); `agent:` adds
    /// its host to the member's allow list, with the key or login injected there.
    pub model_url: Option<String>,
    /// Flags of the agent's own, put before the task.
    #[serde(default)]
    pub args: Vec<String>,
    /// The version of its native build that ateam brings into the member (from the npm
    /// registry); default the one ateam pins (claude 2.1.332, codex 0.171.0).
    pub version: Option<String>,
    /// The SHA-256 of that version's npm tarball (`sha256sum` of what `npm pack` writes):
    /// needed for a version ateam does not pin, checked before the build is used.
    pub sha256: Option<String>,
    /// `subscription`: the person's Claude or ChatGPT login (`ateam login import`), which the
    /// proxy injects (`credentials: {login: ...}` on the model host) and ateam refreshes; the
    /// member holds a placeholder. Default `apiKey`: the key in `secretEnv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// PEM certificates (a file, relative to the manifest, or the PEM text) its model host is
    /// trusted by besides the machine's roots: a local server's or a gateway's own CA. As
    /// `upstreamCA` of the host `agent:` adds to the member's allow list.
    #[serde(default, rename = "modelCA", skip_serializing_if = "Option::is_none")]
    pub model_ca: Option<String>,
}

/// A writer's workspace: a repository of the member's own made from the person's `repo`, its
/// branch at `base`; the member's working folder unless `cwd` says otherwise.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// The person's repository (its top folder; `~` and relative paths as for grants).
    pub repo: String,
    /// Where its branch starts: a branch, tag or commit of `repo`. Default `HEAD`.
    pub base: Option<String>,
    /// Its branch. Default `ateam/<team>/<member>`.
    pub branch: Option<String>,
}

/// The four kinds, as one JSON Schema for editors.
pub fn json_schema() -> serde_json::Value {
    let kinds = [
        ("Team", schemars::schema_for!(Object<TeamSpec>)),
        (
            "MainSession",
            schemars::schema_for!(Object<MainSessionSpec>),
        ),
        (
            "AccessGrant",
            schemars::schema_for!(Object<AccessGrantSpec>),
        ),
        ("Member", schemars::schema_for!(Object<MemberSpec>)),
    ];
    let mut defs = serde_json::Map::new();
    let mut one_of = Vec::new();
    for (kind, schema) in kinds {
        let mut v = schema.to_value();
        if let Some(serde_json::Value::Object(d)) =
            v.as_object_mut().and_then(|o| o.remove("$defs"))
        {
            defs.extend(d);
        }
        let obj = v
            .as_object_mut()
            .expect("a schema of a struct is an object");
        obj.remove("$schema");
        obj.insert("title".into(), kind.into());
        let props = obj["properties"]
            .as_object_mut()
            .expect("Object has properties");
        props.insert("kind".into(), serde_json::json!({ "const": kind }));
        props.insert(
            "apiVersion".into(),
            serde_json::json!({ "const": API_VERSION }),
        );
        one_of.push(serde_json::json!({
            "if": { "properties": { "kind": { "const": kind } }, "required": ["kind"] },
            "then": v,
        }));
    }
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ateam.dev/schemas/v1alpha1/ateam.schema.json",
        "title": "ateam manifest",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": { "kind": { "enum": ["Team", "MainSession", "AccessGrant", "Member"] } },
        "allOf": one_of,
        "$defs": defs,
    })
}
