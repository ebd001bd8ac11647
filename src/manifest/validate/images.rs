//! `image: {devcontainer: ...}` and `image: {build: ...}` on a Member: the image a repository
//! defines. Everything the build will read is read here, as untrusted input (the
//! repository's), and checked: paths stay inside the repository with no symlink, the
//! Dockerfile is in its context, its `FROM`s can be read. The tag is the hash of what was
//! read (`core::image_build`); building is the executor's (`runtime::build`).

use std::path::{Component, Path, PathBuf};

use super::{Build, Parsed, Problem};
use crate::build_context;
use crate::core::image_build::{self, Devcontainer};
use crate::manifest::paths::{check_dir, resolve, within};
use crate::manifest::raw;
use crate::model::ImageBuild;

/// Most bytes of a `devcontainer.json` read.
const MAX_DEVCONTAINER: u64 = 1 << 20;

/// What a definition names: an image by name, or a build.
pub(super) enum Defined {
    /// The devcontainer.json's `image`.
    Name(String),
    /// A build, with its tag.
    Build(String, ImageBuild),
}

impl Build<'_> {
    /// The image `d` defines; `None` (its problems reported at `spec.image...`) when it
    /// cannot be read.
    pub(super) fn defined_image(
        &mut self,
        o: &Parsed,
        d: &raw::ImageDefinition,
    ) -> Option<Defined> {
        let at = |f: &str| format!("spec.image.{f}");
        match (&d.devcontainer, &d.build) {
            (Some(_), Some(_)) | (None, None) => {
                self.problems.push(o.problem(
                    "spec.image",
                    "say one of `devcontainer` (a devcontainer.json) and `build` (a Dockerfile and its context)",
                ));
                None
            }
            (Some(path), None) => {
                let field = at("devcontainer");
                self.devcontainer(o, path)
                    .map_err(|e| self.problems.push(o.value_problem(&field, e)))
                    .ok()
            }
            (None, Some(b)) => {
                let context = resolve(
                    b.context.as_deref().unwrap_or("."),
                    &o.src.dir,
                    &self.host.home,
                );
                let field = if b.context.is_some() {
                    at("build.context")
                } else {
                    at("build")
                };
                if let Err(e) = check_dir(&context) {
                    self.problems.push(o.value_problem(&field, e));
                    return None;
                }
                let dockerfile = b.dockerfile.as_deref().unwrap_or("Dockerfile");
                let dockerfile = match inside(dockerfile) {
                    Ok(d) => d,
                    Err(e) => {
                        self.problems
                            .push(o.value_problem(&at("build.dockerfile"), e));
                        return None;
                    }
                };
                let build = ImageBuild {
                    devcontainer: None,
                    context,
                    dockerfile,
                    args: b.args.clone(),
                    target: b.target.clone(),
                    hash: String::new(),
                    bases: vec![],
                };
                read_build(build)
                    .map_err(|e| self.problems.push(o.value_problem(&field, e)))
                    .ok()
            }
        }
    }

    /// The image of the `devcontainer.json` at `raw` (relative to the manifest).
    fn devcontainer(&self, o: &Parsed, raw: &str) -> Result<Defined, String> {
        let file = resolve(raw, &o.src.dir, &self.host.home);
        let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        check_dir(&dir)?;
        let name = file.file_name().unwrap_or_default();
        let text = crate::files::Dir::open(&dir)
            .and_then(|d| d.read_regular(Path::new(name), MAX_DEVCONTAINER + 1))
            .map_err(|e| {
                format!(
                    "cannot read `{}` as a regular file (a symlink is not followed): {e}",
                    file.display()
                )
            })?;
        if text.len() as u64 > MAX_DEVCONTAINER {
            return Err(format!("`{}` is larger than 1 MiB", file.display()));
        }
        let text = String::from_utf8(text)
            .map_err(|_| format!("`{}` is not UTF-8 text", file.display()))?;
        let d: Devcontainer = image_build::parse_devcontainer(&text)
            .map_err(|e| format!("`{}` {e}", file.display()))?;
        if let Some(image) = d.image {
            super::check_image(&image).map_err(|e| format!("`{}`: image: {e}", file.display()))?;
            return Ok(Defined::Name(image));
        }
        // What it names stays in its repository: the folder holding `.devcontainer`.
        let repo = repository_of(&file);
        let context = resolve(d.context.as_deref().unwrap_or("."), &dir, Path::new("/"));
        if !within(&context, &repo) {
            return Err(format!(
                "`{}`: build.context `{}` leads outside its repository `{}`",
                file.display(),
                d.context.as_deref().unwrap_or("."),
                repo.display()
            ));
        }
        check_dir(&context).map_err(|e| format!("`{}`: build.context: {e}", file.display()))?;
        let named = d.dockerfile.unwrap_or_default();
        let dockerfile = resolve(&named, &dir, Path::new("/"));
        let dockerfile = dockerfile
            .strip_prefix(&context)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .ok_or_else(|| {
                format!(
                    "`{}`: build.dockerfile `{named}` is not inside the build context `{}` (ateam sends the context only)",
                    file.display(),
                    context.display()
                )
            })?
            .display()
            .to_string();
        let build = ImageBuild {
            devcontainer: Some(file.clone()),
            context,
            dockerfile,
            args: d.args,
            target: d.target,
            hash: String::new(),
            bases: vec![],
        };
        read_build(build).map_err(|e| format!("`{}`: {e}", file.display()))
    }
}

