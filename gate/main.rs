//! ateam-gate: the first process of every member container, started by the engine's init.
//!
//! It holds the member's command back until ateam has checked the running container from the
//! outside (policy, and that every granted folder is the very folder that was validated), then
//! hands it the secrets and `exec`s it. ateam releases it by writing into `/.ateam/go` the
//! container's id, the boot id and the start time of the container's first process (its
//! init). A release is good for one start only: after any restart, by the engine or by a
//! person, the init is a new process with a new start time, so the old file no longer counts
//! and the gate waits for ateam to check the container again.
//!
//! `ateam exec` runs its command through the gate too (`/.ateam/gate --exec -- CMD...`): it is
//! checked inside the container, at the moment it runs, that this start was released, so a
//! restart between ateam's look from outside and the exec cannot put a command into a start
//! nobody checked.
//!
//! `--exec --alive FILE` runs the command as a child instead, with the member's secrets as
//! the member's own command gets them, and ends it (its process group: SIGTERM, then SIGKILL)
//! when FILE, whose mtime the `ateam exec` client sets every second, goes stale or away: the
//! engines keep an exec's process running when its client is gone.
//!
//! `--probe PROGRAM` prints what ateam checks of a start under gVisor, as the sandbox's own
//! kernel shows it (the host's `/proc` shows the sandbox's processes, not the member's): the
//! boot id, `/proc/1/stat`, whether PROGRAM can run, this process's no-new-privileges, and
//! `/proc/1/status`. ateam runs it through the engine's exec while the gate still holds.
//!
//! Built by build.rs as a static, std-only binary so that it runs in any image.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, exit};
use std::time::{Duration, Instant};

const CTL: &str = "/.ateam";
const WAIT: Duration = Duration::from_secs(300);
const PR_SET_NO_NEW_PRIVS: i32 = 38;
const PR_GET_NO_NEW_PRIVS: i32 = 39;
/// How old the `--alive` file may get before the client counts as gone (it is touched
/// every second).
const STALE: Duration = Duration::from_secs(5);
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const SIG_IGN: usize = 1;

unsafe extern "C" {
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn __errno_location() -> *mut i32;
    fn setpgid(pid: i32, pgid: i32) -> i32;
    fn getpgrp() -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
    fn signal(sig: i32, handler: usize) -> usize;
    fn inotify_init1(flags: i32) -> i32;
    fn inotify_add_watch(fd: i32, path: *const u8, mask: u32) -> i32;
    fn poll(fds: *mut PollFd, n: u64, timeout_ms: i32) -> i32;
    fn read(fd: i32, buf: *mut u8, n: usize) -> isize;
}

/// A classic BPF instruction (`struct sock_filter`).
#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

const PR_SET_SECCOMP: i32 = 22;
const SECCOMP_MODE_FILTER: u64 = 2;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const CLONE_NEWUSER: u32 = 0x1000_0000;
const NR_CLONE: u32 = 56;
const NR_UNSHARE: u32 = 272;
const NR_CLONE3: u32 = 435;
/// The x32 ABI's bit in a syscall number on x86_64.
const X32_BIT: u32 = 0x4000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// Under gVisor (`ATEAM_RUNTIME=gvisor`, which ateam sets in the member's configuration) the
/// member's command may not make a user namespace. runsc does not apply the engine's seccomp
/// profile, and in a user namespace of its own a process forks past `RLIMIT_NPROC`, which is
/// what bounds its processes there (the host's pids cgroup counts the sandbox's threads).
/// Under runc the engine's profile and the pids cgroup do it. `clone3` is refused with ENOSYS
/// (its flags are in memory a filter cannot read), so that libc falls back to `clone`.
/// A filter that cannot be installed ends the gate: the member does not run unbounded.
fn no_user_namespaces() {
    if std::env::var_os("ATEAM_RUNTIME").is_none_or(|r| r != "gvisor") {
        return;
    }
    let stmt = |code: u16, k: u32| SockFilter { code, jt: 0, jf: 0, k };
    let jump = |k: u32, jt: u8, jf: u8| SockFilter { code: 0x15, jt, jf, k }; // jeq k
    let filter = [
        stmt(0x20, 4),                          // 0: ld arch
        jump(AUDIT_ARCH_X86_64, 1, 0),          // 1: x86_64 -> 3
        stmt(0x06, RET_KILL_PROCESS),           // 2: another ABI: never
        stmt(0x20, 0),                          // 3: ld nr
        SockFilter { code: 0x45, jt: 8, jf: 0, k: X32_BIT }, // 4: jset x32 -> 13 (kill)
        jump(NR_CLONE3, 6, 0),                  // 5: clone3 -> 12
        jump(NR_UNSHARE, 1, 0),                 // 6: unshare -> 8
        jump(NR_CLONE, 0, 3),                   // 7: clone -> 8, else -> 11
        stmt(0x20, 16),                         // 8: ld args[0] (low word)
        SockFilter { code: 0x45, jt: 0, jf: 1, k: CLONE_NEWUSER }, // 9: jset NEWUSER -> 10 : 11
        stmt(0x06, RET_ERRNO | EPERM),          // 10
        stmt(0x06, RET_ALLOW),                  // 11
        stmt(0x06, RET_ERRNO | ENOSYS),         // 12
        stmt(0x06, RET_KILL_PROCESS),           // 13
    ];
    let prog = SockFprog {
        len: filter.len() as u16,
        filter: filter.as_ptr(),
    };
    let ok = unsafe { prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog as *const SockFprog as u64, 0, 0) };
    if ok != 0 {
        let errno = unsafe { *__errno_location() };
        eprintln!("ateam-gate: cannot refuse user namespaces (seccomp, errno {errno}); not starting");
        exit(126);
    }
}

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

