//! A recording fake of `Backend`, for unit tests of the layers above the engine (execute,
//! observe, runtime), after youki's `TestHelperSyscall`: containers live in memory, every call
//! is recorded in order with its key arguments, a chosen call can be made to fail, and inspect
//! results can be doctored. It pins the order of engine calls and what a failure leaves
//! behind; the real-engine tests under tests/ stay the proof of behaviour.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    Backend, BackendError, ContainerEvent, CreateRequest, EngineInfo, EngineKind, EventMark,
    ExecOutput, ImageConfig, Inspected, LogOptions, LogSink, PathStat, Result, Summary,
};
use crate::core::container::{ContainerState, Effective};

/// One engine call, with the arguments a test asserts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Ping,
    List { labels: BTreeMap<String, String> },
    FindByName { name: String },
    Inspect { id: String },
    Pull { image: String },
    ImageConfig { image: String },
    CreateProbe { image: String },
    Stat { id: String, path: String },
    ReadFile { id: String, path: String },
    Create { name: String },
    Start { id: String },
    Stop { id: String },
    Remove { id: String },
    Rename { id: String, name: String },
    Unpause { id: String },
    Resize { id: String },
    EnsureNetwork { name: String },
    RemoveNetwork { name: String },
    Exec { id: String },
    Logs { id: String },
    Events,
    RecentEvents { since_nano: i64 },
}

impl Call {
    /// The trait method's name: what `Fault::nth` counts by.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Call::Ping => "ping",
            Call::List { .. } => "list",
            Call::FindByName { .. } => "find_by_name",
            Call::Inspect { .. } => "inspect",
            Call::Pull { .. } => "pull",
            Call::ImageConfig { .. } => "image_config",
            Call::CreateProbe { .. } => "create_probe",
            Call::Stat { .. } => "stat",
            Call::ReadFile { .. } => "read_file",
            Call::Create { .. } => "create",
            Call::Start { .. } => "start",
            Call::Stop { .. } => "stop",
            Call::Remove { .. } => "remove",
            Call::Rename { .. } => "rename",
            Call::Unpause { .. } => "unpause",
            Call::Resize { .. } => "resize_terminal",
            Call::EnsureNetwork { .. } => "ensure_network",
            Call::RemoveNetwork { .. } => "remove_network",
            Call::Exec { .. } => "exec",
            Call::Logs { .. } => "logs",
            Call::Events => "events",
            Call::RecentEvents { .. } => "recent_events",
        }
    }
}

type When = Box<dyn Fn(&Call, usize) -> bool + Send>;
type MakeError = Box<dyn Fn(&Call) -> BackendError + Send>;

/// A call made to fail: which one, and with what error (an `Engine` error by default).
pub(crate) struct Fault {
    /// The call, and how many calls of its name came so far, itself included (1 = the first).
    when: When,
    error: MakeError,
}

impl Fault {
    /// The `n`th call (from 1) of the method `name` fails.
    pub(crate) fn nth(name: &'static str, n: usize) -> Fault {
        Fault::new(Box::new(move |c: &Call, seen| {
            c.name() == name && seen == n
        }))
    }

    /// Every call for which `pred` holds fails.
    pub(crate) fn when(pred: impl Fn(&Call) -> bool + Send + 'static) -> Fault {
        Fault::new(Box::new(move |c: &Call, _| pred(c)))
    }

    /// Fails with `error` instead.
    pub(crate) fn with(mut self, error: impl Fn() -> BackendError + Send + 'static) -> Fault {
        self.error = Box::new(move |_| error());
        self
    }

    fn new(when: When) -> Fault {
        Fault {
            when,
            error: Box::new(|c| BackendError::Engine {
                engine: "fake".into(),
                op: c.name().into(),
                message: "injected failure".into(),
            }),
        }
    }
}

