//! Docker through bollard.
//!
//! The client is pinned to whatever API version the daemon offers (`negotiate_version`): bollard
//! speaks 1.53 by default and Docker 20.10 (API 1.41) answers newer versions with HTTP 400.
//! bollard is built without its `chrono`/`time` features, so engine dates arrive as RFC 3339
//! strings and are parsed here.

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, ContainerState as EngineState,
    ContainerSummary, HostConfig, HostConfigCgroupnsModeEnum, Mount as BollardMount,
    MountBindOptions, MountBindOptionsPropagationEnum, MountPoint, MountType, RestartPolicy,
    RestartPolicyNameEnum, SystemInfoCgroupVersionEnum,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptionsBuilder, EventsOptions, ListContainersOptions,
    LogsOptions, RemoveContainerOptions, RenameContainerOptions, StartContainerOptions,
    StopContainerOptions,
};
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};

use super::{
    Backend, BackendError, ContainerEvent, CreateRequest, EngineInfo, EngineKind, EventMark,
    ExecOutput, ImageConfig, Inspected, LogOptions, PROBE_COMMAND, PathStat, Result, Summary,
    state_from,
};
use crate::core::container::{ContainerState, Effective, LastExit, Mount, rfc3339_epoch};

const ENGINE: &str = "docker";

/// Per-request limit for everything but `stop`, which waits as long as it was told to.
/// Streams (logs, exec output, events) are only limited until the engine starts answering.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Nanoseconds in a second.
const NANOS: i64 = 1_000_000_000;

/// How long the connect's `_ping` may take: it answers in well under a millisecond.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// What Docker reports as `StartedAt` for a container that never started.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The Docker Engine API, through bollard.
pub struct DockerBackend {
    docker: Docker,
    endpoint: String,
    /// The socket path or `host:port`, as error messages name it.
    socket: String,
    /// Who answered the connect's `_ping` (`Server` header and API version), when it said.
    identity: Option<String>,
}

impl DockerBackend {
    /// Connects to `unix:///path` or `tcp://host:port` and agrees on an API version.
    pub async fn connect(uri: &str) -> Result<Self> {
        if let Some(path) = uri.strip_prefix("unix://") {
            let unavailable = |e: std::io::Error| BackendError::Unavailable {
                engine: ENGINE.into(),
                socket: path.to_string(),
                hint: format!(" ({e})"),
            };
            let ping = tokio::time::timeout(PING_TIMEOUT, ping_headers(path))
                .await
                .map_err(|_| unavailable(ErrorKind::TimedOut.into()))
                .and_then(|p| p.map_err(unavailable));
            if let Ok(Some((api, server))) = ping {
                let docker = Docker::connect_with_unix(uri, REQUEST_TIMEOUT.as_secs(), &api)
                    .map_err(|e| BackendError::Unavailable {
                        engine: ENGINE.into(),
                        socket: path.to_string(),
                        hint: format!(" ({})", message(&e)),
                    })?;
                let identity = format!("{server} api {}.{}", api.major_version, api.minor_version);
                return Ok(DockerBackend {
                    docker,
                    endpoint: uri.to_string(),
                    socket: path.to_string(),
                    identity: Some(identity),
                });
            }
            ping?;
        }
        let (docker, socket) = if let Some(path) = uri.strip_prefix("unix://") {
            let d = Docker::connect_with_unix(
                uri,
                REQUEST_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            );
            (d, path.to_string())
        } else if let Some(addr) = uri
            .strip_prefix("tcp://")
            .or_else(|| uri.strip_prefix("http://"))
        {
            let d = Docker::connect_with_http(
                uri,
                REQUEST_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            );
            (d, addr.to_string())
        } else {
            return Err(BackendError::Engine {
                engine: ENGINE.into(),
                op: "connect".into(),
                message: format!(
                    "unsupported address `{uri}`: use unix:///path or tcp://host:port"
                ),
            });
        };
        let unavailable = |e: &BollardError| -> BackendError {
            if io_kind(e) == Some(ErrorKind::PermissionDenied) {
                BackendError::PermissionDenied {
                    socket: socket.clone(),
                    hint: "ask to be added to the `docker` group, or use rootless Podman".into(),
                }
            } else {
                BackendError::Unavailable {
                    engine: ENGINE.into(),
                    socket: socket.clone(),
                    hint: format!(" ({})", message(e)),
                }
            }
        };
        let docker = docker.map_err(|e| unavailable(&e))?;
        // Without this every call fails on an engine older than bollard's default API version.
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(DockerBackend {
            docker,
            endpoint: uri.to_string(),
            socket,
            identity: None,
        })
    }

    /// Any other failure, with the engine's own words; a dead connection says so instead.
    fn err(&self, op: &str, e: BollardError) -> BackendError {
        if is_connection_error(&e) {
            return BackendError::Unavailable {
                engine: ENGINE.into(),
                socket: self.socket.clone(),
                hint: format!(" ({op}: {})", message(&e)),
            };
        }
        BackendError::Engine {
            engine: ENGINE.into(),
            op: op.into(),
            message: message(&e),
        }
    }

    /// 404 on a container call means the container is gone, whatever the call was.
    fn container_err(&self, op: &str, id: &str, e: BollardError) -> BackendError {
        match status(&e) {
            Some(404) => BackendError::NotFound { id: id.into() },
            _ => self.err(op, e),
        }
    }

    async fn list_filtered(&self, filters: HashMap<String, Vec<String>>) -> Result<Vec<Summary>> {
        let opts = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(|e| self.err("list containers", e))?;
        let mut out = Vec::with_capacity(found.len());
        for c in found {
            // None: it went away between the list and a closer look; it is not there any more.
            out.extend(self.summary_of(c).await?);
        }
        Ok(out)
    }

    async fn summary_of(&self, c: ContainerSummary) -> Result<Option<Summary>> {
        let id = c.id.unwrap_or_default();
        let status_word = c.state.map(|s| s.as_ref().to_string()).unwrap_or_default();
        let state = if status_word == "exited" {
            // The list only carries the exit code inside its human-readable Status; when that
            // text does not parse, ask the container itself rather than guess.
            match c.status.as_deref().and_then(exit_code_from_status) {
                Some(code) => state_from(&status_word, code),
                None => match self.inspect(&id).await {
                    Ok(i) => i.summary.state,
                    Err(BackendError::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e),
                },
            }
        } else {
            state_from(&status_word, 0)
        };
        Ok(Some(Summary {
            name: primary_name(c.names.as_deref().unwrap_or_default()),
            labels: c.labels.unwrap_or_default().into_iter().collect(),
            state,
            created: c.created.unwrap_or(0),
            id,
        }))
    }
}

