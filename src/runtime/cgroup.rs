//! The memory and pids limits the kernel enforces on a container's process, read from its
//! cgroup (v1 or v2). An engine's inspect reports what it was told, which can differ from the
//! kernel after an out-of-band update (Podman 4.3's `update` changes the cgroup and not its
//! inspect): the cgroup is where a limit holds, so that is where it is checked.

use std::path::{Path, PathBuf};

/// What the kernel enforces. `None`: that limit could not be read (a controller the engine
/// does not use, swap accounting off); the engine's word then stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Enforced {
    /// Bytes; `Some(0)` means unlimited.
    pub memory: Option<u64>,
    /// Memory plus swap, in bytes; `Some(0)` means unlimited.
    pub memory_swap: Option<u64>,
    /// `Some(0)` means unlimited.
    pub pids: Option<u64>,
}

/// The cgroups of the process `pid` (its `/proc/<pid>/cgroup`). The kernel writes that file
/// under a lock for every read (a fifth of a look at 200 members), and it stays the same
/// while that process lives unless root moves it: `observe` keeps it with the start it read
/// it for. The limits themselves are read at every look.
pub fn membership(pid: u32) -> Option<String> {
    read_small(Path::new(&format!("/proc/{pid}/cgroup")))
}

/// The limits in force for the process `pid`, read through the host's /sys/fs/cgroup.
#[cfg(test)]
pub fn enforced(pid: u32) -> Enforced {
    membership(pid)
        .map(|text| enforced_on(&text))
        .unwrap_or_default()
}

/// Where one process's cgroups are: `root` is where the cgroup file systems are mounted,
/// `proc_cgroup` the process's `/proc/<pid>/cgroup`.
struct Dirs<'a> {
    root: &'a Path,
    proc_cgroup: &'a str,
}

impl Dirs<'_> {
    /// The folder of a v1 controller (`memory`, `pids`, `cpuacct`), if it is mounted as v1.
    fn v1(&self, controller: &str) -> Option<PathBuf> {
        self.proc_cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',').any(|c| c == controller).then(|| {
                let shared = list.contains(',');
                let mount = if shared { list } else { controller };
                let dir = self.root.join(mount).join(path.trim_start_matches('/'));
                // `cpu,cpuacct` is mounted once and linked under each name. (A controller of
                // its own has one place: no `stat` for it, 400 in a look at 200 members.)
                if !shared || dir.exists() {
                    dir
                } else {
                    self.root
                        .join(controller)
                        .join(path.trim_start_matches('/'))
                }
            })
        })
    }

    /// The folder in the unified (v2) hierarchy.
    fn unified(&self) -> Option<PathBuf> {
        self.proc_cgroup
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(|p| self.root.join(p.trim_start_matches('/')))
    }
}

/// A small number read from a cgroup file (the files are a few bytes; more is not read).
fn read_number(dir: &Path, file: &str) -> Option<u64> {
    let text = read_small(&dir.join(file))?;
    text.trim().parse().ok()
}

fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    // Sized up front: a growing buffer reads a kernel file in many small `read`s.
    let mut text = String::with_capacity(4096);
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

pub use crate::core::container::Usage;

/// `usage` of container `id` whose first process is `pid`: its figures only when its cgroup
/// is its own (`container_usage_on`).
pub fn container_usage(id: &str, pid: u32) -> Usage {
    membership(pid)
        .map(|text| container_usage_on(id, &text))
        .unwrap_or_default()
}

/// `usage_on` for container `id`. The engines name a container's cgroup after its id
/// (`/docker/<id>`, `libpod-<id>`); a cgroup without it is someone else's too (rootless
/// Podman on cgroup v1 leaves members in the user's, here `/`: the whole machine's figures),
/// and is said to be shared, without figures.
pub fn container_usage_on(id: &str, membership: &str) -> Usage {
    if id.is_empty() || !membership.contains(id) {
        return Usage {
            shared: true,
            ..Usage::default()
        };
    }
    usage_on(membership)
}

/// `usage`, of the process whose `/proc/<pid>/cgroup` read `membership`.
pub fn usage_on(membership: &str) -> Usage {
    usage_in(Path::new("/sys/fs/cgroup"), membership)
}

