//! Before an apply changes anything: is each member's image on the engine, and is its
//! command an executable file in it? (`Executor::preflight` asks, for every member the plan
//! creates; a refusal leaves the machine as it was.)
//!
//! The engines cannot stat a file in an image, only in a container. So each image gets one
//! probe: a container that is created and never started (no network, a command that does not
//! exist), looked at through the archive API (`HEAD /containers/{id}/archive`, the same on
//! Docker and on Podman rootful and rootless, without copying the file) and removed. That
//! costs one create and one remove per image, not per member; nothing of an image is pulled
//! or unpacked. A command below one of the member's mounts is looked for on the host instead
//! (that folder hides the image's there), and one below a tmpfs (`/tmp`, HOME) is never
//! there at start.
//!
//! What a probe finds is kept by the image's id (`<state>/images/<id>.json`): an id names
//! the image's content, which never changes, so the next apply, controller reconcile or
//! helper request that creates a member of the same image and command needs no probe (on
//! Podman a probe is about half of bringing one member up). The probe is made from the id,
//! not the name, so that a tag moved meanwhile cannot put another image's findings there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::backend::{Backend, BackendError, ImageConfig, PROBE_LABEL, PathStat};
use crate::core::container::Mount;
use crate::files::{self, Owner};
use crate::plan::spec::DesiredMember;

/// The PATH a container gets when neither the image nor the member sets one (Docker's and
/// Podman's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Symlinks followed at most, as the kernel's limit for a path lookup.
const MAX_LINKS: usize = 40;

/// Where a member's command would be looked for, in order, as execvp does.
pub fn candidates(program: &str, cwd: &Path, path_var: &str) -> Vec<PathBuf> {
    if program.starts_with('/') {
        vec![program.into()]
    } else if program.contains('/') {
        vec![cwd.join(program)]
    } else {
        path_var
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(program))
            .collect()
    }
}

/// The PATH a member's command is looked up in: the member's own, else the image's.
pub fn path_var(m: &DesiredMember, image: &ImageConfig) -> String {
    m.spec
        .env
        .get("PATH")
        .cloned()
        .or_else(|| {
            image
                .env
                .iter()
                .find_map(|e| e.strip_prefix("PATH=").map(str::to_string))
        })
        .unwrap_or_else(|| DEFAULT_PATH.to_string())
}

/// Where a candidate path lies for the member's container.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// In the image's own files.
    Image,
    /// In a folder mounted from the host: this host path.
    Host(PathBuf),
    /// Below a tmpfs: empty when the member starts.
    Tmpfs,
}

/// Which file system `path` is on, in a container with these bind mounts and tmpfs mounts
/// (a member's `spec.mounts` and `spec.tmpfs`): the deepest mount that holds it.
pub fn place(mounts: &[Mount], tmpfs: &BTreeMap<String, String>, path: &Path) -> Place {
    let mut best: Option<(usize, Place)> = None;
    let mut consider = |target: &Path, place: Place| {
        let depth = target.components().count();
        if best.as_ref().is_none_or(|(d, _)| depth > *d) {
            best = Some((depth, place));
        }
    };
    for mount in mounts {
        if let Ok(rest) = path.strip_prefix(&mount.target) {
            consider(&mount.target, Place::Host(mount.source.join(rest)));
        }
    }
    for target in tmpfs.keys().map(Path::new) {
        if path.starts_with(target) {
            consider(target, Place::Tmpfs);
        }
    }
    best.map_or(Place::Image, |(_, p)| p)
}

/// A host file that a member could run: a regular file with an execute bit.
fn host_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One image's probe container, made at the first look (a member whose command lies in a
/// mounted folder needs none), with what was already looked up in it.
pub struct Probe<'a> {
    backend: &'a dyn Backend,
    image: String,
    store: String,
    id: Option<String>,
    seen: BTreeMap<PathBuf, bool>,
    /// Where the findings for this image's id are kept, and whose the file is; none when the
    /// engine gave no id.
    kept: Option<(PathBuf, Owner)>,
    /// Found something the kept file does not have yet.
    fresh: bool,
}

impl<'a> Probe<'a> {
    /// A probe of `config`'s image; with `state` (the state folder and its owner), findings
    /// are read from and kept in the image id's file.
    pub fn new(
        backend: &'a dyn Backend,
        image: &str,
        config: &ImageConfig,
        store: &str,
        state: Option<(&Path, Owner)>,
    ) -> Probe<'a> {
        let kept = state.and_then(|(dir, owner)| {
            Some((
                crate::core::layout::image_probe_path(dir, &config.id)?,
                owner,
            ))
        });
        let seen = kept
            .as_ref()
            .and_then(|(p, _)| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Probe {
            backend,
            // The id, when known: the very image the findings are kept for.
            image: if config.id.is_empty() {
                image.to_string()
            } else {
                config.id.clone()
            },
            store: store.to_string(),
            id: None,
            seen,
            kept,
            fresh: false,
        }
    }

