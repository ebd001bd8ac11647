//! Docker: building, pulling and reading images.

use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::stream::StreamExt;

use super::errors::status_of;
use super::{DockerBackend, ENGINE};
use crate::backend::{BackendError, ImageConfig, Result};

pub(super) async fn build(b: &DockerBackend, req: &crate::backend::BuildRequest) -> Result<()> {
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
    let mut stream = b.docker.build_image(opts, None, Some(body));
    while let Some(step) = stream.next().await {
        let step = step.map_err(|e| b.engine_err(&format!("build {}", req.tag), e))?;
        if let Some(s) = &step.stream {
            crate::backend::keep_tail(&mut out, s);
        }
        if let Some(e) = step.error_detail.and_then(|d| d.message) {
            return Err(BackendError::Engine {
                engine: ENGINE.into(),
                op: format!("build {}", req.tag),
                message: format!("{e}\n{}", crate::backend::build_tail(&out)),
            });
        }
    }
    Ok(())
}

pub(super) async fn pull(b: &DockerBackend, image: &str) -> Result<()> {
    let opts = CreateImageOptionsBuilder::default()
        .from_image(&crate::backend::with_tag(image))
        .build();
    let mut progress = b.docker.create_image(Some(opts), None, None);
    while let Some(step) = progress.next().await {
        step.map_err(|e| b.engine_err(&format!("pull {image}"), e))?;
    }
    Ok(())
}

pub(super) async fn image_config(b: &DockerBackend, image: &str) -> Result<ImageConfig> {
    let img = b
        .docker
        .inspect_image(image)
        .await
        .map_err(|e| match status_of(&e) {
            Some(404) => BackendError::ImageMissing {
                engine: ENGINE.into(),
                image: image.into(),
            },
            _ => b.engine_err("inspect image", e),
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
