//! The image a member's repository defines (`model::ImageBuild`), built with the engine when
//! the engine lacks its tag: before any change (`Executor::preflight`) and before each
//! container is made (`Runtime::prepare`). An unchanged definition has a tag the engine has,
//! so nothing is built again; the build itself is the engine's, from the context ateam read
//! (`build_context`), from local images only and with no network.

use std::collections::BTreeMap;

use tracing::info;

use crate::backend::{Backend, BackendError, BuildRequest};
use crate::build_context::{self, ContextError};
use crate::model::ImageBuild;

/// The label a built image carries: the hash of its inputs.
pub const BUILD_LABEL: &str = "ateam.build.hash";

/// Why a member's image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A `FROM` the engine does not have: ateam reaches no registry.
    #[error(
        "{what} builds FROM `{base}`, which {engine} does not have: ateam builds from local images only and reaches no image registry; build or load `{base}` into {engine} first (ateam-toolchain:bookworm: scripts/agent-images.sh toolchain)"
    )]
    BaseMissing {
        /// The Dockerfile, and the devcontainer.json naming it.
        what: String,
        /// The image.
        base: String,
        engine: String,
    },
    /// The context no longer hashes as validation read it.
    #[error(
        "the build context `{context}` changed since the manifests were read (tag {tag}): apply again"
    )]
    Changed {
        /// The context folder.
        context: String,
        /// The tag validation named.
        tag: String,
    },
    /// The context cannot be read.
    #[error(transparent)]
    Context(#[from] ContextError),
    /// The engine refused, or the build failed.
    #[error("building {what} as `{tag}`: {source}")]
    Engine {
        /// The Dockerfile.
        what: String,
        tag: String,
        /// The engine's answer.
        source: BackendError,
    },
}

/// The Dockerfile of `b`, as a person finds it.
fn what(b: &ImageBuild) -> String {
    let file = b.context.join(&b.dockerfile);
    match &b.devcontainer {
        Some(d) => format!("the Dockerfile `{}` (of `{}`)", file.display(), d.display()),
        None => format!("the Dockerfile `{}`", file.display()),
    }
}

/// `tag` on the engine, built from `b` when it is not there. Returns whether it built.
pub async fn ensure(
    backend: &dyn Backend,
    engine: &str,
    tag: &str,
    b: &ImageBuild,
) -> Result<bool, BuildError> {
    match backend.image_config(tag).await {
        Ok(_) => return Ok(false),
        Err(BackendError::ImageMissing { .. }) => {}
        Err(source) => {
            return Err(BuildError::Engine {
                what: what(b),
                tag: tag.into(),
                source,
            });
        }
    }
    for base in &b.bases {
        match backend.image_config(base).await {
            Ok(_) => {}
            Err(BackendError::ImageMissing { .. }) => {
                return Err(BuildError::BaseMissing {
                    what: what(b),
                    base: base.clone(),
                    engine: engine.into(),
                });
            }
            Err(source) => {
                return Err(BuildError::Engine {
                    what: what(b),
                    tag: tag.into(),
                    source,
                });
            }
        }
    }
    let started = std::time::Instant::now();
    let ctx = build_context::read(&b.context, &b.dockerfile, &b.args, b.target.as_deref())?;
    if ctx.hash != b.hash {
        return Err(BuildError::Changed {
            context: b.context.display().to_string(),
            tag: tag.into(),
        });
    }
    let req = BuildRequest {
        tag: tag.into(),
        context: ctx.tar,
        dockerfile: b.dockerfile.clone(),
        args: b.args.clone(),
        target: b.target.clone().unwrap_or_default(),
        labels: BTreeMap::from([(BUILD_LABEL.to_string(), b.hash.clone())]),
    };
    backend
        .build(&req)
        .await
        .map_err(|source| BuildError::Engine {
            what: what(b),
            tag: tag.into(),
            source,
        })?;
    info!(
        image = tag,
        context = %b.context.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "image built"
    );
    Ok(true)
}
