//! What a command (or the controller) asks for, as library calls: read and judge manifests,
//! find the engine, look and plan (`App::look`), apply and wait (`apply`), delete (`delete`),
//! and the login keeper (`login_keeper`) apply starts while a member uses a login.
//! The binary's handlers only parse arguments, call these and render what comes back; a
//! long-running controller calls the very same functions.

pub mod apply;
pub mod approvals;
pub mod delete;
pub mod doctor;
pub mod fork;
pub mod login_keeper;
pub mod restart;
pub mod status;
pub mod suspend;
pub mod team_tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::FutureExt;

use crate::backend::connect::{self, Candidate, Engine, Env};
use crate::backend::{Backend, BackendError, EngineInfo};
use crate::files::Owner;
use crate::host::Host;
use crate::manifest::{self, ManifestError, Problem, Source};
use crate::model::{BackendChoice, Model, Team};
use crate::observe::observe_listed;
use crate::plan::spec::{DesiredState, desired_state};
use crate::plan::{Observed, Plan, PlanOptions, plan};
use crate::runtime::Runtime;
use crate::store::{EngineRecord, Store, StoreError};

/// Why a request could not be carried out (drift is not an error: it is in the plan).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum AppError {
    /// The manifests could not be read, or are invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The state folder could not be read or written.
    #[error("the state folder: {0}")]
    Store(#[from] StoreError),
    /// The engine could not be reached, or refused a call.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The engine a team was applied on does not answer.
    #[error(
        "team `{team}` was applied on {engine} at {uri}; pass --backend to use another engine: {source}"
    )]
    RecordedEngine {
        team: String,
        /// The engine it was applied on.
        engine: Engine,
        /// Where that engine was.
        uri: String,
        /// Why it does not answer.
        #[source]
        source: Box<BackendError>,
    },
    /// The teams of one command were applied on (or ask for) different engines.
    #[error("these teams ask for different backends; apply them separately or pass --backend")]
    MixedBackends,
    /// A command names a team that this state folder has no record of.
    #[error("team `{team}` has not been applied with this state folder ({})", .state_dir.display())]
    NotApplied {
        team: String,
        /// The state folder.
        state_dir: PathBuf,
    },
    /// The manifests leave a team without a main session while members ateam made for it
    /// (no longer in the manifests) still run.
    #[error(
        "team `{team}` would have no MainSession while its members {} still run: keep a MainSession (a new one can take over with `takesOver: <old>`), or remove them with `apply --prune` or `ateam delete --team {team}`",
        .members.join(", ")
    )]
    NoMainSession {
        team: String,
        /// The members that still run.
        members: Vec<String>,
    },
    /// A file of ateam's could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Manifests as read, with the problems of reading them (reported with the rules' problems).
/// Equal when every file read the same text from the same place.
#[derive(PartialEq, Eq)]
pub struct Manifests {
    sources: Vec<Source>,
    unreadable: Vec<Problem>,
    /// Every `-f` path but `-`: no member may write there.
    given: Vec<PathBuf>,
}

impl Manifests {
    /// Reads the manifests `paths` name (stdin once, for `-`).
    pub fn read(paths: &[PathBuf]) -> Result<Manifests, ManifestError> {
        let (sources, unreadable) = manifest::read_sources(paths, &mut std::io::stdin());
        if sources.is_empty() && unreadable.is_empty() {
            return Err(ManifestError::Empty(paths.to_vec()));
        }
        let mut given: Vec<PathBuf> = Vec::new();
        for g in paths.iter().filter_map(|p| manifest::load::given_path(p)) {
            if !given.contains(&g) {
                given.push(g);
            }
        }
        Ok(Manifests {
            sources,
            unreadable,
            given,
        })
    }

    /// These manifests with the file `path` reading `text` instead (`approvals`: judged
    /// before the edit is written).
    pub fn replaced(mut self, path: &Path, text: &str) -> Manifests {
        for s in self.sources.iter_mut().filter(|s| s.path == path) {
            s.text = text.to_string();
        }
        self
    }

    /// Every rule, judged on this host and against the teams `applied` before.
    pub fn validate(&self, host: &Host, applied: &[Team]) -> Result<Model, ManifestError> {
        let mut problems = self.unreadable.clone();
        match manifest::validate::validate_given(&self.sources, &self.given, host, applied) {
            Ok(d) if problems.is_empty() => Ok(d),
            Ok(_) => Err(ManifestError::Invalid(problems)),
            Err(mut more) => {
                problems.append(&mut more);
                Err(ManifestError::Invalid(problems))
            }
        }
    }
}

