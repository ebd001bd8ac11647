//! What the kernel says about a container's first process: the truth behind the engine's
//! inspect. Read from `/proc/<pid>/status` after start, before the member's command runs.

use std::path::Path;

/// The fields of `/proc/<pid>/status` that verification checks. A field that is missing or
/// does not parse reads as the worst case (every capability, uid `u32::MAX`), so it fails the
/// check rather than pass it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// Effective capabilities (`CapEff`), a bit mask.
    pub cap_eff: u64,
    /// The bounding set (`CapBnd`): what the process could ever gain.
    pub cap_bnd: u64,
    /// `NoNewPrivs`: setuid binaries cannot raise its privileges.
    pub no_new_privs: bool,
    /// Real uid and gid, as seen from the host.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
}

/// Reads the status of process `pid` (a pid of the host's namespace).
pub fn status(pid: u32) -> std::io::Result<ProcStatus> {
    let text =
        crate::files::read_kernel_text(&Path::new("/proc").join(pid.to_string()).join("status"))?;
    Ok(parse(&text))
}

/// Why the network namespace of process `pid` is not one with loopback alone, apart from
/// the host's: none when it is. What a member without a network (or behind its proxy) must
/// have, read from the kernel rather than taken from the engine's word (Docker makes such a
/// namespace for `NetworkDisabled`, without its network plumbing).
pub(crate) fn loopback_only(pid: u32) -> Option<String> {
    let proc = Path::new("/proc").join(pid.to_string());
    let ns = |p: &Path| std::fs::read_link(p).map(|l| l.to_string_lossy().into_owned());
    match (ns(&proc.join("ns/net")), ns(Path::new("/proc/self/ns/net"))) {
        (Ok(theirs), Ok(ours)) if theirs == ours => {
            return Some(format!("it shares ateam's network namespace ({theirs})"));
        }
        (Err(e), _) => return Some(format!("cannot read its network namespace: {e}")),
        _ => {}
    }
    match crate::files::read_kernel_text(&proc.join("net/dev")) {
        Ok(text) => {
            let others = interfaces_besides_lo(&text);
            (!others.is_empty()).then(|| format!("it has network interfaces {others:?}"))
        }
        Err(e) => Some(format!("cannot read its network interfaces: {e}")),
    }
}

/// The interfaces `/proc/<pid>/net/dev` lists, but `lo`.
fn interfaces_besides_lo(net_dev: &str) -> Vec<String> {
    net_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_string()))
        .filter(|name| name != "lo")
        .collect()
}

pub(crate) fn parse(text: &str) -> ProcStatus {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let hex = |name: &str| u64::from_str_radix(&field(name), 16).unwrap_or(u64::MAX);
    let first = |name: &str| {
        field(name)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(u32::MAX)
    };
    ProcStatus {
        cap_eff: hex("CapEff:"),
        cap_bnd: hex("CapBnd:"),
        no_new_privs: field("NoNewPrivs:") == "1",
        uid: first("Uid:"),
        gid: first("Gid:"),
    }
}

/// What tells this start of a container from every other: the boot id and the start time of
/// its first process (`pid`, the container's init), as the gate reads them from inside
/// (`/proc/sys/kernel/random/boot_id`, `/proc/1/stat`). A release names it, so that it holds
/// for one start only.
pub(crate) fn start_token(pid: u32) -> std::io::Result<String> {
    let boot = boot_id()?;
    let stat = crate::files::read_kernel_text(Path::new(&format!("/proc/{pid}/stat")))?;
    let start = stat_start_time(&stat).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat has no start time"),
        )
    })?;
    Ok(format!("{boot} {start}"))
}

/// This boot's id, read once: it cannot change while this process lives (a look at 200
/// members read it 600 times).
fn boot_id() -> std::io::Result<&'static str> {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(b) = BOOT.get() {
        return Ok(b);
    }
    let read = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    Ok(BOOT.get_or_init(|| read.trim().to_string()))
}

/// Field 22 of `/proc/<pid>/stat`; the command name before it may hold spaces and `)`.
pub(crate) fn stat_start_time(stat: &str) -> Option<&str> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)
}