type Doctor = Box<dyn Fn(&mut Inspected) + Send>;

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    containers: BTreeMap<String, Inspected>,
    faults: Vec<Fault>,
    doctors: Vec<Doctor>,
    /// What every container created reports as its configuration.
    effective: Effective,
    /// The pid a started container reports (None: it stopped at once).
    pid: Option<u32>,
    image: ImageConfig,
    logs: String,
    made: u64,
}

/// The fake engine. Shared through `Arc` as the real ones are; all state behind one lock.
/// The containers it makes get the ids `fake00000001`, `fake00000002`, ... in turn.
#[derive(Default)]
pub(crate) struct FakeBackend {
    state: Mutex<State>,
}

impl FakeBackend {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes a chosen call fail (see `Fault`).
    pub(crate) fn fail(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Changes what every later inspect returns (a container whose hardening drifted, say).
    pub(crate) fn doctor(&self, f: impl Fn(&mut Inspected) + Send + 'static) {
        self.lock().doctors.push(Box::new(f));
    }

    /// What the containers it creates report as their configuration.
    pub(crate) fn set_effective(&self, effective: Effective) {
        self.lock().effective = effective;
    }

    /// The pid a started container reports.
    pub(crate) fn set_pid(&self, pid: Option<u32>) {
        self.lock().pid = pid;
    }

    /// The output `logs` gives.
    pub(crate) fn set_logs(&self, text: &str) {
        self.lock().logs = text.to_string();
    }

    /// What `image_config` says of any image.
    pub(crate) fn set_image(&self, image: ImageConfig) {
        self.lock().image = image;
    }

    /// A container that is there already.
    pub(crate) fn add(&self, c: Inspected) {
        self.lock().containers.insert(c.summary.id.clone(), c);
    }

    /// Every call so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The containers there now, by id.
    pub(crate) fn containers(&self) -> BTreeMap<String, Inspected> {
        self.lock().containers.clone()
    }

    /// Records `call`; its injected error if a fault matches it.
    fn call(&self, call: Call) -> Result<MutexGuard<'_, State>> {
        let mut s = self.lock();
        let seen = s.calls.iter().filter(|c| c.name() == call.name()).count() + 1;
        let failed = s
            .faults
            .iter()
            .find(|f| (f.when)(&call, seen))
            .map(|f| (f.error)(&call));
        s.calls.push(call);
        match failed {
            Some(e) => Err(e),
            None => Ok(s),
        }
    }

    /// `call` for a method that needs no state.
    fn called(&self, call: Call) -> Result<()> {
        self.call(call).map(drop)
    }

    fn make(s: &mut State, name: &str, image: &str, labels: &BTreeMap<String, String>) -> String {
        s.made += 1;
        let id = format!("fake{:08}", s.made);
        let summary = Summary {
            id: id.clone(),
            name: name.to_string(),
            labels: labels.clone(),
            state: ContainerState::Created,
            created: s.made as i64,
        };
        let c = Inspected {
            summary,
            effective: s.effective.clone(),
            pid: None,
            pid_files: None,
            image: image.to_string(),
            image_id: String::new(),
            restart_count: 0,
            started_at: None,
            last_exit: None,
        };
        s.containers.insert(id.clone(), c);
        id
    }
}

fn not_found(id: &str) -> BackendError {
    BackendError::NotFound { id: id.to_string() }
}

#[async_trait]
impl Backend for FakeBackend {
    fn kind(&self) -> EngineKind {
        EngineKind::Docker
    }

    fn endpoint(&self) -> &str {
        "fake://"
    }

    async fn ping(&self) -> Result<EngineInfo> {
        self.called(Call::Ping)?;
        Ok(info())
    }

    async fn list(&self, labels: &BTreeMap<String, String>) -> Result<Vec<Summary>> {
        let s = self.call(Call::List {
            labels: labels.clone(),
        })?;
        let has = |c: &Summary| labels.iter().all(|(k, v)| c.labels.get(k) == Some(v));
        Ok(s.containers
            .values()
            .map(|c| c.summary.clone())
            .filter(has)
            .collect())
    }

