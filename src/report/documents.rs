//! The documents `status -o json|yaml` and `diff -o json|yaml` print (docs/output.md), and
//! their JSON Schemas (kept in `manifests/`, checked by tests against real output).
//!
//! Every document is one object with `apiVersion` and `kind`, so that a reader can tell
//! what it holds and which version of the format; an empty result is the same object with
//! empty lists. Keys are camelCase; enums are plain strings and data is plain objects (no YAML
//! tags); times are RFC 3339 in UTC beside any relative age.

use std::path::PathBuf;
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{TeamStatus, action_text, finding_text};
use crate::core::container::rfc3339;
use crate::plan::{Action, ContainerOp, ContainerRef, Drift, Finding, Plan};

/// The `apiVersion` of every document: the manifests' own.
pub const API_VERSION: &str = "ateam.dev/v1alpha1";

/// `status -o json|yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusDocument {
    /// Always `ateam.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Status`.
    pub kind: String,
    /// When ateam looked (RFC 3339).
    pub observed_at: String,
    /// Whether anything differs from the manifests (`status --exit-code` then exits 1).
    pub drifted: bool,
    /// One entry per team, by name; empty when nothing is applied.
    pub teams: Vec<TeamStatus>,
    /// The controller of this state folder; none if none ever ran.
    pub controller: Option<ControllerStatus>,
}

impl StatusDocument {
    /// What a change of status is for `status -w`: the document without what moves at every
    /// look (times, ages, usage figures, transcript activity, the last minute's counts, the
    /// controller's last reconcile), as text.
    pub fn fingerprint(&self) -> String {
        // A member at work writes its transcript all the time: that is `top`'s to show.
        const MOVING: [&str; 8] = [
            "observedAt",
            "ageSecs",
            "lastActivitySecs",
            "lastActivityAt",
            "transcriptBytes",
            "usage",
            "lastMinute",
            "lastReconcile",
        ];
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    for k in MOVING {
                        map.remove(k);
                    }
                    map.values_mut().for_each(strip);
                }
                serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
                serde_json::Value::Null
                | serde_json::Value::Bool(_)
                | serde_json::Value::Number(_)
                | serde_json::Value::String(_) => {}
            }
        }
        let mut v = serde_json::to_value(self).unwrap_or_default();
        strip(&mut v);
        v.to_string()
    }

    /// The document of `teams` and the controller, as looked at `now`.
    pub fn new(
        teams: Vec<TeamStatus>,
        controller: Option<ControllerStatus>,
        now: SystemTime,
    ) -> StatusDocument {
        StatusDocument {
            api_version: API_VERSION.into(),
            kind: "Status".into(),
            observed_at: rfc3339(now),
            drifted: teams.iter().any(|t| t.drifted),
            teams,
            controller,
        }
    }
}

/// What the controller of the state folder last said (its record), and whether it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerStatus {
    /// It holds the state folder's controller lock now.
    pub running: bool,
    /// Its process id.
    pub pid: u32,
    /// When it started (RFC 3339).
    pub since: String,
    /// Its last reconcile of a team, if any yet.
    pub last_reconcile: Option<LastReconcile>,
    /// Team -> its last reconcile error, while it lasts.
    pub errors: std::collections::BTreeMap<String, String>,
    /// The problems of manifests it refused (the last good state stays).
    pub manifest_errors: Vec<String>,
    /// `team/member` -> when it restarts a crash-looping member (RFC 3339). Not in the
    /// document (each member's row says its own `nextRestart`): the text's controller line
    /// lists them all.
    #[serde(skip)]
    pub restarts_due: std::collections::BTreeMap<String, String>,
    /// Team -> when the person deleted it (RFC 3339): the controller's manifests still name
    /// it, and it leaves the team deleted until `ateam apply` of it.
    pub left_deleted: std::collections::BTreeMap<String, String>,
}