    /// The probe container, made now if not yet (after removing any probe an interrupted
    /// apply of this store left behind).
    async fn id(&mut self) -> Result<String, BackendError> {
        if let Some(id) = &self.id {
            return Ok(id.clone());
        }
        let labels = BTreeMap::from([(PROBE_LABEL.to_string(), self.store.clone())]);
        for old in self.backend.list(&labels).await? {
            self.backend.remove(&old.id).await?;
        }
        let id = self.backend.create_probe(&self.image, &labels).await?;
        self.id = Some(id.clone());
        Ok(id)
    }

    /// Whether `path` is an executable file in the image, following symlinks (the engine
    /// resolves them in the container, and says where to).
    pub async fn executable(&mut self, path: &Path) -> Result<bool, BackendError> {
        if let Some(known) = self.seen.get(path) {
            return Ok(*known);
        }
        let id = self.id().await?;
        let mut at = path.to_path_buf();
        let mut found = false;
        for _ in 0..MAX_LINKS {
            let Some(st): Option<PathStat> = self.backend.stat(&id, &at.to_string_lossy()).await?
            else {
                break;
            };
            let target = Path::new(&st.link_target);
            if st.is_symlink() && !st.link_target.is_empty() && target != at {
                at = target.to_path_buf();
                continue;
            }
            found = st.is_executable_file();
            break;
        }
        self.seen.insert(path.to_path_buf(), found);
        self.fresh = true;
        Ok(found)
    }

    /// Keeps what was found (for the image's id) and removes the probe, if one was made.
    pub async fn remove(self) -> Result<(), BackendError> {
        if let Some((path, owner)) = &self.kept
            && self.fresh
        {
            let bytes = serde_json::to_vec(&self.seen).expect("findings always serialize");
            let kept = path
                .parent()
                .map_or(Ok(()), |d| files::private_dir(d, *owner))
                .and_then(|()| files::write_atomic(path, &bytes, 0o600, *owner));
            if let Err(e) = kept {
                tracing::warn!(path = %path.display(), error = %e, "cannot keep what the image probe found");
            }
        }
        match &self.id {
            Some(id) => self.backend.remove(id).await,
            None => Ok(()),
        }
    }
}

/// Whether the first of `candidates` that exists is an executable file, for `m`: in the
/// image (through `probe`), on the host (a mounted folder), or nowhere (a tmpfs).
pub async fn runnable(
    m: &DesiredMember,
    candidates: &[PathBuf],
    probe: &mut Probe<'_>,
) -> Result<bool, BackendError> {
    for c in candidates {
        let ok = match place(&m.spec.mounts, &m.spec.tmpfs, c) {
            Place::Image => probe.executable(c).await?,
            Place::Host(p) => host_executable(&p),
            Place::Tmpfs => false,
        };
        if ok {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_looked_up_as_execvp_does() {
        let cwd = Path::new("/work");
        assert_eq!(candidates("/bin/sh", cwd, "/x"), [PathBuf::from("/bin/sh")]);
        assert_eq!(
            candidates("./run.sh", cwd, "/x"),
            [PathBuf::from("/work/./run.sh")]
        );
        assert_eq!(
            candidates("agent", cwd, "/usr/bin::/bin"),
            [PathBuf::from("/usr/bin/agent"), PathBuf::from("/bin/agent")]
        );
    }

    #[test]
    fn a_command_is_looked_for_where_the_container_would_find_it() {
        let mounts = [
            Mount::same(Path::new("/tmp/w/repo"), false),
            Mount {
                target: "/opt/tools".into(),
                source: "/home/u/tools".into(),
                read_only: true,
            },
        ];
        let tmpfs = BTreeMap::from([
            ("/tmp".to_string(), String::new()),
            ("/home/agent".to_string(), String::new()),
        ]);
        let at = |p: &str| place(&mounts, &tmpfs, Path::new(p));
        assert_eq!(at("/bin/sh"), Place::Image);
        assert_eq!(
            at("/opt/tools/run"),
            Place::Host("/home/u/tools/run".into())
        );
        // A grant below /tmp is the grant: the deepest mount wins.
        assert_eq!(
            at("/tmp/w/repo/run.sh"),
            Place::Host("/tmp/w/repo/run.sh".into())
        );
        assert_eq!(at("/tmp/w/other"), Place::Tmpfs);
        assert_eq!(at("/home/agent/bin/x"), Place::Tmpfs);
        assert_eq!(
            at("/optional"),
            Place::Image,
            "a prefix of a name is not a folder"
        );
    }

    #[test]
    fn go_file_modes_read_as_the_kernel_would() {
        let file = |mode| PathStat {
            mode,
            link_target: String::new(),
        };
        assert!(file(0o755).is_executable_file());
        assert!(!file(0o644).is_executable_file(), "no execute bit");
        assert!(!file((1 << 31) | 0o755).is_executable_file(), "a folder");
        assert!(file((1 << 27) | 0o777).is_symlink());
        assert!(!file((1 << 27) | 0o777).is_executable_file());
    }
}
