//! The host's agent cache (`Host::agents_dir`): the native builds of Claude Code and Codex CLI
//! that members with `agent:` mount read-only (`core::agents`). A build that is not there is
//! fetched with `npm pack` (the person's npm, its registry and proxy settings), its tarball
//! checked against the pinned SHA-256 before anything of it is used, and only the agent's
//! files unpacked (no install script runs). Every start checks what it mounts: a folder of
//! the caller's or root's, no symlink, writable by no one else; the mount is then pinned and
//! checked in the container as every other (`runtime::pin`).
//!
//! A build is put in place by one `rename` of a complete folder, so two applies that fetch
//! at once never show a half-written one, and a build is never changed once there (its
//! folder is named after its version and checksum).

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::core::agents::{Build, Cached};

/// Longest `npm pack` may take (a tarball of about 70 MB on a slow line).
const NPM_TIMEOUT: Duration = Duration::from_secs(600);

/// Why an agent's build could not be brought into a member.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum AgentError {
    /// Not in the cache, and no npm to fetch it with.
    #[error(
        "{} {} is not in ateam's agent cache ({}) and there is no `npm` to fetch it: install npm, or fetch `{}` where npm is (`npm pack {}`) and run `ateam agents pull {} --from FILE.tgz`",
        .build.kind.name(), .build.version, .dir.display(), .build.npm_spec(), .build.npm_spec(), .build.kind.name()
    )]
    NoNpm {
        build: Build,
        /// Where it would be.
        dir: PathBuf,
    },
    /// `npm pack` failed.
    #[error("`npm pack {spec}` failed ({status}): {output}")]
    Npm {
        /// What was fetched.
        spec: String,
        /// How npm ended.
        status: String,
        /// What it said (its last lines).
        output: String,
    },
    /// The tarball is not the one pinned.
    #[error(
        "{}: SHA-256 {have}, but {want} is pinned for {spec}; nothing of it was used",
        .file.display()
    )]
    Checksum {
        /// The tarball.
        file: PathBuf,
        /// What was fetched.
        spec: String,
        /// Its checksum.
        have: String,
        /// The pinned one.
        want: String,
    },
    /// The tarball lacks a file the agent needs.
    #[error("{}: has no `{entry}`; is it {spec}?", .file.display())]
    NotInTarball {
        /// The tarball.
        file: PathBuf,
        /// What it should be.
        spec: String,
        /// The file looked for.
        entry: String,
    },
    /// What is in the cache could be changed by someone else than the caller and root.
    #[error(
        "{}: {why}; a build in the agent cache must be the caller's or root's and writable by no one else (remove it and apply again to fetch it anew)",
        .path.display()
    )]
    Unsafe {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |source| AgentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `c` in the cache, fetched with `npm pack` when it is not there, and checked.
pub async fn ensure(c: &Cached) -> Result<(), AgentError> {
    if std::fs::symlink_metadata(&c.dir).is_err() {
        let npm = crate::host::which("npm").ok_or_else(|| AgentError::NoNpm {
            build: c.build.clone(),
            dir: c.dir.clone(),
        })?;
        let scratch = scratch_dir(&c.dir)?;
        let fetched = async {
            let tarball = npm_pack(&npm, &c.build, &scratch).await?;
            let (c, scratch) = (c.clone(), scratch.clone());
            tokio::task::spawn_blocking(move || install(&c, &tarball, &scratch))
                .await
                .map_err(|e| AgentError::Io {
                    path: PathBuf::new(),
                    source: std::io::Error::other(e),
                })?
        }
        .await;
        let _ = std::fs::remove_dir_all(&scratch);
        fetched?;
    }
    check(c)
}

/// `c` in the cache from a tarball at hand (`ateam agents pull --from`), checked as a fetch is.
pub fn install_from(c: &Cached, tarball: &Path) -> Result<(), AgentError> {
    if std::fs::symlink_metadata(&c.dir).is_err() {
        let scratch = scratch_dir(&c.dir)?;
        let done = install(c, tarball, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        done?;
    }
    check(c)
}

/// A private folder beside the build's, on the same file system (the build is renamed out
/// of it): `<agents dir>/.pull-<pid>-<nanos>`.
fn scratch_dir(dir: &Path) -> Result<PathBuf, AgentError> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let scratch = parent.join(format!(".pull-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&scratch)
        .map_err(io(&scratch))?;
    Ok(scratch)
}

/// Runs `npm pack SPEC` in `into`; the tarball it wrote.
async fn npm_pack(npm: &Path, build: &Build, into: &Path) -> Result<PathBuf, AgentError> {
    let spec = build.npm_spec();
    tracing::info!(%spec, "fetching an agent from the npm registry");
    let started = std::time::Instant::now();
    let child = tokio::process::Command::new(npm)
        .args(["pack", "--silent", &spec])
        .current_dir(into)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let failed = |status: String, output: &[u8]| AgentError::Npm {
        spec: spec.clone(),
        status,
        output: tail(output),
    };
    let out = match tokio::time::timeout(NPM_TIMEOUT, child).await {
        Err(_) => return Err(failed(format!("still running after {NPM_TIMEOUT:?}"), b"")),
        Ok(Err(e)) => return Err(failed(e.to_string(), b"")),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(failed(out.status.to_string(), &out.stderr));
    }
    let tgz = std::fs::read_dir(into)
        .map_err(io(into))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| failed("it wrote no .tgz".into(), &out.stderr))?;
    tracing::info!(
        %spec,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "agent fetched"
    );
    Ok(tgz)
}

/// The last lines of what a program said, as one line of text.
fn tail(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines[lines.len().saturating_sub(5)..].join(" / ");
    crate::core::untrusted::shown(&last).into_owned()
}

/// Checks `tarball` against the pinned checksum, unpacks the agent's files into
/// `<scratch>/build`, and renames that to the build's folder.
fn install(c: &Cached, tarball: &Path, scratch: &Path) -> Result<(), AgentError> {
    let have = sha256_of(tarball)?;
    if have != c.build.sha256 {
        return Err(AgentError::Checksum {
            file: tarball.to_path_buf(),
            spec: c.build.npm_spec(),
            have,
            want: c.build.sha256.clone(),
        });
    }
    let out = scratch.join("build");
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&out)
        .map_err(io(&out))?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).map_err(io(&out))?;
    unpack(c, tarball, &out)?;
    match std::fs::rename(&out, &c.dir) {
        Ok(()) => Ok(()),
        // Another apply put it there first: the same build (the name says so), checked next.
        Err(_) if std::fs::symlink_metadata(&c.dir).is_ok() => Ok(()),
        Err(e) => Err(io(&c.dir)(e)),
    }
}