#[async_trait]
impl Backend for DockerBackend {
    fn kind(&self) -> EngineKind {
        EngineKind::Docker
    }
    fn endpoint(&self) -> &str {
        &self.endpoint
    }
    fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    async fn ping(&self) -> Result<EngineInfo> {
        // `info` names the version too: one round trip, not two.
        let info = self.docker.info().await.map_err(|e| self.err("info", e))?;
        let cgroup_version = match info.cgroup_version {
            Some(SystemInfoCgroupVersionEnum::_2) => 2,
            // Docker has reported it since 20.10; older engines only run on v1.
            _ => 1,
        };
        let rootless = info
            .security_options
            .unwrap_or_default()
            .iter()
            .any(|o| o.split(',').any(|part| part == "name=rootless"));
        let api = self.docker.client_version();
        Ok(EngineInfo {
            kind: EngineKind::Docker,
            version: info.server_version.clone().unwrap_or_default(),
            api_version: format!("{}.{}", api.major_version, api.minor_version),
            cgroup_version,
            // Rootless Docker on cgroup v1 cannot delegate controllers: limits are accepted
            // and silently not applied.
            limits_enforced: !(rootless && cgroup_version == 1),
        })
    }

    async fn list(&self, labels: &BTreeMap<String, String>) -> Result<Vec<Summary>> {
        let mut filters = HashMap::new();
        if !labels.is_empty() {
            filters.insert("label".to_string(), label_filters(labels));
        }
        self.list_filtered(filters).await
    }

    async fn find_by_name(&self, name: &str) -> Result<Option<Summary>> {
        // Docker's name filter is an unanchored regex: anchor and escape it, and still compare
        // exactly, so that `a` never finds `a-b` or `xa`.
        let filters = HashMap::from([(
            "name".to_string(),
            vec![format!("^/{}$", regex_escape(name))],
        )]);
        Ok(self
            .list_filtered(filters)
            .await?
            .into_iter()
            .find(|s| s.name == name))
    }

    async fn inspect(&self, id: &str) -> Result<Inspected> {
        let c = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(|e| self.container_err("inspect container", id, e))?;
        Ok(inspected(c))
    }

    async fn build(&self, req: &super::BuildRequest) -> Result<()> {
        // The classic builder (API 1.41 has no other without a session): `networkmode:
        // none` gives RUN no network; `pull` unset pulls nothing a FROM names that is here
        // (and the caller checked every FROM is here).
        let opts = bollard::query_parameters::BuildImageOptions {
            dockerfile: req.dockerfile.clone(),
            t: Some(req.tag.clone()),
            rm: true,
            forcerm: true,
            networkmode: Some("none".into()),
            buildargs: Some(req.args.clone().into_iter().collect()),
            labels: Some(req.labels.clone().into_iter().collect()),
            target: req.target.clone(),
            ..Default::default()
        };
        let body = bollard::body_full(req.context.clone().into());
        let mut out = String::new();
        let mut stream = self.docker.build_image(opts, None, Some(body));
        while let Some(step) = stream.next().await {
            let step = step.map_err(|e| self.err(&format!("build {}", req.tag), e))?;
            if let Some(s) = &step.stream {
                super::keep_tail(&mut out, s);
            }
            if let Some(e) = step.error_detail.and_then(|d| d.message) {
                return Err(BackendError::Engine {
                    engine: ENGINE.into(),
                    op: format!("build {}", req.tag),
                    message: format!("{e}\n{}", super::build_tail(&out)),
                });
            }
        }
        Ok(())
    }

    async fn pull(&self, image: &str) -> Result<()> {
        let opts = CreateImageOptionsBuilder::default()
            .from_image(&super::with_tag(image))
            .build();
        let mut progress = self.docker.create_image(Some(opts), None, None);
        while let Some(step) = progress.next().await {
            step.map_err(|e| self.err(&format!("pull {image}"), e))?;
        }
        Ok(())
    }

    async fn image_config(&self, image: &str) -> Result<ImageConfig> {
        let img = self
            .docker
            .inspect_image(image)
            .await
            .map_err(|e| match status(&e) {
                Some(404) => BackendError::ImageMissing {
                    engine: ENGINE.into(),
                    image: image.into(),
                },
                _ => self.err("inspect image", e),
            })?;
        let config = img.config.unwrap_or_default();
        let mut command = config.entrypoint.unwrap_or_default();
        command.extend(config.cmd.unwrap_or_default());
        Ok(ImageConfig {
            id: img.id.unwrap_or_default(),
            command,
            env: config.env.unwrap_or_default(),
        })
    }

    async fn create_probe(&self, image: &str, labels: &BTreeMap<String, String>) -> Result<String> {
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(vec![PROBE_COMMAND.to_string()]),
            labels: Some(labels.clone().into_iter().collect()),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .map_err(|e| match status(&e) {
                Some(404) if message(&e).to_ascii_lowercase().contains("image") => {
                    BackendError::ImageMissing {
                        engine: ENGINE.into(),
                        image: image.into(),
                    }
                }
                _ => self.err("create probe container", e),
            })?;
        Ok(created.id)
    }

    async fn stat(&self, id: &str, path: &str) -> Result<Option<PathStat>> {
        let opts = bollard::query_parameters::ContainerArchiveInfoOptions {
            path: path.to_string(),
        };
        match self.docker.get_container_archive_info(id, Some(opts)).await {
            Ok(s) => Ok(Some(PathStat {
                mode: s.file_mode,
                link_target: s.link_target,
            })),
            // A HEAD answer has no body: a missing path and a missing container both say 404
            // alone. The caller's probe exists, so it is the path.
            Err(e) if status(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.container_err("stat path", id, e)),
        }
    }