/// The parent of process `pid` (field 4 of its `/proc/<pid>/stat`).
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = crate::files::read_kernel_text(Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The host pid of the first process of container `id`'s start now running, from the files
/// its engine rewrites at every start (`PidFiles`), trusted only as far as the kernel agrees:
/// the process is the first of a pid namespace of its own, its parent is the monitor the
/// other file names, and that monitor's command line names the container. Neither file is
/// within any member's reach (they are in the engine's run folder); a file left from an
/// earlier start names a process that is gone, or another one, which fails those checks.
/// None then, and the caller asks the engine.
pub(crate) fn init_from_files(files: &crate::backend::PidFiles, id: &str) -> Option<u32> {
    let init = engine_pid(&files.init)?;
    let monitor = engine_pid(&files.monitor)?;
    let stat = crate::files::read_kernel_text(Path::new(&format!("/proc/{init}/stat"))).ok()?;
    if stat_parent(&stat) != Some(monitor) || !first_of_own_namespace(init) {
        return None;
    }
    let cmdline = crate::files::read_kernel(Path::new(&format!("/proc/{monitor}/cmdline"))).ok()?;
    cmdline
        .split(|b| *b == 0)
        .any(|arg| arg == id.as_bytes())
        .then_some(init)
}

/// The host pid of a Docker container's first process, read from the kernel instead of an
/// inspect after its start (5-30 ms of a start on a loaded machine): among the processes of
/// the container's pids cgroup (Docker's `init` and the gate, which holds the command until
/// the release, so nothing of the member's runs there yet), the one that is pid 1 of a pid
/// namespace of its own and whose parent is the containerd shim naming the container (`-id
/// <id>`), as `init_from_files` checks Podman's. Docker's cgroupfs (`/docker/<id>`) and
/// systemd (`system.slice/docker-<id>.scope`) places, on cgroup v1 and v2; None elsewhere (a
/// `cgroupParent`, rootless Docker), when no process or more than one holds, and the caller
/// asks the engine.
pub fn docker_init(id: &str) -> Option<u32> {
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let places = [
        format!("docker/{id}"),
        format!("system.slice/docker-{id}.scope"),
    ];
    let procs = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .flat_map(|root| {
            places
                .iter()
                .map(move |p| format!("{root}/{p}/cgroup.procs"))
        })
        .find_map(|path| crate::files::read_kernel_text(Path::new(&path)).ok())?;
    let mut inits = procs
        .split_whitespace()
        .take(64)
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|&pid| first_of_own_namespace(pid) && shim_of(pid, id));
    let init = inits.next()?;
    inits.next().is_none().then_some(init)
}

/// Whether `pid`'s parent is the containerd shim of container `id` (`-id <id>` on its
/// command line).
fn shim_of(pid: u32, id: &str) -> bool {
    let parent = crate::files::read_kernel_text(Path::new(&format!("/proc/{pid}/stat")))
        .ok()
        .and_then(|stat| stat_parent(&stat));
    let Some(shim) = parent else {
        return false;
    };
    let Ok(cmdline) = crate::files::read_kernel(Path::new(&format!("/proc/{shim}/cmdline"))) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    args.windows(2)
        .any(|w| w[0] == b"-id" && w[1] == id.as_bytes())
}

/// A pid in a file of the engine's run folder. Opened by its path, not through its folder:
/// rootless Podman's folder is its user namespace root's, which the user may pass through but
/// not read.
fn engine_pid(path: &Path) -> Option<u32> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(32)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse::<u32>().ok().filter(|p| *p > 1)
}