fn sha256_of(path: &Path) -> Result<String, AgentError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The agent's files (`Build::files`) from the checked tarball into `out`, mode 0755.
fn unpack(c: &Cached, tarball: &Path, out: &Path) -> Result<(), AgentError> {
    let file = std::fs::File::open(tarball).map_err(io(tarball))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let wanted = c.build.files();
    let mut found = vec![false; wanted.len()];
    for entry in archive.entries().map_err(io(tarball))? {
        let mut entry = entry.map_err(io(tarball))?;
        let path = entry.path().map_err(io(tarball))?.into_owned();
        let Some(i) = wanted
            .iter()
            .position(|(inside, _)| path == Path::new(inside))
        else {
            continue;
        };
        if !entry.header().entry_type().is_file() || found[i] {
            continue;
        }
        let target = out.join(wanted[i].1);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&target)
            .map_err(io(&target))?;
        std::io::copy(&mut entry, &mut f).map_err(io(&target))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o755))
            .map_err(io(&target))?;
        found[i] = true;
    }
    if let Some(i) = found.iter().position(|f| !f) {
        return Err(AgentError::NotInTarball {
            file: tarball.to_path_buf(),
            spec: c.build.npm_spec(),
            entry: wanted[i].0.into(),
        });
    }
    Ok(())
}

/// What a member would mount: the cache folder, the build's folder and its files, each
/// not a symlink, the caller's or root's, and writable by no one else; the files executable.
pub fn check(c: &Cached) -> Result<(), AgentError> {
    let me = rustix::process::geteuid().as_raw();
    let parent = c.dir.parent().unwrap_or(Path::new("/"));
    safe(parent, me, true)?;
    safe(&c.dir, me, true)?;
    for (_, name) in c.build.files() {
        let f = c.dir.join(name);
        safe(&f, me, false)?;
    }
    Ok(())
}

