//! The mount table (`/proc/self/mountinfo`): which file system, and which folder of it, each
//! mount point shows.
//!
//! Two things a check by path cannot see are plain here: a bind mount shows a folder under
//! another name (`mount --bind /a/sessions /b/alias`), and a file system mounted below a
//! granted folder is not covered by the grant's own mount options (the engines' read-only bind
//! mounts are not recursive). The grant rules and the runtime read this table for both.

use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount's id, unique in the table.
    pub id: u32,
    /// The id of the mount it sits on (for the namespace's root, an id not in the table).
    pub parent: u32,
    /// The file system's device, `major:minor` as the table writes it.
    pub dev: String,
    /// The folder of that file system shown at `point` (`/` for all of it).
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
}

/// A folder as the kernel knows it, whatever it is called: a file system and a path in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsPath {
    /// The file system's device, `major:minor`.
    pub dev: String,
    /// The folder's path from that file system's root.
    pub path: PathBuf,
}

impl FsPath {
    /// Does one of the two lie in the other (or are they the same folder).
    pub fn overlaps(&self, other: &FsPath) -> bool {
        self.dev == other.dev
            && (self.path.starts_with(&other.path) || other.path.starts_with(&self.path))
    }
}

/// The whole mount table, in the kernel's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts(Vec<Mount>);

impl Mounts {
    /// This process's mount table (ateam runs in the host's mount namespace, where the
    /// engines resolve bind mount sources).
    pub fn read() -> std::io::Result<Mounts> {
        Ok(Mounts::parse(&crate::files::read_kernel_text(Path::new(
            "/proc/self/mountinfo",
        ))?))
    }