/// As `enforced_in`: a v1 controller wins over the unified hierarchy.
fn usage_in(root: &Path, proc_cgroup: &str) -> Usage {
    let d = Dirs { root, proc_cgroup };
    let unified = d.unified();
    let cpu_ns = match d.v1("cpuacct") {
        Some(dir) => read_number(&dir, "cpuacct.usage"),
        None => unified.as_deref().and_then(|dir| {
            let stat = read_small(&dir.join("cpu.stat"))?;
            stat.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|us| us.saturating_mul(1000))
        }),
    };
    let memory = match d.v1("memory") {
        Some(dir) => read_number(&dir, "memory.usage_in_bytes"),
        None => unified
            .as_deref()
            .and_then(|dir| read_number(dir, "memory.current")),
    };
    let pids = match d.v1("pids") {
        Some(dir) => read_number(&dir, "pids.current"),
        None => unified
            .as_deref()
            .and_then(|dir| read_number(dir, "pids.current")),
    };
    Usage {
        cpu_ns,
        memory,
        pids,
        shared: false,
    }
}

/// `root` is where the cgroup file systems are mounted; `proc_cgroup` the process's
/// `/proc/<pid>/cgroup`. A v1 controller line wins over the unified hierarchy (the hybrid
/// layout keeps memory and pids in v1).
fn enforced_in(root: &Path, proc_cgroup: &str) -> Enforced {
    let d = Dirs { root, proc_cgroup };
    let limit = |dir: &Folder, file: &str| dir.read(file).and_then(|t| parse_limit(t.trim()));
    let (memory_v1, pids_v1) = (d.v1("memory"), d.v1("pids"));
    // The unified folder is walked to only when a v1 controller is missing.
    let unified = match (&memory_v1, &pids_v1) {
        (Some(_), Some(_)) => None,
        _ => d.unified().as_deref().map(Folder::open),
    };
    let mut e = Enforced::default();
    if let Some(dir) = memory_v1.as_deref().map(Folder::open) {
        e.memory = limit(&dir, "memory.limit_in_bytes");
        e.memory_swap = limit(&dir, "memory.memsw.limit_in_bytes");
    } else if let Some(dir) = &unified {
        e.memory = limit(dir, "memory.max");
        // memory.swap.max is swap alone, and "max" there means unlimited swap, while "0"
        // means none: memory+swap is then the memory limit.
        let swap = dir.read("memory.swap.max");
        e.memory_swap = match (e.memory, swap.as_deref().map(str::trim)) {
            (Some(0), _) | (_, Some("max")) => Some(0),
            (Some(m), Some(s)) => s.parse::<u64>().ok().map(|s| m.saturating_add(s)),
            _ => None,
        };
    }
    if let Some(dir) = &pids_v1 {
        e.pids = read_small(&dir.join("pids.max")).and_then(|t| parse_limit(t.trim()));
    } else if let Some(dir) = &unified {
        e.pids = limit(dir, "pids.max");
    }
    e
}

/// A cgroup folder whose small files are opened relative to it: the kernel walks its path
/// once, not once per file (a look at 200 members reads 600 of them, and the walks through
/// kernfs were most of that).
struct Folder {
    path: PathBuf,
    fd: Option<rustix::fd::OwnedFd>,
}

impl Folder {
    fn open(path: &Path) -> Folder {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        Folder {
            path: path.to_path_buf(),
            fd: rustix::fs::open(path, flags, Mode::empty()).ok(),
        }
    }

