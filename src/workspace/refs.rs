//! A member's refs, read as files: no git command runs in the member's `.git`, no symlink
//! there is followed, no FIFO opened, nothing read past a small bound; what is read must be
//! an object id.

use std::path::Path;

use crate::files::{self, Owner};

/// Reads `name` (`refs/heads/...`): the loose ref, else its line in `packed-refs`. `None`
/// when there is neither.
pub fn read(git_dir: &Path, name: &str) -> std::io::Result<Option<String>> {
    read_unnamed(git_dir, name).map_err(|e| named(name, e))
}

/// `e`, saying which file of the member's `.git` it is about.
fn named(name: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{name}: {e}"))
}

fn read_unnamed(git_dir: &Path, name: &str) -> std::io::Result<Option<String>> {
    let dir = files::Dir::open(git_dir)?;
    match dir.read_regular(Path::new(name), 4096) {
        Ok(bytes) => return Ok(Some(object_id(&bytes)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let packed = match dir.read_regular(Path::new("packed-refs"), 64 << 20) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for line in packed.split(|b| *b == b'\n') {
        if let Some(id) = line
            .strip_suffix(name.as_bytes())
            .and_then(|l| l.strip_suffix(b" "))
        {
            return object_id(id).map(Some);
        }
    }
    Ok(None)
}

/// What HEAD names: the commit of the branch it points at (`branch` when it points at no
/// branch ateam can read), or the commit it holds when detached. `None`: an unborn branch.
pub fn head(git_dir: &Path, branch: &str) -> std::io::Result<Option<String>> {
    let text = files::Dir::open(git_dir)
        .and_then(|dir| dir.read_regular(Path::new("HEAD"), 4096))
        .map_err(|e| named("HEAD", e))?;
    let text = String::from_utf8_lossy(&text);
    match text.trim().strip_prefix("ref: ") {
        Some(r) if r.starts_with("refs/heads/") && sane_ref(r) => read(git_dir, r),
        Some(_) => read(git_dir, &format!("refs/heads/{branch}")),
        None => object_id(text.as_bytes())
            .map(Some)
            .map_err(|e| named("HEAD", e)),
    }
}

/// Writes the loose ref `name` as `id` (the member's file, its folders made as needed).
pub fn write(git_dir: &Path, name: &str, id: &str, owner: Owner) -> std::io::Result<()> {
    if !sane_ref(name) {
        return Err(std::io::Error::other(format!(
            "not a ref ateam writes: {name}"
        )));
    }
    let path = git_dir.join(name);
    let mut dir = git_dir.to_path_buf();
    for c in Path::new(name)
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
    {
        dir.push(c);
        files::member_dir(&dir, owner, owner)?;
    }
    files::write_atomic_in_member_dir(&path, format!("{id}\n").as_bytes(), 0o644, owner)
}

/// A ref name of plain parts: no `..`, no empty part, nothing git would refuse that matters
/// for a path.
fn sane_ref(name: &str) -> bool {
    name.split('/').all(|part| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./+@".contains(&b))
    })
}

/// A 40- or 64-hex object id, or an error that says what was there instead.
fn object_id(bytes: &[u8]) -> std::io::Result<String> {
    let t = String::from_utf8_lossy(bytes);
    let t = t.trim();
    if (t.len() == 40 || t.len() == 64) && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(t.to_ascii_lowercase())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a ref that holds no object id",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_read_as_files_and_must_be_ids() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        std::fs::create_dir_all(g.join("refs/heads/a")).unwrap();
        let id = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(g.join("refs/heads/a/b"), format!("{id}\n")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/a/b\n").unwrap();
        assert_eq!(head(g, "x").unwrap().as_deref(), Some(id));
        std::fs::write(
            g.join("packed-refs"),
            format!("# pack-refs\n{} refs/heads/p\n", id.replace('0', "f")),
        )
        .unwrap();
        assert_eq!(read(g, "refs/heads/p").unwrap(), Some(id.replace('0', "f")));
        assert_eq!(read(g, "refs/heads/none").unwrap(), None);
        // A symlinked ref, a FIFO, text that is no id: refused, never followed.
        std::os::unix::fs::symlink("/etc/passwd", g.join("refs/heads/l")).unwrap();
        assert!(read(g, "refs/heads/l").is_err());
        rustix::fs::mknodat(
            rustix::fs::CWD,
            g.join("refs/heads/f"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(read(g, "refs/heads/f").is_err());
        std::fs::write(g.join("refs/heads/t"), "ref: ../../../etc\n").unwrap();
        assert!(read(g, "refs/heads/t").is_err());
        // HEAD pointing out of refs/heads is read as the branch ateam made.
        std::fs::write(g.join("HEAD"), "ref: ../../etc/passwd\n").unwrap();
        assert_eq!(head(g, "a/b").unwrap().as_deref(), Some(id));
        assert!(
            write(
                g,
                "refs/heads/../x",
                id,
                crate::files::Owner { uid: 0, gid: 0 }
            )
            .is_err()
        );
    }
}