/// The controller's last reconcile of a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LastReconcile {
    /// RFC 3339.
    pub at: String,
    /// The team it reconciled.
    pub team: String,
    /// It succeeded (the error is in `errors`).
    pub ok: bool,
}

/// `diff -o json|yaml`: what apply would change, and what it would leave alone.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiffDocument {
    /// Always `ateam.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Diff`.
    pub kind: String,
    /// Whether the machine differs from the manifests: any change, or any finding with
    /// `drift: true` (`diff` then exits 1). The definition `status` uses too.
    pub drifted: bool,
    /// What apply would do, in order (per member in this order; members side by side).
    pub changes: Vec<Change>,
    /// What apply leaves alone and a person should know.
    pub findings: Vec<DiffFinding>,
}

/// One change apply would make.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Change {
    /// Team name.
    pub team: String,
    /// The member (or main session) it is about.
    pub name: String,
    /// What apply does, as a token: `makeTranscriptDir`, `startEgressProxy`, `startSession`,
    /// `create`, `recreate`, `start`, `removeOrphan`, `removeDuplicate`, `finishReplacement`,
    /// `restoreName`, `unpause`, `removeStranger` (the names apply's log uses).
    pub action: String,
    /// Why, as a token: `missing`, `notRunning`, `spec`, `specHash`, `policy`, `dead`,
    /// `neverStarted`, `restart`, `notReleased`, `noManifestWantsIt`, `duplicate`,
    /// `notMadeByAteam`, `interruptedReplacement`, `renamed`, `paused`.
    pub reason: String,
    /// The change in words, as the text diff says it.
    pub description: String,
    /// The container it acts on, when one exists.
    pub container: Option<ContainerId>,
    /// For `recreate` because the manifest changed: each field, from and to.
    pub field_changes: Vec<FieldChange>,
    /// For `create` and `recreate`: what the container will run (an `agent:` shows here what
    /// it expands to).
    #[serde(default)]
    pub runs: Option<Runs>,
}

/// What a member's container runs: its image, its command (`None`: the image's own) and its
/// plain environment (secrets are never in it).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Runs {
    pub image: String,
    /// Command and arguments.
    pub command: Option<Vec<String>>,
    /// Its environment, ateam's variables included.
    pub env: std::collections::BTreeMap<String, String>,
    /// The host folders it gets: its grants, workspace, transcript and control folders, and
    /// its agent's build (read-only at `/opt/ateam-agent`).
    #[serde(default)]
    pub mounts: Vec<RunsMount>,
}

/// A host folder a member's container gets.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunsMount {
    /// The host folder.
    pub source: PathBuf,
    /// Where the member sees it.
    pub target: PathBuf,
    /// The member cannot write it.
    pub read_only: bool,
}

/// A container, as the documents name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerId {
    /// The engine's id.
    pub id: String,
    /// Its name, without a leading `/`.
    pub name: String,
}

/// A field of a member's container spec that changes.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldChange {
    /// The field of the member's container spec, dotted (`env.LOG`, `mounts`).
    pub field: String,
    /// The value now (`null`: not set).
    pub from: Value,
    /// The value apply sets (`null`: not set).
    pub to: Value,
}

/// Something apply leaves alone.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiffFinding {
    /// Team name.
    pub team: String,
    /// The member it is about.
    pub name: String,
    /// `orphan`, `conflict`, `stranger`, `finished`, `retainedTranscript`.
    pub finding: String,
    /// It is drift (orphan, conflict, stranger), though apply leaves it.
    pub drift: bool,
    /// In words; none for a finished member.
    pub description: Option<String>,
    /// The container, when one exists.
    pub container: Option<ContainerId>,
    /// A finished member's exit code.
    pub exit_code: Option<i64>,
    /// A kept transcript's folder.
    pub path: Option<PathBuf>,
}

fn container_id(c: &ContainerRef) -> ContainerId {
    ContainerId {
        id: c.id.clone(),
        name: c.name.clone(),
    }
}