fn safe(path: &Path, me: u32, dir: bool) -> Result<(), AgentError> {
    let unsafe_ = |why: String| AgentError::Unsafe {
        path: path.to_path_buf(),
        why,
    };
    let m =
        std::fs::symlink_metadata(path).map_err(|e| unsafe_(format!("cannot be read ({e})")))?;
    let ft = m.file_type();
    if ft.is_symlink() {
        return Err(unsafe_("a symlink".into()));
    }
    if dir && !ft.is_dir() {
        return Err(unsafe_("not a folder".into()));
    }
    if !dir && !ft.is_file() {
        return Err(unsafe_("not a regular file".into()));
    }
    if m.uid() != me && m.uid() != 0 {
        return Err(unsafe_(format!("owned by uid {}", m.uid())));
    }
    let mode = m.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(unsafe_(format!(
            "writable by others (mode {:o})",
            mode & 0o7777
        )));
    }
    if !dir && mode & 0o111 == 0 {
        return Err(unsafe_("not executable".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::agents::AgentKind;

    /// A tarball laid out as Codex's npm package, and its build pinned to its checksum.
    fn codex_tarball(dir: &Path, with_rg: bool) -> (PathBuf, Build) {
        let path = dir.join("codex.tgz");
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        let mut t = tar::Builder::new(gz);
        let mut files = vec![
            ("package/package.json", &b"{}"[..]),
            (
                "package/vendor/x86_64-unknown-linux-musl/bin/codex",
                b"#!/bin/sh\necho codex\n",
            ),
            (
                "package/vendor/x86_64-unknown-linux-musl/bin/codex-code-mode-host",
                b"#!/bin/sh\n",
            ),
        ];
        if with_rg {
            files.push((
                "package/vendor/x86_64-unknown-linux-musl/codex-path/rg",
                b"#!/bin/sh\n",
            ));
        }
        for (name, body) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            t.append_data(&mut h, name, body).unwrap();
        }
        t.into_inner().unwrap().finish().unwrap();
        let build = Build {
            kind: AgentKind::Codex,
            version: "0.0.1".into(),
            sha256: sha256_of(&path).unwrap(),
        };
        (path, build)
    }

    #[test]
    fn a_checked_tarball_is_unpacked_once_and_checked_at_every_use() {
        let t = tempfile::tempdir().unwrap();
        let (tgz, build) = codex_tarball(t.path(), true);
        let cache = t.path().join("cache/agents");
        let c = Cached {
            dir: cache.join(build.dir_name()),
            build,
        };
        install_from(&c, &tgz).unwrap();
        let codex = c.dir.join("codex");
        assert_eq!(
            std::fs::read_to_string(&codex).unwrap(),
            "#!/bin/sh\necho codex\n"
        );
        assert_eq!(
            std::fs::metadata(&codex).unwrap().permissions().mode() & 0o777,
            0o755
        );
        // Only the build is left: no scratch folder.
        let names: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // Again: nothing to do.
        install_from(&c, &tgz).unwrap();

        // Writable by others: refused, saying which file.
        std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check(&c).unwrap_err().to_string();
        assert!(
            e.contains("codex") && e.contains("writable by others"),
            "{e}"
        );
        std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another user's (a member's uid): refused.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&c.dir, Some(4242), None).unwrap();
            let e = check(&c).unwrap_err().to_string();
            assert!(e.contains("owned by uid 4242"), "{e}");
            std::os::unix::fs::chown(&c.dir, Some(0), None).unwrap();
        }
        check(&c).unwrap();
        // A symlink in place of the build's file: refused.
        std::fs::remove_file(&codex).unwrap();
        std::os::unix::fs::symlink("/bin/true", &codex).unwrap();
        assert!(check(&c).unwrap_err().to_string().contains("a symlink"));
    }

    #[test]
    fn a_tarball_that_is_not_the_pinned_one_is_never_unpacked() {
        let t = tempfile::tempdir().unwrap();
        let (tgz, mut build) = codex_tarball(t.path(), true);
        build.sha256 = "0".repeat(64);
        let c = Cached {
            dir: t.path().join("agents").join(build.dir_name()),
            build,
        };
        let e = install_from(&c, &tgz).unwrap_err().to_string();
        assert!(
            e.contains("SHA-256") && e.contains("nothing of it was used"),
            "{e}"
        );
        assert!(!c.dir.exists());
        // Pinned, but without a file the agent needs.
        let other = t.path().join("x");
        std::fs::create_dir(&other).unwrap();
        let (tgz, build) = codex_tarball(&other, false);
        let c = Cached {
            dir: t.path().join("agents").join(build.dir_name()),
            build,
        };
        let e = install_from(&c, &tgz).unwrap_err().to_string();
        assert!(e.contains("codex-path/rg"), "{e}");
        assert!(!c.dir.exists());
    }
}
