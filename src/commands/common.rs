//! What the commands share: the host, the store, the engine, and loading the desired state.

use std::sync::Arc;

use anyhow::{Context, bail};

use super::validate::Manifests;
use crate::cli::{BackendArg, Files, Global};
use ateam::backend::connect::{self, Candidate, Engine, Env};
use ateam::backend::{Backend, EngineInfo, EngineKind};
use ateam::files::Owner;
use ateam::host::Host;
use ateam::model::{BackendChoice, Desired, Team};
use ateam::plan::spec::{DesiredState, desired_state};
use ateam::runtime::Runtime;
use ateam::store::{EngineRecord, Store};

pub struct Ctx {
    pub host: Host,
    pub store: Store,
    pub owner: Owner,
    backend_arg: Option<BackendArg>,
}

impl Ctx {
    pub fn new(global: &Global) -> Ctx {
        let host = Host::detect(global.state_dir.clone());
        let owner = Owner {
            uid: host.uid,
            gid: host.gid,
        };
        let store = Store::new(host.state_dir.clone(), owner);
        Ctx {
            host,
            store,
            owner,
            backend_arg: global.backend,
        }
    }

    /// Validated manifests, judged against the teams in the store; invalid ones are an error
    /// listing every problem.
    pub fn load(&self, files: &Files) -> anyhow::Result<Desired> {
        self.judge(&super::validate::read(files)?)
    }

    /// Validates `manifests` against the store as it is now (apply calls this again once it
    /// holds the lock: another apply may have stored a team meanwhile).
    pub fn judge(&self, manifests: &Manifests) -> anyhow::Result<Desired> {
        let applied = self.store.teams().context("reading the applied state")?;
        Ok(manifests.validate(&self.host, &applied)?)
    }

    /// The teams last applied, optionally only `name`.
    pub fn applied(&self, name: Option<&str>) -> anyhow::Result<Desired> {
        let mut teams = self.store.teams().context("reading the applied state")?;
        if let Some(n) = name {
            teams.retain(|t| t.name == n);
            if teams.is_empty() {
                bail!(
                    "team `{n}` has not been applied with this state folder ({})",
                    self.host.state_dir.display()
                );
            }
        }
        Ok(Desired { teams })
    }

    pub fn desired_state(&self, desired: &Desired) -> DesiredState {
        desired_state(desired, &self.host)
    }

    /// The engine: `--backend`; else the one these teams were applied on; else the teams'
    /// `backend` (which must agree); else the first that answers.
    pub async fn connect(&self, teams: &[Team]) -> anyhow::Result<(Arc<dyn Backend>, EngineInfo)> {
        if self.backend_arg.is_none()
            && let Some((team, r)) = teams
                .iter()
                .find_map(|t| self.store.engine(&t.name).map(|r| (t, r)))
        {
            let engine = if r.engine == "podman" {
                Engine::Podman
            } else {
                Engine::Docker
            };
            let c = Candidate {
                engine,
                uri: r.uri.clone(),
                origin: "applied state",
            };
            return connect::connect_to(&c).await.with_context(|| {
                format!(
                    "team `{}` was applied on {} at {}; pass --backend to use another engine",
                    team.name, r.engine, r.uri
                )
            });
        }
        let choice = match self.backend_arg {
            Some(BackendArg::Auto) => BackendChoice::Auto,
            Some(BackendArg::Docker) => BackendChoice::Docker,
            Some(BackendArg::Podman) => BackendChoice::Podman,
            None => {
                let mut choices: Vec<BackendChoice> = teams.iter().map(|t| t.backend).collect();
                choices.dedup();
                match choices[..] {
                    [] => BackendChoice::Auto,
                    [one] => one,
                    _ => bail!(
                        "these teams ask for different backends; apply them separately or pass --backend"
                    ),
                }
            }
        };
        Ok(connect::connect(choice, &Env::from_process(self.host.uid)).await?)
    }

    /// Records the engine `teams` were applied on.
    pub fn remember_engine(&self, teams: &[Team], backend: &dyn Backend) -> anyhow::Result<()> {
        let engine = match backend.kind() {
            EngineKind::Docker => "docker",
            EngineKind::Podman { .. } => "podman",
        };
        for t in teams {
            let record = EngineRecord {
                engine: engine.into(),
                uri: backend.endpoint().to_string(),
            };
            self.store.save_engine(&t.name, &record)?;
        }
        Ok(())
    }

    pub fn runtime(
        &self,
        backend: Arc<dyn Backend>,
        info: EngineInfo,
        store_id: String,
    ) -> Runtime {
        Runtime {
            backend,
            info,
            store: store_id,
            owner: self.owner,
            state_dir: self.host.state_dir.clone(),
        }
    }
}
