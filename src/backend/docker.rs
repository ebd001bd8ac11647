//! Docker through bollard.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{
    Backend, BackendError, CreateRequest, EngineInfo, EngineKind, ExecOutput, Inspected, Result,
    Summary,
};

pub struct DockerBackend {
    endpoint: String,
}

impl DockerBackend {
    pub async fn connect(uri: &str) -> Result<Self> {
        Err(BackendError::Engine {
            engine: "docker".into(),
            op: "connect".into(),
            message: format!("not implemented yet ({uri})"),
        })
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
    async fn ping(&self) -> Result<EngineInfo> {
        todo!()
    }
    async fn list(&self, _labels: &BTreeMap<String, String>) -> Result<Vec<Summary>> {
        todo!()
    }
    async fn find_by_name(&self, _name: &str) -> Result<Option<Summary>> {
        todo!()
    }
    async fn inspect(&self, _id: &str) -> Result<Inspected> {
        todo!()
    }
    async fn image_command(&self, _image: &str) -> Result<Vec<String>> {
        todo!()
    }
    async fn create(&self, _req: &CreateRequest) -> Result<String> {
        todo!()
    }
    async fn start(&self, _id: &str) -> Result<()> {
        todo!()
    }
    async fn stop(&self, _id: &str, _timeout_secs: u32) -> Result<()> {
        todo!()
    }
    async fn remove(&self, _id: &str) -> Result<()> {
        todo!()
    }
    async fn rename(&self, _id: &str, _name: &str) -> Result<()> {
        todo!()
    }
    async fn exec(&self, _id: &str, _cmd: &[String]) -> Result<ExecOutput> {
        todo!()
    }
    async fn logs(&self, _id: &str, _tail: usize) -> Result<String> {
        todo!()
    }
    async fn events(
        &self,
        _labels: &BTreeMap<String, String>,
    ) -> Result<futures_util::stream::BoxStream<'static, Result<String>>> {
        todo!()
    }
}