/// One host, one store, and how to find the engine.
pub struct App {
    /// What ateam found out about this host (its user, folders, engine sockets).
    pub host: Host,
    /// The state folder: what was applied, and the record of what ateam made.
    pub store: Store,
    /// Who ateam's own files belong to: the user running it.
    pub owner: Owner,
    /// `--backend`, when given: it wins over the engine recorded for a team.
    backend: Option<BackendChoice>,
    /// The transcript folders' last walks, shared by this app's looks: a watch (`status -w`,
    /// `top`, the controller's metrics) walks a folder only when due (`observe::transcripts`).
    pub transcripts: Arc<crate::observe::TranscriptCache>,
}

/// The list of a look, asked before the manifests are judged (`App::begin_look`), with the
/// engine that answered it; cancelled if the look never takes it.
pub struct EarlyList(tokio::task::JoinHandle<Option<(EngineOf, ListResult)>>);

type EngineOf = (crate::backend::EngineKind, String);
type ListResult = Result<Vec<crate::backend::Summary>, BackendError>;

impl EarlyList {
    /// The list, if `backend` is the engine that answered it (another's is of no use).
    async fn take(mut self, backend: &dyn Backend) -> Option<ListResult> {
        let (engine, listed) = (&mut self.0).await.ok()??;
        let same = engine == (backend.kind(), backend.endpoint().to_string());
        tracing::debug!(same, "the list asked ahead");
        same.then_some(listed)
    }
}

impl Drop for EarlyList {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one look at the machine found, and the plan that would make it match.
pub struct Look {
    /// The engine looked at.
    pub backend: Arc<dyn Backend>,
    /// What the engine said about itself.
    pub info: EngineInfo,
    /// What the manifests want, as containers.
    pub desired: DesiredState,
    /// What is there.
    pub observed: Observed,
    /// What would make it match.
    pub plan: Plan,
    /// The teams looked at, with the helpers their members asked for (`requests::merge`).
    pub model: Model,
    /// Requested members no longer wanted: the plan removes their containers, and a
    /// converge forgets their records.
    pub dropped: Vec<crate::requests::Dropped>,
}

impl App {
    /// The app for the user running ateam; `state_dir` and `backend` are `--state-dir` and
    /// `--backend`, when given.
    pub fn new(state_dir: Option<PathBuf>, backend: Option<BackendChoice>) -> App {
        let host = Host::detect(state_dir);
        let owner = Owner {
            uid: host.uid,
            gid: host.gid,
        };
        let store = Store::new(host.state_dir.clone(), owner);
        App {
            host,
            store,
            owner,
            backend,
            transcripts: Arc::default(),
        }
    }

    /// Validates `manifests` against the store as it is now (apply calls this again once it
    /// holds the lock: another apply may have stored a team meanwhile).
    pub fn judge(&self, manifests: &Manifests) -> Result<Model, AppError> {
        self.judge_against(manifests, &self.store.teams()?)
    }

    /// `judge`, against the teams `applied` read from the store.
    pub(crate) fn judge_against(
        &self,
        manifests: &Manifests,
        applied: &[crate::model::Team],
    ) -> Result<Model, AppError> {
        self.host.engine_dirs.prefetch();
        Ok(manifests.validate(&self.host, applied)?)
    }

    /// Reads and judges manifests.
    pub fn load(&self, paths: &[PathBuf]) -> Result<Model, AppError> {
        self.judge(&Manifests::read(paths)?)
    }

    /// The teams last applied, optionally only `name`.
    pub fn applied(&self, name: Option<&str>) -> Result<Model, AppError> {
        let mut teams = self.store.teams()?;
        if let Some(n) = name {
            teams.retain(|t| t.name == n);
            if teams.is_empty() {
                return Err(AppError::NotApplied {
                    team: n.to_string(),
                    state_dir: self.host.state_dir.clone(),
                });
            }
        }
        Ok(Model { teams })
    }

    /// `applied`, with the helpers its members asked for (`requests::merge`): every member
    /// that is wanted now, for the commands that find one by name (exec, logs, attach).
    pub fn applied_with_requests(&self, name: Option<&str>) -> Result<Model, AppError> {
        Ok(crate::requests::merge(&self.applied(name)?, &self.host.state_dir).0)
    }

    /// `applied_with_requests`, and the teams deleted without `--purge` (their record of
    /// events and egress stays until then): for the commands that read that record.
    pub fn applied_or_deleted(&self, name: Option<&str>) -> Result<Model, AppError> {
        let mut d = match self.applied_with_requests(name) {
            Ok(d) => d,
            Err(AppError::NotApplied { .. }) => Model { teams: vec![] },
            Err(e) => return Err(e),
        };
        let names = match name {
            Some(n) => vec![n.to_string()],
            None => self.store.team_names()?,
        };
        for n in names {
            if !d.teams.iter().any(|t| t.name == n)
                && let Some(t) = self.store.deleted(&n)?
            {
                d.teams.push(t);
            }
        }
        match name {
            Some(n) if d.teams.is_empty() => Err(AppError::NotApplied {
                team: n.to_string(),
                state_dir: self.host.state_dir.clone(),
            }),
            _ => Ok(d),
        }
    }

