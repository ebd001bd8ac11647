//! A member with intercepted hosts trusts its team's CA and, beside it, its image's own
//! roots: clients that take one bundle (`SSL_CERT_FILE`) in place of the system's would
//! otherwise lose every other host. The roots are read once, from the member's new container
//! while the engine starts it (its read-only root is the image's, and its command waits at
//! the gate until the release, which waits for the CA files), and kept beside its proxy's
//! files, so that a CA rotation rewrites the bundle without the engine.

use crate::backend::Backend;
use crate::egress;

/// Where images keep their roots, Debian's and Alpine's first, then Fedora's and others'.
const CANDIDATES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
/// Links followed from a candidate, at most.
const MAX_LINKS: usize = 4;

/// The image's roots as certificates (PEM), or empty when it has none.
pub async fn image_roots(
    backend: &dyn Backend,
    id: &str,
) -> Result<String, crate::backend::BackendError> {
    for candidate in CANDIDATES {
        let mut path = candidate.to_string();
        for _ in 0..=MAX_LINKS {
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
                return Ok(certs.concat());
            }
            break;
        }
    }
    Ok(String::new())
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
}