    async fn find_by_name(&self, name: &str) -> Result<Option<Summary>> {
        let s = self.call(Call::FindByName { name: name.into() })?;
        let found = s.containers.values().find(|c| c.summary.name == name);
        Ok(found.map(|c| c.summary.clone()))
    }

    async fn inspect(&self, id: &str) -> Result<Inspected> {
        let s = self.call(Call::Inspect { id: id.into() })?;
        // As the engines do: an id, or else a container's exact name.
        let mut c = s
            .containers
            .get(id)
            .or_else(|| s.containers.values().find(|c| c.summary.name == id))
            .cloned()
            .ok_or_else(|| not_found(id))?;
        for d in &s.doctors {
            d(&mut c);
        }
        Ok(c)
    }

    async fn build(&self, req: &super::BuildRequest) -> Result<()> {
        Err(BackendError::Engine {
            engine: "fake".into(),
            op: format!("build {}", req.tag),
            message: "the fake engine builds nothing".into(),
        })
    }

    async fn pull(&self, image: &str) -> Result<()> {
        self.called(Call::Pull {
            image: image.into(),
        })?;
        Ok(())
    }

    async fn image_config(&self, image: &str) -> Result<ImageConfig> {
        let s = self.call(Call::ImageConfig {
            image: image.into(),
        })?;
        Ok(s.image.clone())
    }

    async fn create_probe(&self, image: &str, labels: &BTreeMap<String, String>) -> Result<String> {
        let mut s = self.call(Call::CreateProbe {
            image: image.into(),
        })?;
        Ok(Self::make(&mut s, "", image, labels))
    }

    async fn stat(&self, id: &str, path: &str) -> Result<Option<PathStat>> {
        self.called(Call::Stat {
            id: id.into(),
            path: path.into(),
        })?;
        Ok(None)
    }

    async fn read_file(&self, id: &str, path: &str, _max: u64) -> Result<Option<Vec<u8>>> {
        self.called(Call::ReadFile {
            id: id.into(),
            path: path.into(),
        })?;
        Ok(None)
    }

    async fn create(&self, req: &CreateRequest) -> Result<String> {
        let mut s = self.call(Call::Create {
            name: req.name.clone(),
        })?;
        if s.containers.values().any(|c| c.summary.name == req.name) {
            return Err(BackendError::NameConflict {
                name: req.name.clone(),
            });
        }
        Ok(Self::make(&mut s, &req.name, &req.image, &req.labels))
    }

    async fn start(&self, id: &str) -> Result<()> {
        let mut s = self.call(Call::Start { id: id.into() })?;
        let pid = s.pid;
        let c = s.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.summary.state = match pid {
            Some(_) => ContainerState::Running,
            None => ContainerState::Exited { code: 127 },
        };
        c.pid = pid;
        c.started_at = Some("2026-01-01T00:00:00Z".into());
        Ok(())
    }

    async fn stop(&self, id: &str, _timeout_secs: u32) -> Result<()> {
        let mut s = self.call(Call::Stop { id: id.into() })?;
        let c = s.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.summary.state = ContainerState::Exited { code: 143 };
        c.pid = None;
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        let mut s = self.call(Call::Remove { id: id.into() })?;
        s.containers.remove(id);
        Ok(())
    }

    async fn rename(&self, id: &str, name: &str) -> Result<()> {
        let mut s = self.call(Call::Rename {
            id: id.into(),
            name: name.into(),
        })?;
        if s.containers.values().any(|c| c.summary.name == name) {
            return Err(BackendError::NameConflict { name: name.into() });
        }
        let c = s.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.summary.name = name.to_string();
        Ok(())
    }

