//! The rules a granted folder must pass before it may be mounted into a member.
//!
//! Checks here look at the path as the user wrote it, without following symlinks: a path that
//! passes is canonical, so the folder checked is the folder named. (The backends pin it again by
//! device and inode right before the container starts; this is the first line, not the only one.)

use std::path::{Component, Path, PathBuf};

use crate::host::Host;

/// Folders no member may see or contain.
const FORBIDDEN_TREES: [&str; 5] = ["/proc", "/dev", "/sys", "/run", "/var/run"];
/// Folders whose parents must not be granted (granting `/var` would grant `/var/run`).
const MUST_NOT_CONTAIN: [&str; 3] = ["/tmp", "/run", "/var/run"];

/// `~` and `~/x` expand to the home folder; a relative path is taken from the manifest's folder.
/// `.` and `..` are resolved by name, and the result is then checked for symlinks by `check_dir`.
pub fn resolve(raw: &str, base: &Path, home: &Path) -> PathBuf {
    let joined = if raw == "~" {
        home.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        home.join(rest)
    } else {
        base.join(raw)
    };
    by_name(&joined)
}

/// `path` from the root, its `.` and `..` resolved by name, not following symlinks: the one
/// way ateam normalises a path a person wrote (grants, `-f` arguments).
pub fn by_name(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Checks that `path` is an existing, canonical directory that may be granted. The error says
/// what is wrong in words a user can act on.
pub fn check_grant(path: &Path, host: &Host) -> Result<(), String> {
    let text = path.to_string_lossy();
    // A folder's name is shown to people (`status`), and a member names folders in its
    // write grants when it asks for a helper: no name that could steer a terminal.
    if crate::core::untrusted::steering(&text) {
        return Err(format!(
            "`{}` holds a control, bidirectional or line-separator character; name a folder in plain text",
            crate::core::untrusted::shown(&text)
        ));
    }
    let shown = path.display();
    if text.contains(',') {
        return Err(format!(
            "`{shown}` contains a comma, which mount options cannot carry"
        ));
    }
    for t in FORBIDDEN_TREES {
        if path.starts_with(t) {
            return Err(format!("`{shown}` is inside {t}, which is never granted"));
        }
    }
    for t in MUST_NOT_CONTAIN {
        if Path::new(t).starts_with(path) {
            return Err(format!("`{shown}` contains {t}, which is never granted"));
        }
    }
    if host.home.starts_with(path) {
        return Err(format!(
            "`{shown}` contains your home folder {}; grant a folder inside it instead",
            host.home.display()
        ));
    }
    if path.starts_with(&host.state_dir) || host.state_dir.starts_with(path) {
        return Err(format!(
            "`{shown}` overlaps ateam's own state folder {}",
            host.state_dir.display()
        ));
    }
    check_dir(path)
}

/// Exists, is a directory, and no component is a symlink.
pub fn check_dir(path: &Path) -> Result<(), String> {
    let mut so_far = PathBuf::from("/");
    for c in path.components().skip(1) {
        so_far.push(c);
        let meta = match std::fs::symlink_metadata(&so_far) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("`{}` does not exist", path.display()));
            }
            Err(e) => return Err(format!("cannot check `{}`: {e}", so_far.display())),
        };
        if meta.file_type().is_symlink() {
            // The link's own text, not where it leads: resolving it would look further as
            // ateam's user (often root), and a helper request's refusal goes to a member, which
            // may have planted the link to learn what exists where it cannot see.
            let hint = std::fs::read_link(&so_far)
                .map(|t| {
                    // Joined by name: `..` in it is taken as text, nothing is looked up.
                    let joined = so_far.parent().unwrap_or(&so_far).join(t);
                    let to = resolve(&joined.to_string_lossy(), Path::new("/"), Path::new("/"));
                    format!(", which points to `{}`; write the real path", to.display())
                })
                .unwrap_or_default();
            return Err(format!(
                "`{}` goes through the symlink `{}`{hint}",
                path.display(),
                so_far.display()
            ));
        }
    }
    if !std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(format!("`{}` is not a directory", path.display()));
    }
    Ok(())
}

/// Is `inner` the same folder as `outer` or below it.
pub fn within(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(home: &Path, state: &Path) -> Host {
        Host {
            uid: 1000,
            gid: 1000,
            home: home.into(),
            memory_bytes: 1 << 34,
            state_dir: state.into(),
            sudo_user: None,
            engine_dirs: Default::default(),
        }
    }

    #[test]
    fn resolves_tilde_relative_and_dots() {
        let home = Path::new("/home/u");
        let base = Path::new("/srv/team");
        assert_eq!(resolve("~", base, home), PathBuf::from("/home/u"));
        assert_eq!(resolve("~/src", base, home), PathBuf::from("/home/u/src"));
        assert_eq!(
            resolve("../repo/./x", base, home),
            PathBuf::from("/srv/repo/x")
        );
        assert_eq!(resolve("/abs", base, home), PathBuf::from("/abs"));
        // By name alone, never above the root, from the root for a relative path.
        assert_eq!(by_name(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(by_name(Path::new("/../../x")), PathBuf::from("/x"));
        assert_eq!(by_name(Path::new("a/b/..")), PathBuf::from("/a"));
    }

    #[test]
    fn grant_rules() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let home = root.join("home");
        let state = home.join(".local/state/ateam");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(home.join("repo")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(home.join("repo"), root.join("link")).unwrap();
        let h = host(&home, &state);

        assert_eq!(check_grant(&home.join("repo"), &h), Ok(()));
        let err = |p: &Path| check_grant(p, &h).unwrap_err();
        assert!(err(&home).contains("contains your home folder"));
        assert!(err(&root).contains("contains your home folder"));
        assert!(err(Path::new("/")).contains("contains /tmp"));
        assert!(err(Path::new("/var")).contains("contains /var/run"));
        assert!(err(Path::new("/proc/self")).contains("inside /proc"));
        assert!(err(Path::new("/run/user")).contains("inside /run"));
        assert!(err(&state.join("x")).contains("state folder"));
        assert!(err(&home.join(".local")).contains("state folder"));
        assert!(err(&root.join("missing")).contains("does not exist"));
        assert!(err(&root.join("file")).contains("is not a directory"));
        assert!(err(&root.join("link")).contains("goes through the symlink"));
        assert!(err(&root.join("a,b")).contains("comma"));
        // Whatever the folder holds, a name that could steer a terminal is refused, and shown
        // escaped in the refusal.
        for name in [
            "a\nb",
            "x\u{1b}]0;title\u{7}",
            "rtl\u{202e}txt",
            "ls\u{2028}ep",
        ] {
            let e = err(&root.join(name));
            assert!(e.contains("control, bidirectional"), "{e}");
            assert!(!crate::core::untrusted::steering(&e), "{e:?}");
        }
    }
}
