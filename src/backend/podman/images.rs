//! Podman: building, pulling and reading images.

use std::collections::BTreeMap;

use containers_api::conn::Payload;
use containers_api::conn::hyper::StatusCode;
use futures_util::StreamExt;
use podman_api::opts::PullOpts;
use serde_json::Value;

use super::errors::{engine_err, message_of, status_of};
use super::{ENGINE, LIBPOD, PodmanBackend};
use crate::backend::{BackendError, ImageConfig, Result};

pub(super) async fn build(b: &PodmanBackend, req: &crate::backend::BuildRequest) -> Result<()> {
    // libpod's build (4.3): `networkmode` is buildah's policy by name (Docker's `none` is
    // read as the default, and RUN got the host's interfaces here), and without
    // `nsoptions` RUN shares the host's network namespace: both say none.
    // `pullpolicy=never` pulls nothing (the caller checked every FROM is here).
    let json = |v: &BTreeMap<String, String>| serde_json::to_string(v).unwrap_or_default();
    let query = [
        ("dockerfile", req.dockerfile.clone()),
        ("t", req.tag.clone()),
        ("networkmode", "NetworkDisabled".into()),
        (
            "nsoptions",
            r#"[{"Name":"network","Host":false,"Path":""}]"#.into(),
        ),
        ("pullpolicy", "never".into()),
        ("rm", "true".into()),
        ("forcerm", "true".into()),
        ("buildargs", json(&req.args)),
        ("labels", json(&req.labels)),
        ("target", req.target.clone()),
    ];
    let ep = containers_api::url::construct_ep(
        format!("{LIBPOD}/build"),
        Some(containers_api::url::encoded_pairs(query)),
    );
    // One JSON object per step, read as they come; an error is one of them. Only the
    // last of what RUN printed is kept.
    let mut out = String::new();
    let mut steps = Box::pin(b.raw.post_into_stream::<_, Value>(
        ep,
        Payload::XTar(req.context.clone()),
        None,
    ));
    while let Some(v) = steps.next().await {
        let v = v.map_err(|e| engine_err(&format!("build {}", req.tag), &e))?;
        if let Some(s) = v.get("stream").and_then(Value::as_str) {
            crate::backend::keep_tail(&mut out, s);
        }
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(BackendError::Engine {
                engine: ENGINE.into(),
                op: format!("build {}", req.tag),
                message: format!("{e}\n{}", crate::backend::build_tail(&out)),
            });
        }
    }
    Ok(())
}

pub(super) async fn pull(b: &PodmanBackend, image: &str) -> Result<()> {
    let opts = PullOpts::builder()
        .reference(crate::backend::with_tag(image))
        .quiet(true)
        .build();
    let images = b.podman.images();
    let mut progress = images.pull(&opts);
    while let Some(report) = progress.next().await {
        let report = report.map_err(|e| engine_err(&format!("pull {image}"), &e))?;
        if let Some(error) = report.error.filter(|e| !e.is_empty()) {
            return Err(BackendError::Engine {
                engine: ENGINE.into(),
                op: format!("pull {image}"),
                message: error,
            });
        }
    }
    Ok(())
}

pub(super) async fn image_config(b: &PodmanBackend, image: &str) -> Result<ImageConfig> {
    let data = b.podman.images().get(image).inspect().await.map_err(|e| {
        if status_of(&e) == Some(StatusCode::NOT_FOUND)
            || message_of(&e).contains("image not known")
        {
            BackendError::ImageMissing {
                engine: ENGINE.into(),
                image: image.into(),
            }
        } else {
            engine_err("image inspect", &e)
        }
    })?;
    let id = data.id.clone().unwrap_or_default();
    let (entrypoint, cmd, env) = data
        .config
        .map(|c| (c.entrypoint, c.cmd, c.env))
        .unwrap_or_default();
    Ok(ImageConfig {
        id,
        command: entrypoint
            .unwrap_or_default()
            .into_iter()
            .chain(cmd.unwrap_or_default())
            .collect(),
        env: env.unwrap_or_default(),
    })
}