    /// `file` of this folder, as `read_small` reads it.
    fn read(&self, file: &str) -> Option<String> {
        use rustix::fs::{Mode, OFlags};
        use std::io::Read;
        let Some(dir) = &self.fd else {
            return read_small(&self.path.join(file));
        };
        let fd =
            rustix::fs::openat(dir, file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
        let mut text = String::with_capacity(64);
        std::fs::File::from(fd)
            .take(64 * 1024)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    }
}

/// `max` and v1's "no limit" (the largest page-aligned i64) are 0, as the engines say it.
fn parse_limit(text: &str) -> Option<u64> {
    if text == "max" {
        return Some(0);
    }
    let n: u64 = text.parse().ok()?;
    Some(if n >= 1 << 62 { 0 } else { n })
}

/// Overrides the limits an inspect reported with those the kernel enforces, where they
/// could be read. The kernel keeps memory limits in whole pages: a value within the page the
/// engine's value falls in is that value.
pub fn overlay(effective: &mut crate::policy::Effective, pid: Option<u32>) {
    let Some(pid) = pid else { return };
    overlay_with(effective, membership(pid).as_deref());
}

/// `overlay`, for a process whose cgroups (`membership`) were read already.
pub fn overlay_with(effective: &mut crate::policy::Effective, membership: Option<&str>) {
    let Some(text) = membership else { return };
    overlay_enforced(effective, enforced_on(text));
}

/// The limits the kernel enforces on the processes of these cgroups (`membership`).
pub fn enforced_on(membership: &str) -> Enforced {
    enforced_in(Path::new("/sys/fs/cgroup"), membership)
}

/// `overlay`, with the limits read already (`enforced_on`).
pub fn overlay_enforced(effective: &mut crate::policy::Effective, e: Enforced) {
    const PAGE: u64 = 4096;
    let same_page = |kernel: u64, engine: u64| kernel / PAGE == engine / PAGE;
    if let Some(m) = e.memory
        && !same_page(m, effective.memory_bytes)
    {
        effective.memory_bytes = m;
    }
    let swap = u64::try_from(effective.memory_swap_bytes).unwrap_or(0);
    if let Some(s) = e.memory_swap
        && !same_page(s, swap)
    {
        effective.memory_swap_bytes = i64::try_from(s).unwrap_or(i64::MAX);
    }
    if let Some(p) = e.pids {
        effective.pids_limit = i64::try_from(p).unwrap_or(i64::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = t.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        t
    }

    #[test]
    fn reads_v1_controllers() {
        let t = tree(&[
            ("memory/docker/c1/memory.limit_in_bytes", "67108864\n"),
            ("memory/docker/c1/memory.memsw.limit_in_bytes", "67108864\n"),
            ("pids/docker/c1/pids.max", "64\n"),
        ]);
        let proc =
            "9:name=systemd:/docker/c1\n8:pids:/docker/c1\n4:memory:/docker/c1\n0::/docker/c1\n";
        assert_eq!(
            enforced_in(t.path(), proc),
            Enforced {
                memory: Some(64 << 20),
                memory_swap: Some(64 << 20),
                pids: Some(64)
            }
        );
    }

    #[test]
    fn reads_v2_and_unlimited_values() {
        let t = tree(&[
            ("system.slice/c2/memory.max", "max\n"),
            ("system.slice/c2/memory.swap.max", "0\n"),
            ("system.slice/c2/pids.max", "max\n"),
        ]);
        let e = enforced_in(t.path(), "0::/system.slice/c2\n");
        assert_eq!(
            e,
            Enforced {
                memory: Some(0),
                memory_swap: Some(0),
                pids: Some(0)
            }
        );
        let t = tree(&[
            ("c3/memory.max", "1048576\n"),
            ("c3/memory.swap.max", "0\n"),
        ]);
        let e = enforced_in(t.path(), "0::/c3\n");
        assert_eq!(
            (e.memory, e.memory_swap, e.pids),
            (Some(1 << 20), Some(1 << 20), None)
        );
        assert_eq!(parse_limit("9223372036854771712"), Some(0));
    }

    #[test]
    fn reads_usage_in_v1_and_v2() {
        let t = tree(&[
            ("cpu,cpuacct/docker/c1/cpuacct.usage", "2500000000\n"),
            ("memory/docker/c1/memory.usage_in_bytes", "1048576\n"),
            ("pids/docker/c1/pids.current", "3\n"),
        ]);
        let proc = "8:pids:/docker/c1\n4:memory:/docker/c1\n2:cpu,cpuacct:/docker/c1\n0::/\n";
        assert_eq!(
            usage_in(t.path(), proc),
            Usage {
                cpu_ns: Some(2_500_000_000),
                memory: Some(1 << 20),
                pids: Some(3),
                shared: false,
            }
        );
        let t = tree(&[
            ("c2/cpu.stat", "usage_usec 1500\nuser_usec 1000\n"),
            ("c2/memory.current", "4096\n"),
        ]);
        let u = usage_in(t.path(), "0::/c2\n");
        assert_eq!(
            (u.cpu_ns, u.memory, u.pids),
            (Some(1_500_000), Some(4096), None)
        );
    }

    #[test]
    fn this_process_has_readable_limits_or_none() {
        // Whatever the machine, reading our own cgroup neither fails nor invents a limit
        // below what the process already uses.
        let e = enforced(std::process::id());
        if let Some(m) = e.memory.filter(|m| *m > 0) {
            assert!(m > 1 << 20, "{m}");
        }
    }

    /// A member whose cgroup is not its own (rootless Podman on cgroup v1 leaves it at `/`)
    /// gets no figure, and is said to share; one named after its id gets its own.
    #[test]
    fn a_cgroup_not_named_after_the_container_is_shared() {
        let root = "9:name=systemd:/\n8:pids:/\n4:memory:/\n1:cpu:/\n0::/\n";
        let u = container_usage_on("7a2149e5e11a", root);
        assert_eq!(
            u,
            Usage {
                shared: true,
                ..Usage::default()
            }
        );
        let own =
            "4:memory:/libpod_parent/libpod-7a2149e5e11a\n0::/libpod_parent/libpod-7a2149e5e11a\n";
        assert!(!container_usage_on("7a2149e5e11a", own).shared);
        assert!(container_usage_on("", own).shared);
    }
}
