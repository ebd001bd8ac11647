//! Docker through bollard.
//!
//! The client is pinned to whatever API version the daemon offers (`negotiate_version`): bollard
//! speaks 1.53 by default and Docker 20.10 (API 1.41) answers newer versions with HTTP 400.
//! bollard is built without its `chrono`/`time` features, so engine dates arrive as RFC 3339
//! strings and are parsed here.
//!
//! One file per job, the same files as `podman/`: `connect`, `list`, `inspect`, `create`,
//! `lifecycle`, `networks`, `exec`, `images`, `events`, `errors`, `tests`. The trait's
//! implementation below says which file does what.

mod connect;
mod create;
mod errors;
mod events;
mod exec;
mod images;
mod inspect;
mod lifecycle;
mod list;
mod networks;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use futures_util::stream::BoxStream;

use super::{
    Backend, ContainerEvent, CreateRequest, EngineInfo, EngineKind, EventMark, ExecOutput,
    ImageConfig, Inspected, LogOptions, PathStat, Result, Summary,
};

const ENGINE: &str = "docker";

/// Per-request limit for everything but `stop`, which waits as long as it was told to.
/// Streams (logs, exec output, events) are only limited until the engine starts answering.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The Docker Engine API, through bollard.
pub struct DockerBackend {
    docker: Docker,
    endpoint: String,
    /// The socket path or `host:port`, as error messages name it.
    socket: String,
    /// Who answered the connect's `_ping` (`Server` header and API version), when it said.
    identity: Option<String>,
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
        connect::ping(self).await
    }

    async fn gvisor(&self) -> Result<crate::backend::GvisorSupport> {
        connect::gvisor(self).await
    }

    async fn list(&self, labels: &BTreeMap<String, String>) -> Result<Vec<Summary>> {
        list::list(self, labels).await
    }

    async fn find_by_name(&self, name: &str) -> Result<Option<Summary>> {
        list::find_by_name(self, name).await
    }

    async fn inspect(&self, id: &str) -> Result<Inspected> {
        inspect::inspect(self, id).await
    }

    async fn build(&self, req: &super::BuildRequest) -> Result<()> {
        images::build(self, req).await
    }

    async fn pull(&self, image: &str) -> Result<()> {
        images::pull(self, image).await
    }

    async fn image_config(&self, image: &str) -> Result<ImageConfig> {
        images::image_config(self, image).await
    }

    async fn create_probe(&self, image: &str, labels: &BTreeMap<String, String>) -> Result<String> {
        create::create_probe(self, image, labels).await
    }

    async fn stat(&self, id: &str, path: &str) -> Result<Option<PathStat>> {
        exec::stat(self, id, path).await
    }

    async fn read_file(&self, id: &str, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        exec::read_file(self, id, path, max).await
    }

    async fn create(&self, req: &CreateRequest) -> Result<String> {
        create::create(self, req).await
    }

    async fn start(&self, id: &str) -> Result<()> {
        lifecycle::start(self, id).await
    }

    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<()> {
        lifecycle::stop(self, id, timeout_secs).await
    }

    async fn remove(&self, id: &str) -> Result<()> {
        lifecycle::remove(self, id).await
    }

    async fn rename(&self, id: &str, name: &str) -> Result<()> {
        lifecycle::rename(self, id, name).await
    }

    async fn unpause(&self, id: &str) -> Result<()> {
        lifecycle::unpause(self, id).await
    }

    async fn resize_terminal(&self, id: &str, rows: u16, cols: u16) -> Result<()> {
        exec::resize_terminal(self, id, rows, cols).await
    }

    async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<()> {
        networks::ensure_network(self, name, labels).await
    }

    async fn remove_network(&self, name: &str) -> Result<()> {
        networks::remove_network(self, name).await
    }

    async fn exec(&self, id: &str, cmd: &[String]) -> Result<ExecOutput> {
        exec::exec(self, id, cmd).await
    }

    async fn logs(&self, id: &str, o: LogOptions, sink: &mut super::LogSink<'_>) -> Result<()> {
        exec::logs(self, id, o, sink).await
    }

    async fn recent_events(&self, since_nano: i64) -> Result<Option<Vec<EventMark>>> {
        events::recent_events(self, since_nano).await
    }

    async fn events(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<BoxStream<'static, Result<ContainerEvent>>> {
        events::events(self, labels).await
    }
}