/// Wakes the wait for the release as soon as ateam writes it (it renames the file into
/// place), rather than at the next of its 10 ms looks: an inotify watch on the control
/// folder. Without one (a kernel or seccomp profile that refuses it), the looks alone.
struct Wake(i32);

impl Wake {
    fn new() -> Wake {
        const IN_CLOEXEC: i32 = 0o2000000;
        const IN_NONBLOCK: i32 = 0o4000;
        const IN_MODIFY: u32 = 0x2;
        const IN_CLOSE_WRITE: u32 = 0x8;
        const IN_MOVED_TO: u32 = 0x80;
        const IN_CREATE: u32 = 0x100;
        let fd = unsafe { inotify_init1(IN_CLOEXEC | IN_NONBLOCK) };
        let mask = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE;
        if fd >= 0 && unsafe { inotify_add_watch(fd, c"/.ateam".as_ptr().cast(), mask) } < 0 {
            return Wake(-1);
        }
        Wake(fd)
    }

    /// Waits until something changed in the folder, or `ms` passed.
    fn wait(&self, ms: i32) {
        if self.0 < 0 {
            std::thread::sleep(Duration::from_millis(ms.unsigned_abs().into()));
            return;
        }
        let mut fds = PollFd {
            fd: self.0,
            events: 1, // POLLIN
            revents: 0,
        };
        unsafe { poll(&mut fds, 1, ms) };
        let mut buf = [0u8; 4096];
        while unsafe { read(self.0, buf.as_mut_ptr(), buf.len()) } > 0 {}
    }
}