    /// `desired`, as containers and sessions on this host.
    pub fn desired_state(&self, desired: &Model) -> DesiredState {
        desired_state(desired, &self.host)
    }

    /// The engine: `--backend`; else the one these teams were applied on; else the teams'
    /// `backend` (which must agree); else the first that answers.
    pub async fn connect(
        &self,
        teams: &[Team],
    ) -> Result<(Arc<dyn Backend>, EngineInfo), AppError> {
        if self.backend.is_none() {
            for team in teams {
                let Some(r) = self.store.engine(&team.name)? else {
                    continue;
                };
                let c = Candidate {
                    engine: r.engine,
                    uri: r.uri.clone(),
                    origin: "applied state",
                };
                return connect::connect_to_with(&c, Some(&self.engine_memo()))
                    .await
                    .map_err(|source| AppError::RecordedEngine {
                        team: team.name.clone(),
                        engine: r.engine,
                        uri: r.uri,
                        source: Box::new(source),
                    });
            }
        }
        let choice = match self.backend {
            Some(c) => c,
            None => {
                let mut choices: Vec<BackendChoice> = teams.iter().map(|t| t.backend).collect();
                choices.dedup();
                match choices[..] {
                    [] => BackendChoice::Auto,
                    [one] => one,
                    _ => return Err(AppError::MixedBackends),
                }
            }
        };
        let env = Env::from_process(self.host.uid);
        Ok(connect::connect(choice, &env, Some(&self.engine_memo())).await?)
    }

    /// Where engines' answers about themselves are kept between runs.
    fn engine_memo(&self) -> connect::Memo {
        connect::Memo {
            path: crate::core::layout::engine_memo_path(&self.host.state_dir),
            owner: self.owner,
        }
    }

    /// Finds the engine, looks at the machine for `desired` (and the helpers its members
    /// asked for) and plans. The helpers no longer wanted join `opts.dropped`: the plan
    /// removes them, and is final as returned.
    pub async fn look(&self, desired: &Model, opts: PlanOptions) -> Result<Look, AppError> {
        self.look_from(desired, opts, None).await
    }

    /// Asks the engine the store's teams were applied on (or `--backend`'s) for the list of
    /// this store's containers, before the manifests are judged: a no-op apply's look waits
    /// on nothing else. The connect and the list run in a task of their own, so that a slow
    /// engine never delays what the judging says. None when no engine is known yet.
    pub fn begin_look(&self) -> Option<EarlyList> {
        let memo = self.engine_memo();
        let ours = crate::observe::ours(&crate::core::layout::store_id(&self.host.state_dir));
        let target = match self.backend {
            Some(choice) => Err((choice, Env::from_process(self.host.uid))),
            None => {
                // Only which engine: the teams' manifests are read by the caller, meanwhile.
                let names = self.store.team_names().ok()?;
                let r = names
                    .iter()
                    .find_map(|n| self.store.engine(n).ok().flatten())?;
                Ok(Candidate {
                    engine: r.engine,
                    uri: r.uri,
                    origin: "applied state",
                })
            }
        };
        let task = tokio::spawn(async move {
            let (backend, _) = match &target {
                Ok(c) => connect::connect_to_with(c, Some(&memo)).await.ok()?,
                Err((choice, env)) => connect::connect(*choice, env, Some(&memo)).await.ok()?,
            };
            let engine = (backend.kind(), backend.endpoint().to_string());
            Some((engine, backend.list(&ours).await))
        });
        Some(EarlyList(task))
    }

    /// `look`, with the list `early` asked ahead, used when the teams connect to that very
    /// engine.
    pub(crate) async fn look_from(
        &self,
        desired: &Model,
        mut opts: PlanOptions,
        early: Option<EarlyList>,
    ) -> Result<Look, AppError> {
        let (backend, info) = self.connect(&desired.teams).await?;
        let ahead = early.map(|e| e.take(backend.as_ref()).boxed());
        // Helpers members asked for are desired as much as what the manifests name.
        let (model, mut dropped) = crate::requests::merge(desired, &self.host.state_dir);
        // One member's look wants that member alone: the planner's part for it reads no other.
        let mut ds = crate::plan::spec::desired_state_of(&model, &self.host, opts.only.as_deref());
        // Members the person suspended are desired down.
        suspend::mark(&mut ds, &self.host.state_dir);
        if let Some(only) = &opts.only {
            dropped.retain(|d| d.member == *only);
        }
        let observed =
            observe_listed(backend.as_ref(), &info, &ds, ahead, opts.only.as_deref()).await?;
        opts.dropped.extend(dropped.iter().cloned());
        let plan = plan(&ds, &observed, opts);
        Ok(Look {
            backend,
            info,
            desired: ds,
            observed,
            plan,
            model,
            dropped,
        })
    }

