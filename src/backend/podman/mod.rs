//! Podman through podman-api (libpod API).
//!
//! Everything goes through podman-api except two calls whose podman-api 0.11 options are
//! misspelt and silently ignored by Podman: `create` (a raw POST of a libpod SpecGenerator, see
//! `create_body`) and `stop` (its timeout). What libpod inspect reports, as checked on
//! Podman 4.3.1 (cgroup v1), and how it is read here:
//!
//! - Dropped capabilities: `HostConfig.CapDrop` lists the individual `CAP_*` names, never
//!   "ALL"; the top-level `BoundingCaps` is null when nothing is left, so that is what
//!   `cap_drop_all` reads.
//! - no-new-privileges: `HostConfig.SecurityOpt` contains `no-new-privileges`.
//! - tmpfs mounts (sent as mounts of type `tmpfs`) appear in `HostConfig.Tmpfs`, not `Mounts`.
//! - `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf`, `/run/.containerenv` and the init
//!   binary are bind-mounted by Podman but do not appear in `Mounts`.
//! - Rootless on cgroup v1: memory, swap, pids and cpu limits are accepted but ignored and
//!   inspect reports them as 0 (`ping` says `limits_enforced: false`).
//! - `userns=keep-id` (rootless only) is reported as `UsernsMode: "private"`.
//! - Rootless, several creates or starts at once sometimes fail while Podman 4.3.1 reads the
//!   user's subordinate ids (`cannot read subids`, seen in its log as `no subuid ranges found`
//!   with /etc/subuid unchanged; on create `keep-id requires additional UIDs or GIDs`, on start
//!   runc's `can't get final child's PID from pipe`): about one apply in five of a few members.
//!   Those two errors are retried (`transient`) a few times after a short pause.
//!
//! One file per job, the same files as `docker/`: `connect`, `list`, `inspect`, `create`,
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

use async_trait::async_trait;
use containers_api::conn::RequestClient;
use futures_util::stream::BoxStream;
use podman_api::Podman;

use super::{
    Backend, ContainerEvent, CreateRequest, EngineInfo, EngineKind, ExecOutput, ImageConfig,
    Inspected, LogOptions, PathStat, Result, Summary,
};

const ENGINE: &str = "podman";
/// The prefix of the raw libpod calls. Podman serves any `/vX/libpod/` prefix the same way; the
/// fields used here are all in the 4.x SpecGenerator.
const LIBPOD: &str = "/v4.0.0/libpod";

/// Podman's libpod API, through podman-api.
pub struct PodmanBackend {
    endpoint: String,
    podman: Podman,
    /// A plain client on the same socket, for the calls podman-api cannot make correctly.
    raw: RequestClient<podman_api::Error>,
    rootless: bool,
    /// 1 or 2.
    cgroup_version: u8,
}

#[async_trait]
impl Backend for PodmanBackend {
    fn kind(&self) -> EngineKind {
        EngineKind::Podman {
            rootless: self.rootless,
        }
    }

    fn endpoint(&self) -> &str {
        &self.endpoint
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

    async fn events(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<BoxStream<'static, Result<ContainerEvent>>> {
        events::events(self, labels).await
    }
}