    async fn unpause(&self, id: &str) -> Result<()> {
        let mut s = self.call(Call::Unpause { id: id.into() })?;
        let c = s.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.summary.state = ContainerState::Running;
        Ok(())
    }

    async fn resize_terminal(&self, id: &str, _rows: u16, _cols: u16) -> Result<()> {
        self.called(Call::Resize { id: id.into() })?;
        Ok(())
    }

    async fn ensure_network(&self, name: &str, _labels: &BTreeMap<String, String>) -> Result<()> {
        self.called(Call::EnsureNetwork { name: name.into() })?;
        Ok(())
    }

    async fn remove_network(&self, name: &str) -> Result<()> {
        self.called(Call::RemoveNetwork { name: name.into() })?;
        Ok(())
    }

    async fn exec(&self, id: &str, _cmd: &[String]) -> Result<ExecOutput> {
        self.called(Call::Exec { id: id.into() })?;
        Ok(ExecOutput {
            code: 0,
            stdout: String::new(),
            stderr: String::new(),
        })
    }

    async fn logs(&self, id: &str, _opts: LogOptions, sink: &mut LogSink<'_>) -> Result<()> {
        let logs = self.call(Call::Logs { id: id.into() })?.logs.clone();
        sink(logs.as_bytes());
        Ok(())
    }

    async fn events(
        &self,
        _labels: &BTreeMap<String, String>,
    ) -> Result<futures_util::stream::BoxStream<'static, Result<ContainerEvent>>> {
        self.called(Call::Events)?;
        Ok(Box::pin(futures_util::stream::empty()))
    }

    /// Recorded; none held, as an engine that cannot replay.
    async fn recent_events(&self, since_nano: i64) -> Result<Option<Vec<EventMark>>> {
        self.called(Call::RecentEvents { since_nano })?;
        Ok(None)
    }
}

/// What `ping` says: Docker on cgroup v2, limits enforced.
pub(crate) fn info() -> EngineInfo {
    EngineInfo {
        kind: EngineKind::Docker,
        version: "fake".into(),
        api_version: "1.41".into(),
        cgroup_version: 2,
        limits_enforced: true,
    }
}

mod tests {
    use super::*;

    /// The fake itself: calls recorded in order, the nth call of a name failing once, a
    /// predicate failing every match, doctors applied to inspect.
    #[tokio::test]
    async fn records_calls_and_fails_the_chosen_one() {
        let f = FakeBackend::default();
        f.fail(Fault::nth("start", 2));
        f.fail(
            Fault::when(|c| matches!(c, Call::Remove { id } if id == "gone"))
                .with(|| BackendError::NotFound { id: "gone".into() }),
        );
        f.set_pid(Some(1));
        f.doctor(|i| i.effective.privileged = true);
        let req = crate::policy::create_request(
            &crate::plan::tests::want(vec![crate::plan::tests::member("m")]).members[0].spec,
            BTreeMap::new(),
            vec!["x".into()],
            EngineKind::Docker,
        );
        let id = f.create(&req).await.unwrap();
        f.start(&id).await.unwrap();
        assert!(f.start(&id).await.is_err(), "the second start fails");
        f.start(&id).await.unwrap();
        assert!(matches!(
            f.remove("gone").await,
            Err(BackendError::NotFound { .. })
        ));
        assert!(f.inspect(&id).await.unwrap().effective.privileged);
        assert!(matches!(
            f.create(&req).await,
            Err(BackendError::NameConflict { .. })
        ));
        let start = Call::Start { id: id.clone() };
        assert_eq!(
            f.calls(),
            vec![
                Call::Create {
                    name: req.name.clone()
                },
                start.clone(),
                start.clone(),
                start,
                Call::Remove { id: "gone".into() },
                Call::Inspect { id: id.clone() },
                Call::Create { name: req.name },
            ]
        );
        assert_eq!(
            f.containers()[&id].summary.state,
            ContainerState::Running,
            "a started container with a pid runs"
        );
    }
}