    /// Records the engine `teams` were applied on.
    pub(crate) fn remember_engine(
        &self,
        teams: &[Team],
        backend: &dyn Backend,
    ) -> Result<(), AppError> {
        for t in teams {
            let record = EngineRecord {
                engine: backend.kind().engine(),
                uri: backend.endpoint().to_string(),
            };
            self.store.save_engine(&t.name, &record)?;
        }
        Ok(())
    }

    /// The workspace of member `m` of team `t`, if it has one, as ateam works on it (git run
    /// as `workspace_owner`).
    pub fn workspace_place(
        &self,
        t: &crate::model::Team,
        m: &crate::model::Member,
    ) -> Option<crate::workspace::Place> {
        let ws = m.workspace.as_ref()?;
        let member_owner = self.workspace_owner(m);
        Some(crate::workspace::Place::new(
            &t.name,
            &m.name,
            ws,
            member_owner,
            self.owner,
        ))
    }

    /// The copy snapshots of member `m` of team `t`, if it takes them (`snapshotWrites`).
    pub fn copy_place(
        &self,
        t: &crate::model::Team,
        m: &crate::model::Member,
    ) -> Option<crate::workspace::copy::CopyPlace> {
        let max_bytes = m.snapshot_writes?;
        let member_owner = self.workspace_owner(m);
        Some(crate::workspace::copy::CopyPlace {
            member: m.name.clone(),
            folders: m.access.write.clone(),
            store: crate::core::layout::copy_snapshots_dir(&t.session_dir, &m.name),
            max_bytes,
            bound: "snapshotWrites",
            member_owner,
            ateam_owner: self.owner,
        })
    }

    /// Whom git and copies run as for member `m`: its uid where ateam can act as it (root),
    /// else the caller (as members run on rootless Podman).
    pub(crate) fn workspace_owner(&self, m: &crate::model::Member) -> Owner {
        if rustix::process::geteuid().is_root() {
            let u = m.user.unwrap_or_else(|| self.host.default_member_user());
            Owner {
                uid: u.uid,
                gid: u.gid,
            }
        } else {
            self.owner
        }
    }

    /// What an apply of `look`'s plan would refuse before any change, as far as it can be
    /// told without changing anything (`Executor::preflight_offline`): each refusal of each
    /// member, with its fix.
    pub fn would_refuse(
        &self,
        look: &Look,
        secret: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Vec<crate::execute::Failure> {
        let rt = self.runtime(look);
        let exec = crate::execute::Executor {
            rt: &rt,
            concurrency: 1,
            secret,
            progress: &crate::execute::Quiet,
        };
        exec.preflight_offline(&look.plan, &look.desired.members)
    }

    /// Stops the live containers of `member` of team `t` (`found`, on `backend`) through the
    /// executor, for `ateam rollback`: logged and an event each. Returns the failures.
    pub async fn stop_member(
        &self,
        t: &Team,
        member: &str,
        (backend, info): (Arc<dyn Backend>, EngineInfo),
        found: &[crate::backend::Summary],
    ) -> Vec<crate::execute::Failure> {
        let rt = Runtime {
            backend,
            info,
            store: crate::core::layout::store_id(&self.host.state_dir),
            owner: self.owner,
            state_dir: self.host.state_dir.clone(),
            looked: Default::default(),
        };
        let actions = found
            .iter()
            .filter(|c| c.state.is_live())
            .map(|c| {
                let container = crate::plan::ContainerRef {
                    id: c.id.clone(),
                    name: c.name.clone(),
                };
                let op = crate::plan::ContainerOp::Stop { container };
                crate::plan::Action::new(&t.name, member, op)
            })
            .collect();
        let plan = crate::plan::Plan {
            actions,
            ..Default::default()
        };
        let exec = crate::execute::Executor {
            rt: &rt,
            concurrency: 1,
            secret: &|_| None,
            progress: &crate::execute::Quiet,
        };
        exec.run(&plan, &[]).await
    }

    /// A runtime on the engine of `look`.
    pub fn runtime(&self, look: &Look) -> Runtime {
        Runtime {
            backend: look.backend.clone(),
            info: look.info.clone(),
            store: look.desired.store.clone(),
            owner: self.owner,
            state_dir: self.host.state_dir.clone(),
            looked: look
                .observed
                .containers
                .iter()
                .map(|c| {
                    let looked = crate::runtime::Looked {
                        last_exit: c.last_exit.clone(),
                        effective: c.effective.clone(),
                        pid_files: c.pid_files.clone(),
                    };
                    (c.id.clone(), looked)
                })
                .collect(),
        }
    }
}