/// Field 4 of `/proc/<pid>/stat`: the parent's pid.
fn stat_parent(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is pid 1 of a pid namespace below the host's (`NSpid` of its status).
fn first_of_own_namespace(pid: u32) -> bool {
    let Ok(text) = crate::files::read_kernel_text(Path::new(&format!("/proc/{pid}/status"))) else {
        return false;
    };
    let Some(ids) = text.lines().find_map(|l| l.strip_prefix("NSpid:")) else {
        return false;
    };
    let ids: Vec<&str> = ids.split_whitespace().collect();
    ids.len() >= 2 && ids.last() == Some(&"1")
}

/// Whether `program` names an executable file inside the container of `pid`: looked up in its
/// PATH when it has no slash, resolved inside the container's root (RESOLVE_IN_ROOT, so an
/// absolute symlink such as /bin/sh -> /bin/busybox means the container's busybox).
pub(crate) fn runnable_in(pid: u32, program: &str, cwd: &Path) -> bool {
    use rustix::fs::{CWD, Mode, OFlags, openat};
    use std::os::fd::AsFd;
    let Ok(root) = openat(
        CWD,
        format!("/proc/{pid}/root"),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let environ =
        crate::files::read_kernel(Path::new(&format!("/proc/{pid}/environ"))).unwrap_or_default();
    let path = environ
        .split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(b"PATH="))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    let candidates: Vec<std::path::PathBuf> = if program.starts_with('/') {
        vec![program.into()]
    } else if program.contains('/') {
        vec![cwd.join(program)]
    } else {
        path.split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(program))
            .collect()
    };
    candidates.iter().any(|c| {
        let rel = c.strip_prefix("/").unwrap_or(c);
        crate::files::handle_in_root(root.as_fd(), rel)
            .and_then(|fd| crate::files::handle_stat(fd.as_fd()))
            .map(|st| {
                let mode = u32::from(st.stx_mode);
                mode & 0o170000 == 0o100000 && mode & 0o111 != 0
            })
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_besides_loopback() {
        let lo = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n    lo:       0       0    0\n";
        assert_eq!(interfaces_besides_lo(lo), Vec::<String>::new());
        let eth = format!("{lo}  eth0: 1 2 3\nveth1a2b: 0 0\n");
        assert_eq!(interfaces_besides_lo(&eth), ["eth0", "veth1a2b"]);
    }

    #[test]
    fn this_process_shares_its_own_network_namespace() {
        let me = std::process::id();
        let why = loopback_only(me).unwrap();
        assert!(why.contains("shares ateam's network namespace"), "{why}");
        assert!(loopback_only(u32::MAX).unwrap().contains("cannot read"));
    }

    #[test]
    fn parses_status() {
        let s = "Name:\tsleep\nUid:\t1001\t1001\t1001\t1001\nGid:\t1001\t1001\t1001\t1001\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n";
        assert_eq!(
            parse(s),
            ProcStatus {
                cap_eff: 0,
                cap_bnd: 0,
                no_new_privs: true,
                uid: 1001,
                gid: 1001
            }
        );
        let me = status(std::process::id()).unwrap();
        assert_eq!(me.uid, rustix::process::getuid().as_raw());
    }

    #[test]
    fn start_time_is_field_22_even_with_a_tricky_name() {
        let stat = "42 (a b) c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(stat_start_time(stat), Some("987654"));
        let me = start_token(std::process::id()).unwrap();
        assert_eq!(me, start_token(std::process::id()).unwrap());
        assert_ne!(
            me,
            start_token(1).unwrap(),
            "another process, another token"
        );
    }

    #[test]
    fn finds_commands_through_a_process_root() {
        let me = std::process::id();
        assert!(runnable_in(me, "sh", Path::new("/")));
        assert!(runnable_in(me, "/bin/sh", Path::new("/")));
        assert!(!runnable_in(me, "no-such-program-here", Path::new("/")));
        assert!(
            !runnable_in(me, "/etc/passwd", Path::new("/")),
            "not executable"
        );
        assert!(!runnable_in(me, "/etc", Path::new("/")), "a folder");
    }

    /// A child of `parent`, once it has one.
    fn child_of(parent: u32) -> u32 {
        for _ in 0..200 {
            let children =
                std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"));
            if let Some(c) = children
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse().ok())
            {
                return c;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{parent} made no child");
    }

    /// A monitor whose command line names `id`, with a child: with `own_namespace`, one that
    /// is pid 1 of its own pid namespace (`unshare`), as conmon and a container's first
    /// process are; else one in the host's.
    fn monitor_with_child(id: &str, own_namespace: bool) -> (std::process::Child, u32) {
        let mut cmd = std::process::Command::new(if own_namespace { "unshare" } else { "sh" });
        if own_namespace {
            cmd.args([
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--kill-child",
            ])
            .args(["sh", "-c", "sleep 30", id]);
        } else {
            cmd.args(["-c", "sleep 30 & wait", id]);
        }
        let monitor = cmd.spawn().unwrap();
        let child = child_of(monitor.id());
        (monitor, child)
    }

    #[test]
    fn a_starts_first_process_is_trusted_only_as_far_as_the_kernel_agrees() {
        let id = "0123abcd";
        let dir = tempfile::tempdir().unwrap();
        let files = |init: u32, monitor: u32| {
            std::fs::write(dir.path().join("pidfile"), format!("{init}\n")).unwrap();
            std::fs::write(dir.path().join("conmon.pid"), monitor.to_string()).unwrap();
            crate::backend::PidFiles {
                init: dir.path().join("pidfile"),
                monitor: dir.path().join("conmon.pid"),
            }
        };
        let (mut monitor, init) = monitor_with_child(id, true);
        let m = monitor.id();
        assert_eq!(init_from_files(&files(init, m), id), Some(init));
        assert_eq!(
            init_from_files(&files(init, m), "0123abc"),
            None,
            "a monitor of another container"
        );
        let me = std::process::id();
        assert_eq!(
            init_from_files(&files(init, me), id),
            None,
            "not its parent"
        );
        assert_eq!(
            init_from_files(&files(m, me), id),
            None,
            "the monitor is no namespace's first process"
        );
        let (mut plain, child) = monitor_with_child(id, false);
        assert_eq!(
            init_from_files(&files(child, plain.id()), id),
            None,
            "the right parent, but a child in the host's namespace"
        );
        let sleeper = rustix::process::Pid::from_raw(i32::try_from(child).unwrap()).unwrap();
        rustix::process::kill_process(sleeper, rustix::process::Signal::KILL).unwrap();
        plain.wait().unwrap();
        let f = files(init, m);
        std::fs::write(&f.init, "garbage").unwrap();
        assert_eq!(init_from_files(&f, id), None);
        monitor.kill().unwrap();
        monitor.wait().unwrap();
        assert_eq!(
            init_from_files(&files(init, m), id),
            None,
            "gone: a stale file"
        );
    }
}