    async fn read_file(&self, id: &str, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let opts = bollard::query_parameters::DownloadFromContainerOptions {
            path: path.to_string(),
        };
        let mut stream = self.docker.download_from_container(id, Some(opts));
        let mut tar = Vec::new();
        // The archive's header and padding come on top of the file.
        let limit = max.saturating_add(64 * 1024) as usize;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => tar.extend_from_slice(&b),
                Err(e) if status(&e) == Some(404) => return Ok(None),
                Err(e) => return Err(self.container_err("read file", id, e)),
            }
            if tar.len() > limit {
                return Ok(None);
            }
        }
        Ok(super::file_in_archive(&tar, max))
    }

    async fn create(&self, req: &CreateRequest) -> Result<String> {
        let opts = CreateContainerOptions {
            name: Some(req.name.clone()),
            ..Default::default()
        };
        let body = create_body(req);
        let created = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(|e| match status(&e) {
                // A 404 also comes for a missing network: only an image message means the image.
                Some(404) if message(&e).to_ascii_lowercase().contains("image") => {
                    BackendError::ImageMissing {
                        engine: ENGINE.into(),
                        image: req.image.clone(),
                    }
                }
                Some(409) => BackendError::NameConflict {
                    name: req.name.clone(),
                },
                _ => self.err("create container", e),
            })?;
        Ok(created.id)
    }

    async fn start(&self, id: &str) -> Result<()> {
        // 304 (already running) counts as success in bollard.
        self.docker
            .start_container(id, None::<StartContainerOptions>)
            .await
            .map_err(|e| self.container_err("start container", id, e))
    }

    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<()> {
        let opts = StopContainerOptions {
            t: Some(i32::try_from(timeout_secs).unwrap_or(i32::MAX)),
            signal: None,
        };
        // The engine answers only after the grace period and the kill: wait longer than that.
        let docker = self
            .docker
            .clone()
            .with_timeout(REQUEST_TIMEOUT + Duration::from_secs(u64::from(timeout_secs)));
        docker
            .stop_container(id, Some(opts))
            .await
            .map_err(|e| self.container_err("stop container", id, e))
    }

    async fn remove(&self, id: &str) -> Result<()> {
        let opts = RemoveContainerOptions {
            force: true,
            // Anonymous volumes would otherwise outlive the container, unowned.
            v: true,
            link: false,
        };
        match self.docker.remove_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.err("remove container", e)),
        }
    }

    async fn rename(&self, id: &str, name: &str) -> Result<()> {
        let opts = RenameContainerOptions { name: name.into() };
        self.docker
            .rename_container(id, opts)
            .await
            .map_err(|e| match status(&e) {
                Some(409) => BackendError::NameConflict { name: name.into() },
                _ => self.container_err("rename container", id, e),
            })
    }

    async fn unpause(&self, id: &str) -> Result<()> {
        self.docker
            .unpause_container(id)
            .await
            .map_err(|e| self.container_err("unpause container", id, e))
    }

    async fn resize_terminal(&self, id: &str, rows: u16, cols: u16) -> Result<()> {
        let opts = bollard::query_parameters::ResizeContainerTTYOptions {
            h: i32::from(rows),
            w: i32::from(cols),
        };
        self.docker
            .resize_container_tty(id, opts)
            .await
            .map_err(|e| self.container_err("resize container", id, e))
    }

    async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<()> {
        match self.docker.inspect_network(name, None).await {
            Ok(_) => return Ok(()),
            Err(e) if status(&e) == Some(404) => {}
            Err(e) => return Err(self.err("inspect network", e)),
        }
        let req = bollard::models::NetworkCreateRequest {
            name: name.into(),
            driver: Some("bridge".into()),
            labels: Some(labels.clone().into_iter().collect()),
            ..Default::default()
        };
        match self.docker.create_network(req).await {
            Ok(_) => Ok(()),
            // Made by a concurrent apply meanwhile.
            Err(e) if status(&e) == Some(409) => Ok(()),
            Err(e) => Err(self.err("create network", e)),
        }
    }

    async fn remove_network(&self, name: &str) -> Result<()> {
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.err("remove network", e)),
        }
    }

    async fn exec(&self, id: &str, cmd: &[String]) -> Result<ExecOutput> {
        let config = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd.to_vec()),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(id, config)
            .await
            .map_err(|e| self.container_err("create exec", id, e))?;
        let started = self
            .docker
            .start_exec(&exec.id, Some(StartExecOptions::default()))
            .await
            .map_err(|e| self.err("start exec", e))?;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = started {
            while let Some(chunk) = output.next().await {
                match chunk.map_err(|e| self.err("exec output", e))? {
                    bollard::container::LogOutput::StdErr { message } => {
                        stderr.extend_from_slice(&message)
                    }
                    other @ (bollard::container::LogOutput::StdOut { .. }
                    | bollard::container::LogOutput::StdIn { .. }
                    | bollard::container::LogOutput::Console { .. }) => {
                        stdout.extend_from_slice(&other.into_bytes())
                    }
                }
            }
        }
        // The output can end a moment before the engine records the exit code.
        let mut code = None;
        for _ in 0..100 {
            let info = self
                .docker
                .inspect_exec(&exec.id)
                .await
                .map_err(|e| self.err("inspect exec", e))?;
            if info.running != Some(true)
                && let Some(c) = info.exit_code
            {
                code = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let code = code.ok_or_else(|| BackendError::Engine {
            engine: ENGINE.into(),
            op: "exec".into(),
            message: format!("`{}` ended its output but no exit code came", cmd.join(" ")),
        })?;
        Ok(ExecOutput {
            code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    async fn logs(&self, id: &str, o: LogOptions, sink: &mut super::LogSink<'_>) -> Result<()> {
        let opts = LogsOptions {
            stdout: true,
            stderr: true,
            follow: o.follow,
            tail: o.tail.to_string(),
            since: o.since.map_or(0, |s| i32::try_from(s).unwrap_or(i32::MAX)),
            timestamps: o.timestamps,
            ..Default::default()
        };
        let mut stream = self.docker.logs(id, Some(opts));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.container_err("logs", id, e))?;
            sink(&chunk.into_bytes());
        }
        Ok(())
    }

    async fn recent_events(&self, since_nano: i64) -> Result<Option<Vec<EventMark>>> {
        // Docker's own daemon only: a look-alike's compatible API (Podman's) replays its whole
        // event log, however long, not a bounded buffer.
        if !self
            .identity
            .as_deref()
            .is_some_and(|i| i.starts_with("Docker/"))
        {
            return Ok(None);
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let stamp = |n: i64| format!("{}.{:09}", n.div_euclid(NANOS), n.rem_euclid(NANOS));
        let opts = EventsOptions {
            since: Some(stamp(since_nano)),
            // A past end: the engine answers with what it holds and closes.
            until: Some(format!("{}.{:09}", now.as_secs(), now.subsec_nanos())),
            filters: None,
        };
        let held: Vec<bollard::models::EventMessage> = self
            .docker
            .events(Some(opts))
            .try_collect()
            .await
            .map_err(|e| self.err("events", e))?;
        Ok(Some(
            held.into_iter()
                .map(|ev| EventMark {
                    time_nano: ev.time_nano.unwrap_or(0),
                    kind: ev.typ.map(|t| t.to_string()).unwrap_or_default(),
                    action: ev.action.unwrap_or_default(),
                    id: ev.actor.and_then(|a| a.id).unwrap_or_default(),
                })
                .collect(),
        ))
    }

    async fn events(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<BoxStream<'static, Result<ContainerEvent>>> {
        let mut filters = HashMap::from([("type".to_string(), vec!["container".to_string()])]);
        if !labels.is_empty() {
            filters.insert("label".to_string(), label_filters(labels));
        }
        // bollard sends the request only when the stream is first polled: starting from a
        // second ago replays what happened in between, so a caller that subscribes, acts, then
        // polls misses nothing. A repeated id costs one more look; a missed one, a stuck team.
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(Duration::from_secs(1));
        let opts = EventsOptions {
            since: Some(format!("{}.{:09}", since.as_secs(), since.subsec_nanos())),
            until: None,
            filters: Some(filters),
        };
        let socket = self.socket.clone();
        let stream = self
            .docker
            .events(Some(opts))
            .map_err(move |e| {
                if is_connection_error(&e) {
                    BackendError::Unavailable {
                        engine: ENGINE.into(),
                        socket: socket.clone(),
                        hint: format!(" (events: {})", message(&e)),
                    }
                } else {
                    BackendError::Engine {
                        engine: ENGINE.into(),
                        op: "events".into(),
                        message: message(&e),
                    }
                }
            })
            .try_filter_map(|ev| async move {
                let action = ev.action.unwrap_or_default();
                let quiet = super::quiet_event(&action);
                Ok(ev.actor.and_then(|a| {
                    let label = |k: &str| a.attributes.as_ref().and_then(|at| at.get(k).cloned());
                    let (team, member) = {
                        use crate::core::container::labels as names;
                        (label(names::TEAM), label(names::MEMBER))
                    };
                    a.id.filter(|id| !quiet && !id.is_empty())
                        .map(|id| ContainerEvent { id, team, member })
                }))
            });
        Ok(stream.boxed())
    }
}

/// The create call, field by field from the request; nothing the request does not say.
fn create_body(req: &CreateRequest) -> ContainerCreateBody {
    let mounts = req
        .mounts
        .iter()
        .map(|m| BollardMount {
            target: Some(m.target.display().to_string()),
            source: Some(m.source.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let host_config = HostConfig {
        // `Mounts`, not `Binds`: Binds creates a missing host folder (as root) instead of failing.
        mounts: Some(mounts),
        tmpfs: Some(req.tmpfs.clone().into_iter().collect()),
        memory: Some(to_i64(req.memory_bytes)),
        memory_swap: Some(to_i64(req.memory_swap_bytes)),
        pids_limit: Some(i64::from(req.pids)),
        nano_cpus: req.nano_cpus.map(to_i64),
        network_mode: Some(if req.network_none {
            "none".to_string()
        } else {
            req.network_name.clone().unwrap_or_else(|| "bridge".into())
        }),
        cap_drop: req.cap_drop_all.then(|| vec!["ALL".to_string()]),
        security_opt: req
            .no_new_privileges
            .then(|| vec!["no-new-privileges".to_string()]),
        readonly_rootfs: Some(req.read_only_rootfs),
        init: Some(req.init),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        privileged: Some(false),
        cgroupns_mode: req
            .cgroupns_private
            .then_some(HostConfigCgroupnsModeEnum::PRIVATE),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(req.image.clone()),
        // No network at all: Docker then makes the container a namespace of its own with
        // loopback alone, without joining it to its `none` network, whose hook (dockerd run
        // again, at every start) took about 150 ms of each start. The kernel's view is
        // checked before the release (`procfs::loopback_only`).
        network_disabled: req.network_none.then_some(true),
        // Empty means "the image's own": an empty list would erase it instead.
        entrypoint: (!req.entrypoint.is_empty()).then(|| req.entrypoint.clone()),
        cmd: (!req.cmd.is_empty()).then(|| req.cmd.clone()),
        env: Some(req.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: Some(req.user.clone()),
        working_dir: Some(req.workdir.display().to_string()),
        labels: Some(req.labels.clone().into_iter().collect()),
        // An interactive agent's terminal, kept by the engine: `ateam attach` joins it.
        tty: Some(req.terminal),
        open_stdin: Some(req.terminal),
        stdin_once: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The names of the networks a container is attached to (`none` is not one).
fn networks_of(c: &ContainerInspectResponse) -> Vec<String> {
    let mut v: Vec<String> = c
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().filter(|k| *k != "none").cloned().collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The mounts by kind: binds, tmpfs (with `HostConfig.Tmpfs`'s options) and any other.
type MountsOf = (Vec<Mount>, BTreeMap<String, String>, Vec<String>);

fn mounts_of(mounts: Vec<MountPoint>, hc: &HostConfig) -> MountsOf {
    let mut bind_mounts = Vec::new();
    let mut tmpfs: BTreeMap<String, String> =
        hc.tmpfs.clone().unwrap_or_default().into_iter().collect();
    let mut other_mounts = Vec::new();
    for m in mounts {
        let typ = m.typ.unwrap_or_default();
        let source = m.source.unwrap_or_default();
        let destination = m.destination.unwrap_or_default();
        match typ.as_str() {
            "bind" => bind_mounts.push(Mount {
                source: source.into(),
                target: destination.into(),
                read_only: !m.rw.unwrap_or(false),
            }),
            "tmpfs" => {
                // A `--mount type=tmpfs` has no options in HostConfig.Tmpfs: its own.
                tmpfs.entry(destination).or_default();
            }
            _ => other_mounts.push(format!("{typ}:{source}:{destination}")),
        }
    }
    (bind_mounts, tmpfs, other_mounts)
}

/// The CPU limit in billionths of a CPU, whether set as `NanoCpus` or as a CFS quota.
fn nano_cpus_of(hc: &HostConfig) -> u64 {
    match (hc.nano_cpus.unwrap_or(0), hc.cpu_quota.unwrap_or(0)) {
        (0, quota) if quota > 0 => {
            // The kernel's default CFS period when none is set.
            let period = hc.cpu_period.filter(|p| *p > 0).unwrap_or(100_000);
            u64::try_from(i128::from(quota) * 1_000_000_000 / i128::from(period)).unwrap_or(0)
        }
        (n, _) => u64::try_from(n).unwrap_or(0),
    }
}

fn namespaces_of(hc: &HostConfig) -> BTreeMap<String, String> {
    [
        ("pid", hc.pid_mode.clone()),
        ("ipc", hc.ipc_mode.clone()),
        ("uts", hc.uts_mode.clone()),
        ("userns", hc.userns_mode.clone()),
        ("cgroupns", hc.cgroupns_mode.map(|m| m.as_ref().to_string())),
    ]
    .into_iter()
    .map(|(ns, mode)| (ns.to_string(), mode.unwrap_or_default()))
    .collect()
}

/// Ports published to the host (`all` for `-P`), then those the image exposes.
fn published_ports_of(hc: &HostConfig, config: &ContainerConfig) -> Vec<String> {
    let mut published_ports: Vec<String> = hc
        .port_bindings
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, b)| b.as_ref().is_some_and(|b| !b.is_empty()))
        .map(|(port, _)| port)
        .collect();
    published_ports.sort();
    if hc.publish_all_ports == Some(true) {
        published_ports.push("all".into());
    }
    let mut exposed: Vec<String> = config
        .exposed_ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| format!("exposed:{p}"))
        .collect();
    exposed.sort();
    published_ports.extend(exposed);
    published_ports
}

/// What the policy judges of a container, from its inspect.
fn effective_of(
    c: &ContainerInspectResponse,
    config: &ContainerConfig,
    hc: &HostConfig,
    mounts: MountsOf,
) -> Effective {
    let (bind_mounts, tmpfs, other_mounts) = mounts;
    let security_opt = hc.security_opt.clone().unwrap_or_default();
    Effective {
        image: config.image.clone().unwrap_or_default(),
        entrypoint: config.entrypoint.clone().unwrap_or_default(),
        cmd: config.cmd.clone().unwrap_or_default(),
        apparmor_profile: c.app_armor_profile.clone().unwrap_or_default(),
        masked_paths: hc.masked_paths.clone(),
        readonly_paths: hc.readonly_paths.clone(),
        sysctls: hc
            .sysctls
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        cgroup_parent: hc.cgroup_parent.clone().unwrap_or_default(),
        oom_kill_disable: hc.oom_kill_disable == Some(true),
        device_cgroup_rules: hc.device_cgroup_rules.clone().unwrap_or_default(),
        user: config.user.clone().unwrap_or_default(),
        privileged: hc.privileged.unwrap_or(false),
        cap_add: hc.cap_add.clone().unwrap_or_default(),
        cap_drop_all: hc
            .cap_drop
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|c| c.eq_ignore_ascii_case("ALL")),
        no_new_privileges: security_opt
            .iter()
            .any(|o| o == "no-new-privileges" || o == "no-new-privileges:true"),
        security_opt,
        read_only_rootfs: hc.readonly_rootfs.unwrap_or(false),
        init: hc.init == Some(true),
        network_mode: hc.network_mode.clone().unwrap_or_default(),
        networks: networks_of(c),
        bind_mounts,
        tmpfs,
        other_mounts,
        memory_bytes: u64::try_from(hc.memory.unwrap_or(0)).unwrap_or(0),
        memory_swap_bytes: hc.memory_swap.unwrap_or(0),
        pids_limit: hc.pids_limit.unwrap_or(0),
        nano_cpus: nano_cpus_of(hc),
        restart_policy: hc
            .restart_policy
            .as_ref()
            .and_then(|p| p.name)
            .map(|n| n.as_ref().to_string())
            .unwrap_or_default(),
        devices: hc
            .devices
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|d| {
                format!(
                    "{}:{}",
                    d.path_on_host.unwrap_or_default(),
                    d.path_in_container.unwrap_or_default()
                )
            })
            .collect(),
        group_add: hc.group_add.clone().unwrap_or_default(),
        namespaces: namespaces_of(hc),
        published_ports: published_ports_of(hc, config),
    }
}

/// How an exited container last ended (none while it runs or before it ran).
fn last_exit_of(state: &EngineState, container_state: &ContainerState) -> Option<LastExit> {
    match *container_state {
        ContainerState::Exited { code } => Some(LastExit::exited(
            code,
            state.oom_killed == Some(true),
            state
                .finished_at
                .as_deref()
                .and_then(epoch_seconds)
                .and_then(rfc3339_epoch),
            state.error.clone(),
        )),
        ContainerState::Created
        | ContainerState::Running
        | ContainerState::Paused
        | ContainerState::Restarting
        | ContainerState::Removing
        | ContainerState::Dead => None,
    }
}

/// An inspect reduced to what the policy judges, plus what the controller tracks.
fn inspected(mut c: ContainerInspectResponse) -> Inspected {
    let config = c.config.take().unwrap_or_default();
    let hc = c.host_config.take().unwrap_or_default();
    let state = c.state.take().unwrap_or_default();
    let mounts = mounts_of(c.mounts.take().unwrap_or_default(), &hc);
    let effective = effective_of(&c, &config, &hc, mounts);
    let status_word = state
        .status
        .map(|s| s.as_ref().to_string())
        .unwrap_or_default();
    let running = state.running == Some(true);
    let container_state = state_from(&status_word, state.exit_code.unwrap_or(0));
    let last_exit = last_exit_of(&state, &container_state);
    Inspected {
        summary: Summary {
            id: c.id.unwrap_or_default(),
            name: c
                .name
                .as_deref()
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_string(),
            labels: config
                .labels
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            state: container_state,
            created: c.created.as_deref().and_then(epoch_seconds).unwrap_or(0),
        },
        effective,
        pid: state
            .pid
            .filter(|p| running && *p > 0)
            .and_then(|p| u32::try_from(p).ok()),
        image: config.image.unwrap_or_default(),
        image_id: c.image.take().unwrap_or_default(),
        restart_count: u64::try_from(c.restart_count.unwrap_or(0)).unwrap_or(0),
        started_at: state.started_at.filter(|s| !s.is_empty() && s != ZERO_TIME),
        last_exit,
        // Docker answers an inspect right after a start at once: nothing to gain.
        pid_files: None,
    }
}

/// The API version and the `Server` header of `GET /_ping` on the socket at `path` (None
/// when either is missing). One round trip of well under a millisecond, where bollard's
/// `negotiate_version` asks `/version`, which costs Docker 20.10 ten (it asks containerd and
/// runc theirs): a quarter of a status. The version is bollard's own when the engine's is
/// newer, as `negotiate_version` does.
async fn ping_headers(path: &str) -> std::io::Result<Option<(bollard::ClientVersion, String)>> {
    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;
    let stream = tokio::net::UnixStream::connect(path).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get("/_ping")
        .header(hyper::header::HOST, "docker")
        .body(Empty::<bytes::Bytes>::new())
        .map_err(std::io::Error::other)?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(std::io::Error::other);
    conn.abort();
    let resp = resp?;
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let api = header("api-version").and_then(|v| {
        let (major, minor) = v.split_once('.')?;
        let theirs = bollard::ClientVersion {
            major_version: major.parse().ok()?,
            minor_version: minor.parse().ok()?,
        };
        Some(if theirs < *bollard::API_DEFAULT_VERSION {
            theirs
        } else {
            *bollard::API_DEFAULT_VERSION
        })
    });
    Ok(api.zip(header("server")))
}

fn label_filters(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A linked container also lists `/other/alias` names; its own name is the one without a
/// second slash.
fn primary_name(names: &[String]) -> String {
    let stripped = names.iter().map(|n| n.trim_start_matches('/'));
    stripped
        .clone()
        .find(|n| !n.contains('/'))
        .or_else(|| stripped.clone().next())
        .unwrap_or_default()
        .to_string()
}

/// `Exited (137) 3 minutes ago` -> 137.
fn exit_code_from_status(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split(')').next()?.trim().parse().ok()
}

/// Escapes every ASCII punctuation character, which Go's regexp always takes literally.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if c.is_ascii() && !c.is_ascii_alphanumeric() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// RFC 3339 (`2024-05-01T12:00:00.123456789Z` or with `+hh:mm`) to seconds since the epoch.
fn epoch_seconds(s: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(rest.as_bytes()[0], b'+' | b'-') => {
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            let o = oh * 3600 + om * 60;
            if rest.starts_with('-') { -o } else { o }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

fn status(e: &BollardError) -> Option<u16> {
    if let BollardError::DockerResponseServerError { status_code, .. } = e {
        Some(*status_code)
    } else {
        None
    }
}

/// The engine's message as is; for anything else the whole cause chain, because bollard's
/// own text ("Error in the hyper legacy client: client error (Connect)") hides the reason.
fn message(e: &BollardError) -> String {
    if let BollardError::DockerResponseServerError { message, .. } = e {
        return message.trim().to_string();
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        source = s.source();
    }
    out
}

fn io_kind(e: &BollardError) -> Option<ErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = s.source();
    }
    None
}

#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
fn is_connection_error(e: &BollardError) -> bool {
    match e {
        BollardError::HyperLegacyError { err } => err.is_connect(),
        BollardError::SocketNotFoundError(_) => true,
        // bollard's other errors (two dozen, growing): judged by the I/O error under them.
        _ => matches!(
            io_kind(e),
            Some(
                ErrorKind::ConnectionRefused
                    | ErrorKind::NotFound
                    | ErrorKind::ConnectionReset
                    | ErrorKind::BrokenPipe
            )
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    use super::*;
    use crate::core::container::ContainerState;

    const IMAGE: &str = "ateam-demo:latest";

    fn uri() -> String {
        std::env::var("ATEAM_TEST_DOCKER").unwrap_or_else(|_| {
            panic!(
                "ATEAM_TEST_DOCKER is not set: run scripts/engines.sh as root, then \
                 `. /run/ateam-ci/env` (it points at the test dockerd socket)"
            )
        })
    }

    async fn backend() -> DockerBackend {
        let uri = uri();
        match DockerBackend::connect(&uri).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to {uri}: {e}"),
        }
    }

    fn unique(tag: &str) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("ateam-test-{tag}-{}-{nanos}", std::process::id())
    }

    /// Removes the named containers when the test ends, also when it panics.
    struct Cleanup(Vec<String>);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            let names = std::mem::take(&mut self.0);
            // Drop cannot await, and the test's runtime is busy: use a runtime of our own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().expect("cleanup runtime");
                rt.block_on(async {
                    if let Ok(b) = DockerBackend::connect(&uri()).await {
                        for n in names {
                            let _ = b.remove(&n).await;
                        }
                    }
                });
            })
            .join();
        }
    }

    fn request(
        name: &str,
        labels: &BTreeMap<String, String>,
        ro: &std::path::Path,
    ) -> CreateRequest {
        CreateRequest {
            name: name.into(),
            image: IMAGE.into(),
            entrypoint: vec!["/bin/agent.sh".into()],
            cmd: vec![],
            env: BTreeMap::from([("ATEAM_READ_DIRS".to_string(), "/ro".to_string())]),
            user: "1000:1000".into(),
            workdir: "/ro".into(),
            mounts: vec![Mount {
                source: ro.to_path_buf(),
                target: "/ro".into(),
                read_only: true,
            }],
            tmpfs: BTreeMap::from([("/tmp".to_string(), "rw,nosuid,nodev,size=16m".to_string())]),
            memory_bytes: 64 << 20,
            memory_swap_bytes: 64 << 20,
            pids: 64,
            nano_cpus: Some(500_000_000),
            network_none: true,
            network_name: None,
            labels: labels.clone(),
            cap_drop_all: true,
            no_new_privileges: true,
            read_only_rootfs: true,
            init: true,
            userns_keep_id: false,
            cgroupns_private: true,
            terminal: false,
        }
    }

    fn ro_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod 0755");
        std::fs::write(dir.path().join("seen"), "hello").expect("write a file");
        dir
    }

    async fn wait_running(b: &DockerBackend, id: &str) {
        for _ in 0..50 {
            if b.inspect(id).await.expect("inspect").summary.state == ContainerState::Running {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{id} never ran");
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn ping_reports_the_engine() {
        let info = backend().await.ping().await.expect("ping");
        assert_eq!(info.kind, EngineKind::Docker);
        assert!(!info.version.is_empty(), "{info:?}");
        // Negotiated down to the daemon's own version (20.10 -> 1.41), never bollard's default.
        let (major, minor) = info.api_version.split_once('.').expect("x.y");
        assert_eq!(major, "1");
        assert!(minor.parse::<u32>().expect("minor") <= 53, "{info:?}");
        assert!(matches!(info.cgroup_version, 1 | 2), "{info:?}");
        assert!(
            info.limits_enforced,
            "rootful Docker enforces limits: {info:?}"
        );
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn a_hardened_container_is_created_inspected_run_and_removed() {
        let b = backend().await;
        let name = unique("life");
        let renamed = format!("{name}-renamed");
        let _cleanup = Cleanup(vec![name.clone(), renamed.clone()]);
        let dir = ro_dir();
        let labels = BTreeMap::from([
            ("ateam.test".to_string(), name.clone()),
            ("ateam.member".to_string(), "tester".to_string()),
        ]);
        let req = request(&name, &labels, dir.path());

        let id = b.create(&req).await.expect("create");
        let got = b.inspect(&id).await.expect("inspect");
        let e = &got.effective;
        // Docker's own lists of hidden kernel paths, as reported; the policy checks them.
        assert!(
            e.masked_paths
                .as_ref()
                .is_some_and(|m| m.iter().any(|p| p == "/proc/kcore")),
            "{:?}",
            e.masked_paths
        );
        let expected = Effective {
            image: IMAGE.into(),
            entrypoint: vec!["/bin/agent.sh".into()],
            cmd: vec![],
            security_opt: vec!["no-new-privileges".into()],
            apparmor_profile: e.apparmor_profile.clone(),
            masked_paths: e.masked_paths.clone(),
            readonly_paths: e.readonly_paths.clone(),
            sysctls: vec![],
            cgroup_parent: String::new(),
            oom_kill_disable: false,
            device_cgroup_rules: vec![],
            user: "1000:1000".into(),
            privileged: false,
            cap_add: vec![],
            cap_drop_all: true,
            no_new_privileges: true,
            read_only_rootfs: true,
            init: true,
            network_mode: "none".into(),
            networks: vec![],
            bind_mounts: vec![Mount {
                source: dir.path().to_path_buf(),
                target: PathBuf::from("/ro"),
                read_only: true,
            }],
            tmpfs: BTreeMap::from([("/tmp".to_string(), "rw,nosuid,nodev,size=16m".to_string())]),
            other_mounts: vec![],
            memory_bytes: 64 << 20,
            memory_swap_bytes: 64 << 20,
            pids_limit: 64,
            nano_cpus: 500_000_000,
            restart_policy: "no".into(),
            devices: vec![],
            group_add: vec![],
            namespaces: [
                ("pid", ""),
                ("ipc", "private"),
                ("uts", ""),
                ("userns", ""),
                ("cgroupns", "private"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            published_ports: vec![],
        };
        assert_eq!(e.user, expected.user);
        assert_eq!(e.privileged, expected.privileged);
        assert_eq!(e.cap_add, expected.cap_add);
        assert_eq!(e.cap_drop_all, expected.cap_drop_all);
        assert_eq!(e.no_new_privileges, expected.no_new_privileges);
        assert_eq!(e.read_only_rootfs, expected.read_only_rootfs);
        assert_eq!(e.init, expected.init);
        assert_eq!(e.network_mode, expected.network_mode);
        assert_eq!(e.bind_mounts, expected.bind_mounts);
        assert_eq!(e.tmpfs, expected.tmpfs);
        assert_eq!(e.other_mounts, expected.other_mounts);
        assert_eq!(e.memory_bytes, expected.memory_bytes);
        assert_eq!(e.memory_swap_bytes, expected.memory_swap_bytes);
        assert_eq!(e.pids_limit, expected.pids_limit);
        assert_eq!(e.nano_cpus, expected.nano_cpus);
        assert_eq!(e.restart_policy, expected.restart_policy);
        assert_eq!(e.devices, expected.devices);
        assert_eq!(e.group_add, expected.group_add);
        assert_eq!(e.namespaces, expected.namespaces);
        assert_eq!(e.published_ports, expected.published_ports);
        assert_eq!(*e, expected);
        assert_eq!(got.summary.id, id);
        assert_eq!(got.summary.name, name);
        // The image's own labels come along (Docker merges them in): ours must all be there.
        assert!(
            labels
                .iter()
                .all(|(k, v)| got.summary.labels.get(k) == Some(v)),
            "{:?}",
            got.summary.labels
        );
        assert!(got.summary.labels.contains_key("ateam.demo.sha256"));
        assert_eq!(got.summary.state, ContainerState::Created);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        assert!(
            (now - got.summary.created).abs() < 120,
            "created {} vs now {now}",
            got.summary.created
        );
        assert_eq!(got.pid, None);
        assert_eq!(got.image, IMAGE);
        assert_eq!(got.started_at, None);

        b.start(&id).await.expect("start");
        b.start(&id)
            .await
            .expect("starting a running container is fine");
        wait_running(&b, &id).await;
        let running = b.inspect(&id).await.expect("inspect running");
        assert!(running.pid.is_some_and(|p| p > 1), "{:?}", running.pid);
        assert!(running.started_at.is_some());
        assert_eq!(running.restart_count, 0);

        let out = b
            .exec(&id, &["id".into(), "-u".into()])
            .await
            .expect("exec id");
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(out.stdout.trim(), "1000", "{out:?}");
        let out = b
            .exec(&id, &["touch".into(), "/ro/x".into()])
            .await
            .expect("exec touch");
        assert_ne!(out.code, 0, "{out:?}");
        assert!(out.stderr.contains("Read-only"), "{out:?}");
        assert!(!dir.path().join("x").exists());
        let out = b
            .exec(
                &id,
                &[
                    "sh".into(),
                    "-c".into(),
                    "echo out; echo err >&2; exit 3".into(),
                ],
            )
            .await
            .expect("exec sh");
        assert_eq!(
            out,
            ExecOutput {
                code: 3,
                stdout: "out\n".into(),
                stderr: "err\n".into()
            }
        );

        let mut logs = String::new();
        for _ in 0..50 {
            logs = super::super::logs_text(&b, &id, 100).await.expect("logs");
            if logs.contains("agent: sleeping") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(logs.contains("agent: started as uid=1000"), "{logs}");
        assert!(logs.contains("read dir /ro (read-only): seen"), "{logs}");
        let last = super::super::logs_text(&b, &id, 1)
            .await
            .expect("logs tail 1");
        assert_eq!(last.lines().count(), 1, "{last}");

        let listed = b.list(&labels).await.expect("list");
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].id, id);
        assert_eq!(listed[0].name, name);
        assert_eq!(listed[0].labels, got.summary.labels);
        assert_eq!(listed[0].state, ContainerState::Running);
        assert_eq!(listed[0].created, got.summary.created);
        let one_label = BTreeMap::from([("ateam.test".to_string(), name.clone())]);
        assert_eq!(b.list(&one_label).await.expect("list").len(), 1);
        let wrong = BTreeMap::from([
            ("ateam.test".to_string(), name.clone()),
            ("ateam.member".to_string(), "someone-else".to_string()),
        ]);
        assert!(b.list(&wrong).await.expect("list").is_empty());

        let found = b.find_by_name(&name).await.expect("find").expect("found");
        assert_eq!(found.id, id);
        // The name filter is a regex and a substring: neither a prefix nor a `.` matches.
        assert!(
            b.find_by_name(&name[..name.len() - 1])
                .await
                .expect("find")
                .is_none()
        );
        assert!(
            b.find_by_name(&name.replacen('-', ".", 1))
                .await
                .expect("find")
                .is_none()
        );

        match b.create(&req).await {
            Err(BackendError::NameConflict { name: n }) => assert_eq!(n, name),
            other => panic!("expected NameConflict, got {other:?}"),
        }

        b.stop(&id, 10).await.expect("stop");
        b.stop(&id, 10)
            .await
            .expect("stopping a stopped container is fine");
        let stopped = b.inspect(&id).await.expect("inspect stopped");
        // The agent exits 0 on SIGTERM: a quick stop, not a kill.
        assert_eq!(stopped.summary.state, ContainerState::Exited { code: 0 });
        assert_eq!(stopped.pid, None);
        let listed = b.list(&labels).await.expect("list stopped");
        assert_eq!(listed[0].state, ContainerState::Exited { code: 0 });

        b.rename(&id, &renamed).await.expect("rename");
        assert_eq!(b.inspect(&id).await.expect("inspect").summary.name, renamed);
        assert!(b.find_by_name(&name).await.expect("find").is_none());

        b.remove(&id).await.expect("remove");
        match b.inspect(&id).await {
            Err(BackendError::NotFound { id: gone }) => assert_eq!(gone, id),
            other => panic!("expected NotFound, got {other:?}"),
        }
        b.remove(&id).await.expect("removing what is gone is fine");
        assert!(matches!(
            b.start(&id).await,
            Err(BackendError::NotFound { .. })
        ));
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn an_exited_container_lists_with_its_exit_code() {
        let b = backend().await;
        let name = unique("exit");
        let _cleanup = Cleanup(vec![name.clone()]);
        let dir = ro_dir();
        let labels = BTreeMap::from([("ateam.test".to_string(), name.clone())]);
        let mut req = request(&name, &labels, dir.path());
        req.entrypoint = vec!["/bin/sh".into(), "-c".into(), "exit 7".into()];
        let id = b.create(&req).await.expect("create");
        b.start(&id).await.expect("start");
        let mut state = ContainerState::Created;
        for _ in 0..50 {
            state = b.list(&labels).await.expect("list")[0].state;
            if matches!(state, ContainerState::Exited { .. }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(state, ContainerState::Exited { code: 7 });
        assert_eq!(
            b.inspect(&id).await.expect("inspect").summary.state,
            ContainerState::Exited { code: 7 }
        );
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn the_demo_image_command_is_the_agent() {
        let b = backend().await;
        assert_eq!(
            b.image_command(IMAGE).await.expect("image command"),
            ["/bin/agent.sh"]
        );
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn a_missing_image_is_never_pulled() {
        let b = backend().await;
        let missing = "ateam-test-no-such-image:latest";
        match b.image_command(missing).await {
            Err(BackendError::ImageMissing { engine, image }) => {
                assert_eq!((engine.as_str(), image.as_str()), ("docker", missing))
            }
            other => panic!("expected ImageMissing, got {other:?}"),
        }
        let name = unique("noimage");
        let _cleanup = Cleanup(vec![name.clone()]);
        let dir = ro_dir();
        let mut req = request(&name, &BTreeMap::new(), dir.path());
        req.image = missing.into();
        match b.create(&req).await {
            Err(BackendError::ImageMissing { image, .. }) => assert_eq!(image, missing),
            other => panic!("expected ImageMissing, got {other:?}"),
        }
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn a_missing_bind_source_fails_instead_of_being_created() {
        let b = backend().await;
        let name = unique("nosource");
        let _cleanup = Cleanup(vec![name.clone()]);
        let dir = ro_dir();
        let absent = dir.path().join("absent");
        let mut req = request(&name, &BTreeMap::new(), &absent);
        req.mounts[0].source = absent.clone();
        match b.create(&req).await {
            Err(BackendError::Engine { op, message, .. }) => {
                assert_eq!(op, "create container");
                assert!(message.contains("does not exist"), "{message}");
            }
            other => panic!("expected an engine error, got {other:?}"),
        }
        assert!(!absent.exists(), "Docker created the missing bind source");
    }

    #[tokio::test]
    #[ignore = "needs a Docker engine: scripts/engines.sh"]
    async fn events_report_a_start() {
        let b = backend().await;
        let name = unique("events");
        let _cleanup = Cleanup(vec![name.clone()]);
        let dir = ro_dir();
        let labels = BTreeMap::from([("ateam.test".to_string(), name.clone())]);
        let id = b
            .create(&request(&name, &labels, dir.path()))
            .await
            .expect("create");
        // Subscribe, act, and only then poll: nothing in between may be lost.
        let mut events = b.events(&labels).await.expect("events");
        b.start(&id).await.expect("start");
        let seen = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(ev) = events.next().await {
                if ev.expect("event").id == id {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(seen, Ok(true), "no event for {id}");
        // Other labels see nothing of it.
        let other = BTreeMap::from([("ateam.test".to_string(), format!("{name}-other"))]);
        let mut quiet = b.events(&other).await.expect("events");
        b.stop(&id, 5).await.expect("stop");
        let nothing = tokio::time::timeout(Duration::from_secs(2), quiet.next()).await;
        assert!(nothing.is_err(), "unexpected event: {nothing:?}");
    }

    #[tokio::test]
    async fn nothing_answering_is_unavailable_and_names_the_socket() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sock = dir.path().join("docker.sock");
        match DockerBackend::connect(&format!("unix://{}", sock.display())).await {
            Err(BackendError::Unavailable { engine, socket, .. }) => {
                assert_eq!(
                    (engine.as_str(), socket),
                    ("docker", sock.display().to_string())
                )
            }
            other => panic!("expected Unavailable, got {:?}", other.err()),
        }
        // Port 1 on loopback: nothing listens there.
        match DockerBackend::connect("tcp://127.0.0.1:1").await {
            Err(BackendError::Unavailable { socket, hint, .. }) => {
                assert_eq!(socket, "127.0.0.1:1");
                assert!(hint.contains("refused"), "{hint}");
            }
            other => panic!("expected Unavailable, got {:?}", other.err()),
        }
        assert!(matches!(
            DockerBackend::connect("ssh://somewhere").await,
            Err(BackendError::Engine { .. })
        ));
    }

    /// Everything the hardened create never sets, as Docker 20.10 reports it.
    #[test]
    fn an_unsafe_inspect_shows_every_difference() {
        let json = serde_json::json!({
            "Id": "abc",
            "Name": "/loose",
            "Created": "2024-02-29T12:34:56.5Z",
            "RestartCount": 2,
            "State": {"Status": "running", "Running": true, "Pid": 4242, "ExitCode": 0,
                      "StartedAt": "2024-02-29T12:35:00Z"},
            "Config": {"User": "", "Image": "x:1", "Labels": {"a": "b"},
                       "ExposedPorts": {"80/tcp": {}}},
            "HostConfig": {
                "Privileged": true, "CapAdd": ["SYS_ADMIN"], "CapDrop": ["all"],
                "SecurityOpt": ["no-new-privileges:true", "seccomp=unconfined"],
                "ReadonlyRootfs": false, "Init": null, "NetworkMode": "host",
                "Tmpfs": {"/run": ""}, "Memory": 0, "MemorySwap": -1, "PidsLimit": null,
                "NanoCpus": 0, "CpuQuota": 150000, "CpuPeriod": 100000,
                "RestartPolicy": {"Name": "always", "MaximumRetryCount": 0},
                "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse",
                             "CgroupPermissions": "rwm"}],
                "GroupAdd": ["docker"], "PidMode": "host", "IpcMode": "shareable",
                "UTSMode": "host", "UsernsMode": "", "CgroupnsMode": "host",
                "PortBindings": {"22/tcp": [{"HostIp": "", "HostPort": "2222"}], "443/tcp": []},
                "PublishAllPorts": true
            },
            "Mounts": [
                {"Type": "bind", "Source": "/var/run/docker.sock",
                 "Destination": "/var/run/docker.sock", "RW": true},
                {"Type": "volume", "Name": "v", "Source": "/var/lib/docker/volumes/v/_data",
                 "Destination": "/data", "RW": true},
                {"Type": "tmpfs", "Source": "", "Destination": "/run", "RW": true},
                {"Type": "tmpfs", "Source": "", "Destination": "/scratch", "RW": true}
            ]
        });
        let c: ContainerInspectResponse = serde_json::from_value(json).expect("deserialize");
        let i = inspected(c);
        assert_eq!(
            i.effective,
            Effective {
                image: "x:1".into(),
                entrypoint: vec![],
                cmd: vec![],
                security_opt: vec!["no-new-privileges:true".into(), "seccomp=unconfined".into()],
                apparmor_profile: String::new(),
                masked_paths: None,
                readonly_paths: None,
                sysctls: vec![],
                cgroup_parent: String::new(),
                oom_kill_disable: false,
                device_cgroup_rules: vec![],
                user: "".into(),
                privileged: true,
                cap_add: vec!["SYS_ADMIN".into()],
                cap_drop_all: true,
                no_new_privileges: true,
                read_only_rootfs: false,
                init: false,
                network_mode: "host".into(),
                networks: vec![],
                bind_mounts: vec![Mount {
                    source: "/var/run/docker.sock".into(),
                    target: "/var/run/docker.sock".into(),
                    read_only: false,
                }],
                tmpfs: BTreeMap::from([
                    ("/run".to_string(), String::new()),
                    ("/scratch".to_string(), String::new())
                ]),
                other_mounts: vec!["volume:/var/lib/docker/volumes/v/_data:/data".into()],
                memory_bytes: 0,
                memory_swap_bytes: -1,
                pids_limit: 0,
                nano_cpus: 1_500_000_000,
                restart_policy: "always".into(),
                devices: vec!["/dev/fuse:/dev/fuse".into()],
                group_add: vec!["docker".into()],
                namespaces: [
                    ("pid", "host"),
                    ("ipc", "shareable"),
                    ("uts", "host"),
                    ("userns", ""),
                    ("cgroupns", "host")
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
                published_ports: vec!["22/tcp".into(), "all".into(), "exposed:80/tcp".into()],
            }
        );
        assert_eq!(i.summary.name, "loose");
        assert_eq!(i.summary.state, ContainerState::Running);
        assert_eq!(i.summary.created, 1_709_210_096);
        assert_eq!(i.pid, Some(4242));
        assert_eq!(i.image, "x:1");
        assert_eq!(i.restart_count, 2);
        assert_eq!(i.started_at.as_deref(), Some("2024-02-29T12:35:00Z"));
    }

    #[test]
    fn dates_and_statuses_parse() {
        assert_eq!(epoch_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            epoch_seconds("2024-02-29T12:34:56.123456789Z"),
            Some(1_709_210_096)
        );
        assert_eq!(
            epoch_seconds("2024-02-29T14:34:56+02:00"),
            Some(1_709_210_096)
        );
        assert_eq!(epoch_seconds("0001-01-01T00:00:00Z"), Some(-62_135_596_800));
        assert_eq!(epoch_seconds("yesterday"), None);
        assert_eq!(
            exit_code_from_status("Exited (137) 3 minutes ago"),
            Some(137)
        );
        assert_eq!(
            exit_code_from_status("Exited (0) Less than a second ago"),
            Some(0)
        );
        assert_eq!(exit_code_from_status("Up 3 minutes"), None);
        assert_eq!(regex_escape("a.b-c_1"), "a\\.b\\-c\\_1");
        assert_eq!(
            primary_name(&["/web/db".into(), "/db".into()]),
            "db".to_string()
        );
    }
}