/// A member's image built from a repository, to be judged against every write grant.
pub(super) struct Built {
    /// `team/member`.
    who: String,
    /// Where the problem is reported (the member's `spec.image`).
    place: Problem,
    /// What the build reads: its context, and the devcontainer.json.
    paths: Vec<PathBuf>,
}

impl Build<'_> {
    /// Notes `b`, the image of `who`, for `writable_builds`.
    pub(super) fn note_build(&mut self, who: String, o: &Parsed, b: &ImageBuild) {
        self.builds.push(Built {
            who,
            place: o.value_problem("spec.image", String::new()),
            paths: std::iter::once(b.context.clone())
                .chain(b.devcontainer.clone())
                .collect(),
        });
    }
}

/// No member may write what an image is built from: what it wrote would be built (its RUNs
/// run in the engine's build container, not in a member's lockdown) and run as the image of
/// the next member made. Judged by name, as workspaces are.
pub(super) fn writable_builds(
    built: Vec<Built>,
    teams: &[&crate::model::Team],
    problems: &mut Vec<Problem>,
) {
    for b in built {
        let writer = teams.iter().find_map(|t| {
            t.members.iter().find_map(|w| {
                w.access.write.iter().find_map(|g| {
                    b.paths
                        .iter()
                        .find(|p| within(p, g) || within(g, p))
                        .map(|p| (format!("{}/{}", t.name, w.name), g, p))
                })
            })
        });
        if let Some((who, grant, path)) = writer {
            problems.push(Problem {
                message: format!(
                    "the image of {} is built from {}, which member {who} may write (grant {}): what a member writes there would be built, and run as the image of the next member made; give that member a workspace (its own copy) instead",
                    b.who,
                    path.display(),
                    grant.display()
                ),
                ..b.place
            });
        }
    }
}

/// `build` with its context read: its hash, the tag, the images it builds from.
fn read_build(mut build: ImageBuild) -> Result<Defined, String> {
    let ctx = build_context::read(
        &build.context,
        &build.dockerfile,
        &build.args,
        build.target.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    build.bases = image_build::bases(&ctx.dockerfile, &build.args)
        .map_err(|e| format!("the Dockerfile `{}` {e}", build.dockerfile))?;
    build.hash = ctx.hash;
    Ok(Defined::Build(image_build::tag(&build.hash), build))
}

/// A path relative to the context that stays inside it: no `/` at its start, no `..`.
fn inside(p: &str) -> Result<String, String> {
    let path = Path::new(p);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "`{p}` must be a path inside the build context (no leading `/`, no `..`)"
                ));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err("name the Dockerfile".into());
    }
    Ok(out.display().to_string())
}

/// The repository a `devcontainer.json` belongs to: the folder holding its `.devcontainer`
/// folder (`.devcontainer/devcontainer.json`, `.devcontainer/NAME/devcontainer.json`), else
/// its own folder (`.devcontainer.json`).
fn repository_of(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("/"));
    dir.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == ".devcontainer"))
        .and_then(Path::parent)
        .unwrap_or(dir)
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_devcontainers_repository_and_paths_inside_a_context() {
        assert_eq!(
            repository_of(Path::new("/r/.devcontainer/devcontainer.json")),
            Path::new("/r")
        );
        assert_eq!(
            repository_of(Path::new("/r/.devcontainer/py/devcontainer.json")),
            Path::new("/r")
        );
        assert_eq!(
            repository_of(Path::new("/r/.devcontainer.json")),
            Path::new("/r")
        );
        assert_eq!(inside("./docker/Dockerfile").unwrap(), "docker/Dockerfile");
        for bad in ["../Dockerfile", "/etc/Dockerfile", "a/../../b", "."] {
            assert!(inside(bad).is_err(), "{bad}");
        }
    }
}