/// The plan as a document.
pub fn diff_document(plan: &Plan) -> DiffDocument {
    let changes = plan
        .actions
        .iter()
        .map(|a| {
            let (team, name) = a.subject();
            Change {
                team: team.into(),
                name: name.into(),
                action: a.name().into(),
                reason: a.reason().into(),
                description: action_text(a),
                container: a.container().map(container_id),
                field_changes: field_changes(a),
                runs: runs(a),
            }
        })
        .collect();
    let findings = plan
        .findings
        .iter()
        .map(|f| {
            let (team, name) = f.subject();
            let (container, exit_code, path) = match f {
                Finding::Orphan { container, .. }
                | Finding::Conflict { container, .. }
                | Finding::Stranger { container, .. } => {
                    (Some(container_id(container)), None, None)
                }
                Finding::Finished { code, .. } => (None, Some(*code), None),
                Finding::OrphanSession { .. } | Finding::Suspended { .. } => (None, None, None),
                Finding::RetainedTranscript { path, .. } => (None, None, Some(path.clone())),
            };
            DiffFinding {
                team: team.into(),
                name: name.into(),
                finding: f.name().into(),
                drift: f.is_drift(),
                description: finding_text(f),
                container,
                exit_code,
                path,
            }
        })
        .collect();
    DiffDocument {
        api_version: API_VERSION.into(),
        kind: "Diff".into(),
        drifted: plan.drifted(),
        changes,
        findings,
    }
}

/// What a create or recreate will run.
fn runs(a: &Action) -> Option<Runs> {
    let member = a.made()?;
    Some(Runs {
        image: member.spec.image.clone(),
        command: member.spec.command.clone(),
        env: member.spec.env.clone(),
        mounts: member
            .spec
            .mounts
            .iter()
            .map(|m| RunsMount {
                source: m.source.clone(),
                target: m.target.clone(),
                read_only: m.read_only,
            })
            .collect(),
    })
}

/// The fields a recreate changes because the manifest changed; none for any other action
/// or reason (the hash alone, a policy violation, a dead container say no field).
fn field_changes(a: &Action) -> Vec<FieldChange> {
    let Some(ContainerOp::Recreate { reason, .. }) = a.container_op() else {
        return vec![];
    };
    match reason {
        Drift::Spec { changes } => changes
            .iter()
            .map(|c| FieldChange {
                field: c.field.clone(),
                from: c.from.clone(),
                to: c.to.clone(),
            })
            .collect(),
        Drift::SpecHash { .. } | Drift::Policy { .. } | Drift::Dead | Drift::Asked => vec![],
    }
}

/// The JSON Schema of `StatusDocument` (`manifests/status.schema.json`).
pub fn status_schema() -> Value {
    schema::<StatusDocument>("Status", "ateam status -o json|yaml")
}

/// The JSON Schema of `DiffDocument` (`manifests/diff.schema.json`).
pub fn diff_schema() -> Value {
    schema::<DiffDocument>("Diff", "ateam diff -o json|yaml")
}

/// The schema of what `T` serializes to (every key present, even when null), with
/// `apiVersion` and `kind` fixed.
fn schema<T: JsonSchema>(kind: &str, title: &str) -> Value {
    let mut v = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    let obj = v
        .as_object_mut()
        .expect("the schema of a struct is an object");
    obj.insert(
        "$id".into(),
        format!(
            "https://ateam.dev/schemas/v1alpha1/{}.schema.json",
            kind.to_lowercase()
        )
        .into(),
    );
    obj.insert("title".into(), title.into());
    let props = obj["properties"]
        .as_object_mut()
        .expect("a document has properties");
    props.insert(
        "apiVersion".into(),
        serde_json::json!({ "const": API_VERSION }),
    );
    props.insert("kind".into(), serde_json::json!({ "const": kind }));
    v
}