fn main() {
    let mut args = std::env::args_os().skip(1).peekable();
    if args.peek().map(|a| a == "--probe").unwrap_or(false) {
        args.next();
        probe(args.next().unwrap_or_default());
    }
    let exec_mode = args.peek().map(|a| a == "--exec").unwrap_or(false);
    if exec_mode {
        args.next();
    }
    let mut alive = None;
    if exec_mode && args.peek().map(|a| a == "--alive").unwrap_or(false) {
        args.next();
        alive = args.next().map(std::path::PathBuf::from);
    }
    if args.peek().map(|a| a == "--").unwrap_or(false) {
        args.next();
    }
    let cmd: Vec<OsString> = args.collect();
    if cmd.is_empty() {
        eprintln!("ateam-gate: no command to run");
        exit(126);
    }
    // A command that cannot run is said now, before ateam waits to release it: ateam then
    // sees the container stop and reports this line.
    if !runnable(&cmd[0]) {
        eprintln!(
            "ateam-gate: command not found or not executable: {:?}",
            cmd[0]
        );
        exit(127);
    }
    // The engine sets this too; setting it here means it holds even if a container was
    // created by hand without it.
    unsafe {
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let me = me.trim().to_string();
    let this_start = start_token();
    let go = Path::new(CTL).join("go");
    if exec_mode {
        exec_if_released(&go, &me, this_start.as_deref(), &cmd, alive.as_deref());
    }
    let deadline = Instant::now() + WAIT;
    let wake = Wake::new();
    let release = loop {
        if let (Ok(release), Some(start)) = (std::fs::read_to_string(&go), &this_start)
            && released(&release, &me, start)
        {
            break first_line(&release).to_string();
        }
        if Instant::now() > deadline {
            eprintln!(
                "ateam-gate: not released by ateam within {}s; not starting",
                WAIT.as_secs()
            );
            exit(125);
        }
        wake.wait(10);
    };
    // A member with an allow list reaches the network only through the bridge: started now,
    // after the release, and before the member's command, which finds it listening.
    if let (Some(listen), Some(socket)) = (
        std::env::var_os("ATEAM_EGRESS_LISTEN"),
        std::env::var_os("ATEAM_EGRESS_SOCKET"),
    ) {
        start_bridge(&listen, &socket, "the egress bridge", "no network");
    }
    // A member of a team that allows helper requests asks through a second bridge, to its
    // helper server's socket (`ATEAM_HELPERS_URL`).
    if let (Some(listen), Some(socket)) = (
        std::env::var_os("ATEAM_HELPERS_LISTEN"),
        std::env::var_os("ATEAM_HELPERS_SOCKET"),
    ) {
        start_bridge(&listen, &socket, "the helpers bridge", "no helper requests");
    }
    // The next task ateam gave this container (`ateam task`) runs in place of its first.
    let cmd = task_for(&me).unwrap_or(cmd);
    no_user_namespaces();
    let mut command = Command::new(&cmd[0]);
    command.args(&cmd[1..]);
    add_secrets(&mut command);
    // The release this start ran on, as read: the file itself is rewritten by the next start
    // (a replacement's, even while this one still runs).
    command.env("ATEAM_RELEASE", release);
    let err = command.exec();
    eprintln!("ateam-gate: cannot run {:?}: {err}", cmd[0]);
    exit(127);
}

/// Secrets: NUL-separated KEY=VALUE entries in a 0600 file of the member's uid.
fn add_secrets(command: &mut Command) {
    if let Ok(bytes) = std::fs::read(Path::new(CTL).join("secrets")) {
        for entry in bytes.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            if let Some(eq) = entry.iter().position(|b| *b == b'=') {
                let key = OsString::from_vec(entry[..eq].to_vec());
                let value = OsString::from_vec(entry[eq + 1..].to_vec());
                command.env(key, value);
            }
        }
    }
}

/// Whether the `ateam exec` client still rewrites `alive`.
fn client_alive(alive: &Path) -> bool {
    match std::fs::metadata(alive).and_then(|m| m.modified()) {
        // A time ahead of ours (clock steps) counts as fresh.
        Ok(t) => t.elapsed().map(|age| age < STALE).unwrap_or(true),
        Err(_) => false,
    }
}

