//! A member with intercepted hosts trusts its team's CA and, beside it, its image's own
//! roots: clients that take one bundle (`SSL_CERT_FILE`) in place of the system's would
//! otherwise lose every other host. The roots are read from the member's new container
//! while the engine starts it (its read-only root is the image's, and its command waits at
//! the gate until the release, which waits for the CA files), and kept beside its proxy's
//! files, so that a CA rotation rewrites the bundle without the engine.
//!
//! They are also kept by the image's id (`Kept`): an id names the image's content, so the
//! next start of any member of that image writes its CA files during the engine's start
//! instead of after it (Docker answers the archive API only once a start is done: about
//! 70 ms of every start of a member with intercepted hosts). Only roots read from the
//! image's own files are kept: none of the paths looked at below a member's mount, whose
//! files are not the image's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::backend::Backend;
use crate::core::container::Mount;
use crate::files::{self, Owner};
use crate::servers::egress;

/// Where images keep their roots, Debian's and Alpine's first, then Fedora's and others'.
const CANDIDATES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
/// Links followed from a candidate, at most.
const MAX_LINKS: usize = 4;

/// Roots read from a container, and every path that was looked at for them.
pub struct Read {
    /// The certificates (PEM), empty when there are none.
    pub pem: String,
    /// The candidates and the links' targets, in the order they were looked at.
    pub paths: Vec<String>,
}

/// The roots in container `id`'s files.
pub async fn image_roots(
    backend: &dyn Backend,
    id: &str,
) -> Result<Read, crate::backend::BackendError> {
    let mut paths = Vec::new();
    for candidate in CANDIDATES {
        let mut path = candidate.to_string();
        for _ in 0..=MAX_LINKS {
            paths.push(path.clone());
            let Some(stat) = backend.stat(id, &path).await? else {
                break;
            };
            if stat.is_symlink() && !stat.link_target.is_empty() && stat.link_target != path {
                path = resolve(&path, &stat.link_target);
                continue;
            }
            let Some(bytes) = backend
                .read_file(id, &path, egress::IMAGE_ROOTS_MAX)
                .await?
            else {
                break;
            };
            let certs = egress::tls::certificates_in(&bytes);
            if !certs.is_empty() {
                return Ok(Read {
                    pem: certs.concat(),
                    paths,
                });
            }
            break;
        }
    }
    Ok(Read {
        pem: String::new(),
        paths,
    })
}

/// Whether every one of `paths` lies in the image's own files for a member with these
/// mounts and tmpfs mounts: what was read there is the image's, the same for every member
/// of it.
pub fn from_image_alone(
    mounts: &[Mount],
    tmpfs: &BTreeMap<String, String>,
    paths: &[String],
) -> bool {
    paths.iter().all(|p| {
        crate::runtime::image::place(mounts, tmpfs, Path::new(p))
            == crate::runtime::image::Place::Image
    })
}

/// An image's roots kept by its id, in the state folder (`layout::image_roots_cache_path`).
pub struct Kept {
    /// None when the engine gave no id that names a file: nothing is kept.
    path: Option<PathBuf>,
    owner: Owner,
}

impl Kept {
    pub fn new(state_dir: &Path, image_id: &str, owner: Owner) -> Kept {
        Kept {
            path: crate::core::layout::image_roots_cache_path(state_dir, image_id),
            owner,
        }
    }

    /// The roots kept for this image, if they are (certificates only: anything else in the
    /// file is dropped).
    pub fn get(&self) -> Option<String> {
        let text = files::read_small(self.path.as_ref()?, egress::IMAGE_ROOTS_MAX)?;
        Some(egress::tls::certificates_in(text.as_bytes()).concat())
    }

    /// Keeps `pem` for the next start. Best effort: one not kept is read again.
    pub fn put(&self, pem: &str) {
        let Some(path) = &self.path else { return };
        let kept = path
            .parent()
            .map_or(Ok(()), |d| files::private_dir(d, self.owner))
            .and_then(|()| files::write_atomic(path, pem.as_bytes(), 0o600, self.owner));
        if let Err(e) = kept {
            tracing::warn!(path = %path.display(), error = %e, "cannot keep the image's roots");
        }
    }
}

/// A link's target, from the folder of the link when it is relative.
fn resolve(link: &str, target: &str) -> String {
    if target.starts_with('/') {
        return target.to_string();
    }
    let dir = link.rsplit_once('/').map_or("", |(d, _)| d);
    format!("{dir}/{target}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn relative_links_resolve_from_their_folder() {
        assert_eq!(
            super::resolve("/etc/ssl/cert.pem", "certs/ca-certificates.crt"),
            "/etc/ssl/certs/ca-certificates.crt"
        );
        assert_eq!(super::resolve("/etc/ssl/cert.pem", "/x/y.pem"), "/x/y.pem");
    }

    #[test]
    fn roots_read_below_a_mount_are_not_the_images() {
        use crate::core::container::Mount;
        use std::collections::BTreeMap;
        let paths = vec![
            "/etc/ssl/cert.pem".to_string(),
            "/usr/share/ca/bundle.pem".to_string(),
        ];
        let none = BTreeMap::new();
        assert!(super::from_image_alone(&[], &none, &paths));
        let grant = Mount::same(std::path::Path::new("/usr/share"), false);
        assert!(!super::from_image_alone(&[grant], &none, &paths));
        let ssl = Mount::same(std::path::Path::new("/etc/ssl"), true);
        assert!(!super::from_image_alone(&[ssl], &none, &paths));
        let tmpfs = BTreeMap::from([("/etc".to_string(), String::new())]);
        assert!(!super::from_image_alone(&[], &tmpfs, &paths));
    }

    #[test]
    fn kept_roots_are_by_image_id_and_certificates_only() {
        let state = tempfile::tempdir().unwrap();
        let owner = crate::files::Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let id = format!("sha256:{}", "ab".repeat(32));
        let kept = super::Kept::new(state.path(), &id, owner);
        assert_eq!(kept.get(), None);
        let ca = include_str!("../../tests/support/model-tls/ca.pem");
        kept.put(&format!("junk before\n{ca}junk after\n"));
        let got = kept.get().unwrap();
        assert!(
            got.contains("BEGIN CERTIFICATE") && !got.contains("junk"),
            "{got}"
        );
        // Another image's id finds nothing; an id that names no file keeps nothing.
        let other = format!("sha256:{}", "cd".repeat(32));
        assert_eq!(super::Kept::new(state.path(), &other, owner).get(), None);
        let odd = super::Kept::new(state.path(), "../../etc", owner);
        odd.put(ca);
        assert_eq!(odd.get(), None);
    }
}