    /// `read`, kept while the kernel says the table has not changed: it raises `POLLPRI` on
    /// a descriptor of mountinfo at every mount or unmount since the last poll (what systemd
    /// watches). A machine with 200 containers has a 130 KB table, which the kernel writes out
    /// for every read: the controller judged manifests at that cost once a minute.
    pub fn current() -> std::io::Result<Arc<Mounts>> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        static KEPT: Mutex<Option<(File, Arc<Mounts>)>> = Mutex::new(None);
        let mut kept = KEPT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((file, mounts)) = kept.as_ref() {
            let mut fds = [PollFd::new(file, PollFlags::PRI)];
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let quiet = poll(&mut fds, Some(&zero)).is_ok_and(|n| n == 0);
            if quiet {
                return Ok(mounts.clone());
            }
        }
        // Opened before it is read: a change meanwhile shows at the next poll.
        let mut file = File::open("/proc/self/mountinfo")?;
        let mut text = String::with_capacity(64 * 1024);
        file.read_to_string(&mut text)?;
        let mounts = Arc::new(Mounts::parse(&text));
        *kept = Some((file, mounts.clone()));
        Ok(mounts)
    }

    /// Parses mountinfo text; lines it cannot read are left out.
    pub fn parse(text: &str) -> Mounts {
        let mounts = text
            .lines()
            .filter_map(|line| {
                let mut f = line.split(' ');
                Some(Mount {
                    id: f.next()?.parse().ok()?,
                    parent: f.next()?.parse().ok()?,
                    dev: f.next()?.to_string(),
                    root: unescape(f.next()?).into(),
                    point: unescape(f.next()?).into(),
                })
            })
            .collect();
        Mounts(mounts)
    }

    /// The mount that `path` lies in, as a path lookup walks: from the root mount, into the
    /// first mount met on the way down (a mount on top of another at the same place is its
    /// child, so it is met after it; a mount hidden under a later one is never met).
    pub fn holding(&self, path: &Path) -> Option<&Mount> {
        // A machine with 200 containers has 400 mounts, most of them children of `/`, and
        // validation asks this for every path it judges: sets and byte prefixes, not scans
        // and component walks.
        let ids: std::collections::HashSet<u32> = self.0.iter().map(|m| m.id).collect();
        let mut cur = self
            .0
            .iter()
            .find(|m| m.point == Path::new("/") && !ids.contains(&m.parent))
            .or_else(|| self.0.first())?;
        // Its components joined again: `a//b` and `a/./b` are `a/b`, as `starts_with` sees them.
        let clean: PathBuf = path.components().collect();
        let bytes = clean.as_os_str().as_bytes();
        // Each step goes one mount deeper; a table can hold no deeper chain than its length.
        for _ in 0..self.0.len() {
            let next = self
                .0
                .iter()
                .filter(|m| {
                    m.parent == cur.id
                        && m.id != cur.id
                        && bytes.starts_with(m.point.as_os_str().as_bytes())
                        && path.starts_with(&m.point)
                })
                .min_by_key(|m| m.point.components().count());
            match next {
                Some(n) => cur = n,
                None => break,
            }
        }
        Some(cur)
    }

    /// Where `path` lives: its file system and its folder there. `path` need not exist (what it
    /// would be, once made, in the mount it would be made in).
    pub fn locate(&self, path: &Path) -> Option<(&Mount, FsPath)> {
        let m = self.holding(path)?;
        let rest = path.strip_prefix(&m.point).ok()?;
        let fs = FsPath {
            dev: m.dev.clone(),
            path: if rest.as_os_str().is_empty() {
                m.root.clone()
            } else {
                m.root.join(rest)
            },
        };
        Some((m, fs))
    }

    /// Mounts whose mount point lies strictly below `dir`: a bind mount of `dir` (the engines
    /// use `rbind`) carries them along.
    pub fn below<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = &'a Mount> + 'a {
        self.0
            .iter()
            .filter(move |m| m.point != dir && m.point.starts_with(dir))
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 27 0:21 / /proc rw,relatime shared:3 - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 27 254:0 /srv/a/sessions /srv/b/alias rw,relatime shared:1 - ext4 /dev/vda rw
41 27 0:50 / /srv/b/tmp rw - tmpfs tmpfs rw
42 41 0:51 / /srv/b/tmp rw - tmpfs tmpfs rw
43 27 0:52 / /srv/c rw - tmpfs tmpfs rw
44 27 254:0 /x /srv/c/hidden rw - ext4 /dev/vda rw
45 27 254:0 /with\\040space /srv/d\\040e rw - ext4 /dev/vda rw
";

    fn fs(dev: &str, path: &str) -> FsPath {
        FsPath {
            dev: dev.into(),
            path: path.into(),
        }
    }

    #[test]
    fn locates_paths_through_bind_mounts_stacks_and_hidden_mounts() {
        let t = Mounts::parse(TABLE);
        let at = |p: &str| t.locate(Path::new(p)).map(|(_, f)| f);
        for (path, want) in [
            ("/", fs("254:0", "/")),
            ("/srv/a/sessions/m", fs("254:0", "/srv/a/sessions/m")),
            // Another name of /srv/a/sessions.
            ("/srv/b/alias", fs("254:0", "/srv/a/sessions")),
            ("/srv/b/alias/x", fs("254:0", "/srv/a/sessions/x")),
            ("/srv/b/aliasx", fs("254:0", "/srv/b/aliasx")),
            // The later of two tmpfs stacked on one place is the one seen.
            ("/srv/b/tmp/f", fs("0:51", "/f")),
            // 44 is mounted on the root file system's /srv/c/hidden, under the tmpfs 43:
            // a lookup meets 43 first and never sees 44.
            ("/srv/c/hidden", fs("0:52", "/hidden")),
            ("/srv/d e/f", fs("254:0", "/with space/f")),
        ] {
            assert_eq!(at(path), Some(want), "{path}");
        }
        assert!(fs("254:0", "/a").overlaps(&fs("254:0", "/a/b")));
        assert!(fs("254:0", "/a/b").overlaps(&fs("254:0", "/a")));
        assert!(!fs("254:0", "/a").overlaps(&fs("0:1", "/a")));
        assert!(!fs("254:0", "/a/b").overlaps(&fs("254:0", "/a/c")));
    }

    #[test]
    fn lists_mounts_strictly_below_a_folder() {
        let t = Mounts::parse(TABLE);
        let below = |p: &str| -> Vec<String> {
            t.below(Path::new(p))
                .map(|m| m.point.display().to_string())
                .collect()
        };
        assert_eq!(
            below("/srv/b"),
            ["/srv/b/alias", "/srv/b/tmp", "/srv/b/tmp"]
        );
        assert!(below("/srv/b/alias").is_empty());
        assert!(below("/srv/bb").is_empty());
        assert_eq!(below("/srv/c"), ["/srv/c/hidden"]);
    }

    #[test]
    fn the_kept_table_is_read_again_after_a_mount() {
        // Kept between two reads with no mount between them. Engines at work beside the tests
        // mount now and then: one quiet pair in fifty tries is enough.
        let kept = (0..50).any(|_| {
            let a = Mounts::current().unwrap();
            Arc::ptr_eq(&a, &Mounts::current().unwrap())
        });
        assert!(kept, "never kept");
        let first = Mounts::current().unwrap();
        // A mount in a namespace of its own would not be seen: this needs root, as CI has.
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("not root: the change half is not checked");
            return;
        }
        let after = Mounts::current().unwrap();
        let _ = std::process::Command::new("umount")
            .arg(dir.path())
            .status();
        assert!(!Arc::ptr_eq(&first, &after), "a mount: read again");
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert!(after.0.iter().any(|m| m.point == real));
    }

    #[test]
    fn reads_this_process_table() {
        let t = Mounts::read().unwrap();
        let (m, _) = t.locate(Path::new("/proc/self")).unwrap();
        assert_eq!(m.point, Path::new("/proc"));
    }
}