/// Runs `command` as a child in this process's group and waits; ends the group when the
/// client is gone. Returns as the child did (128 + a signal's number).
fn run_tied(mut command: Command, alive: &Path, program: &OsString) -> ! {
    use std::os::unix::process::ExitStatusExt;
    // Its own group, so that the child and what it starts can be ended together (with a
    // terminal, the engine made this process a session leader, and so already a group's).
    unsafe {
        setpgid(0, 0);
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(err) => {
            eprintln!("ateam-gate: cannot run {program:?}: {err}");
            exit(127);
        }
    };
    // A Ctrl-C on the terminal reaches the whole group: the command decides, the gate stays
    // to watch. SIGTERM too: the gate sends it to its own group below.
    unsafe {
        signal(2, SIG_IGN);
        signal(3, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
    }
    let code = |s: std::process::ExitStatus| s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => exit(code(status)),
            Ok(None) => {}
            Err(_) => exit(1),
        }
        if !client_alive(alive) {
            let group = unsafe { getpgrp() };
            unsafe {
                kill(-group, SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // This process is in the group too: the last thing it does.
            unsafe {
                kill(-group, SIGKILL);
            }
            exit(137);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `--probe PROGRAM`: what the sandbox's kernel says of this start, for ateam's checks under
/// gVisor (see the module's comment). Lines: boot id, `/proc/1/stat`, `runnable 0|1`,
/// `nnp 0|1`, `nproc SOFT HARD` (of `/proc/1/limits`), then `/proc/1/status`.
fn probe(program: OsString) -> ! {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let nnp = unsafe { prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    let stat = read("/proc/1/stat");
    let limits = read("/proc/1/limits");
    let nproc = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max processes"))
        .map(|rest| rest.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    print!(
        "{}\n{}\nrunnable {}\nnnp {}\nnproc {}\n{}",
        read("/proc/sys/kernel/random/boot_id").trim(),
        stat.trim(),
        u8::from(!program.is_empty() && runnable(&program)),
        nnp,
        nproc,
        read("/proc/1/status")
    );
    exit(0);
}

/// `--exec`: runs `cmd` in place of this process only if this start of the container was
/// released; never waits (a person's `exec` into a held member is refused at once, 125).
/// With the member's secrets; with `alive`, as a child ended when the client goes.
fn exec_if_released(
    go: &Path,
    me: &str,
    this_start: Option<&str>,
    cmd: &[OsString],
    alive: Option<&Path>,
) -> ! {
    let ok = match (std::fs::read_to_string(go), this_start) {
        (Ok(release), Some(start)) => released(&release, me, start),
        _ => false,
    };
    if !ok {
        eprintln!(
            "ateam-gate: this start of the member was not checked and released by ateam (held at its gate); not running the command. Run ateam apply"
        );
        exit(125);
    }
    no_user_namespaces();
    let mut command = Command::new(&cmd[0]);
    command.args(&cmd[1..]);
    add_secrets(&mut command);
    if let Some(alive) = alive {
        run_tied(command, alive, &cmd[0]);
    }
    let err = command.exec();
    eprintln!("ateam-gate: cannot run {:?}: {err}", cmd[0]);
    exit(127);
}

/// Starts `/.ateam/bridge` and waits for its "ready" line (it listens by then). A bridge that
/// fails leaves the member without a network, which is the narrower side: it is said, and the
/// member's command runs.
fn start_bridge(listen: &std::ffi::OsStr, socket: &std::ffi::OsStr, what: &str, without: &str) {
    use std::io::BufRead;
    let spawned = Command::new(Path::new(CTL).join("bridge"))
        .arg("--listen")
        .arg(listen)
        .arg("--socket")
        .arg(socket)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn();
    match spawned {
        Ok(mut child) => {
            let mut line = String::new();
            if let Some(out) = child.stdout.take() {
                let _ = std::io::BufReader::new(out).read_line(&mut line);
            }
            if line.trim() != "ready" {
                eprintln!("ateam-gate: {what} did not start; {without}");
            }
        }
        Err(e) => eprintln!("ateam-gate: cannot start {what}: {e}; {without}"),
    }
}

/// The boot id and the start time (in clock ticks since boot) of this container's init,
/// `/proc/1`: what makes this start of the container different from every other.
fn start_token() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let stat = std::fs::read_to_string("/proc/1/stat").ok()?;
    // The command name may hold spaces and parentheses: fields are counted after the last `)`.
    let after = &stat[stat.rfind(')')? + 1..];
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{} {start}", boot.trim()))
}

/// A release file reads `<container id> <boot id> <init start time>`; it counts only for
/// this container (whose hostname is its short id) and this very start.
/// The command of the next task ateam gave this container (`ateam task`, which then starts it
/// through this gate): `/.ateam/task` names the container on its first line, then holds the
/// command, each argument ended by a NUL. A file naming another container (the member made
/// anew since) is not this one's: it runs its own command, the manifest's.
fn task_for(me: &str) -> Option<Vec<OsString>> {
    let bytes = std::fs::read(Path::new(CTL).join("task")).ok()?;
    let nl = bytes.iter().position(|b| *b == b'\n')?;
    let id = std::str::from_utf8(&bytes[..nl]).ok()?.trim();
    if me.is_empty() || !id.starts_with(me) {
        return None;
    }
    let argv: Vec<OsString> = bytes[nl + 1..]
        .strip_suffix(&[0])?
        .split(|b| *b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    (!argv.is_empty() && !argv[0].is_empty()).then_some(argv)
}

/// The release's first line: `<container id> <boot id> <init start time>` as seen inside.
/// (Under gVisor ateam adds a line of its own, the sandbox's start as the host sees it.)
fn first_line(release: &str) -> &str {
    release.lines().next().unwrap_or_default().trim()
}

fn released(release: &str, me: &str, start: &str) -> bool {
    let release = first_line(release);
    let Some((id, token)) = release.split_once(' ') else {
        return false;
    };
    !me.is_empty() && id.starts_with(me) && token == start
}

/// Whether `program` names an executable file, looked up in PATH when it has no slash.
fn runnable(program: &OsString) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return is_exec(p);
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).any(|dir| is_exec(&dir.join(p)))
}
