//! A start under gVisor, seen from both sides of the sandbox.
//!
//! The host's `/proc` shows the sandbox's own processes, not the member's: the engine's pid is
//! `runsc-sandbox` (the Sentry, gVisor's kernel) and a sibling `runsc-gofer` serves it the
//! container's files. So the gate's checks take three views, each where it is true:
//! - the Sentry's, through `gate --probe` run by the engine's exec while the gate holds: the
//!   member's uid, gid and capabilities as the kernel that enforces them has them, and this
//!   start's token (the sandbox's boot id, random per sandbox, and its init's start time);
//! - the host kernel's of the sandbox process: its network namespace has loopback alone, which
//!   holds even against a Sentry that was subverted;
//! - the host kernel's of the gofer, whose root is the container's file tree with its binds:
//!   each granted folder at its target is the very folder pinned before the create (device and
//!   inode, as under runc), which is the folder the Sentry is served.
//!
//! What no view shows is the Sentry's own mount table by host device and inode: inside, a
//! gofer mount has gVisor's numbers. The gofer's tree is what it serves, so a swap shows there.

use super::procfs::{self, ProcStatus};

/// What `gate --probe` printed (gate/main.rs `probe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    /// `<boot id> <init start time>`, as the gate computes it for its release.
    pub token: String,
    /// Whether the member's command names a program that can run, in the member's PATH.
    pub runnable: bool,
    /// The probe's own no-new-privileges: the engine set it on a process it started in this
    /// sandbox (gVisor's `/proc/<pid>/status` has no `NoNewPrivs` line).
    pub nnp: bool,
    /// `RLIMIT_NPROC` of the first process, soft and hard (`unlimited` reads as None): what
    /// bounds the member's processes under gVisor.
    pub nproc: (Option<u64>, Option<u64>),
    /// The sandbox's `/proc/1/status`.
    pub status: ProcStatus,
}

/// Parses `gate --probe`'s output; None for anything else (a probe that did not run).
pub(crate) fn parse_probe(text: &str) -> Option<Probe> {
    let mut lines = text.splitn(6, '\n');
    let boot = lines.next()?.trim();
    let start = procfs::stat_start_time(lines.next()?)?;
    let runnable = lines.next()?.strip_prefix("runnable ")?.trim() == "1";
    let nnp = lines.next()?.strip_prefix("nnp ")?.trim() == "1";
    let mut nproc = lines
        .next()?
        .strip_prefix("nproc")?
        .split_whitespace()
        .map(|v| v.parse::<u64>().ok());
    let nproc = (nproc.next().flatten(), nproc.next().flatten());
    let status = lines.next()?;
    if boot.is_empty() || !status.contains("Uid:") {
        return None;
    }
    Some(Probe {
        token: format!("{boot} {start}"),
        runnable,
        nnp,
        nproc,
        status: procfs::parse(status),
    })
}

/// The gofer that serves the sandbox `sandbox` of container `id`: the `runsc-gofer` process
/// beside it (the same parent and owner) whose arguments name the container's bundle.
pub(crate) fn gofer_of(sandbox: u32, id: &str) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let proc = std::path::Path::new("/proc");
    let parent = procfs::parent_of(sandbox)?;
    let owner = std::fs::metadata(proc.join(sandbox.to_string()))
        .ok()?
        .uid();
    let mut found = None;
    for entry in std::fs::read_dir(proc).ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == sandbox || procfs::parent_of(pid) != Some(parent) {
            continue;
        }
        if entry.metadata().map(|m| m.uid()).ok() != Some(owner) {
            continue;
        }
        let Ok(cmdline) = crate::files::read_kernel(&entry.path().join("cmdline")) else {
            continue;
        };
        let mut args = cmdline.split(|b| *b == 0);
        if args.next() != Some(b"runsc-gofer".as_slice()) {
            continue;
        }
        if args.any(|a| is_bundle_of(a, id)) {
            // Two gofers for one container would be one too many to judge.
            if found.is_some() {
                return None;
            }
            found = Some(pid);
        }
    }
    found
}

/// `--bundle=<folder>` where the folder is the container's (Docker's ends in its id, Podman's
/// in `<id>/userdata`).
fn is_bundle_of(arg: &[u8], id: &str) -> bool {
    let Some(path) = arg.strip_prefix(b"--bundle=".as_slice()) else {
        return false;
    };
    let path = String::from_utf8_lossy(path);
    let path = path.trim_end_matches('/').trim_end_matches("/userdata");
    !id.is_empty() && path.rsplit('/').next() == Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_reads_as_the_sentry_said_and_nothing_else_does() {
        let text = "be42dd42-bc97\n1 (docker-init) S 0 1 1 0 0 0 0 0 0 0 3 2 4 1 20 0 1 0 15 10575872\nrunnable 1\nnnp 1\nnproc 64 64\nName:\tdocker-init\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n";
        let p = parse_probe(text).unwrap();
        assert_eq!(p.token, "be42dd42-bc97 15");
        assert!(p.runnable && p.nnp);
        assert_eq!(p.nproc, (Some(64), Some(64)));
        let unlimited = text.replace("nproc 64 64", "nproc unlimited unlimited");
        assert_eq!(parse_probe(&unlimited).unwrap().nproc, (None, None));
        assert_eq!((p.status.uid, p.status.gid), (1000, 1000));
        assert_eq!((p.status.cap_eff, p.status.cap_bnd), (0, 0));
        // gVisor's status has no NoNewPrivs line: the status alone never says it is set.
        assert!(!p.status.no_new_privs);
        let not_run = text.replace("runnable 1", "runnable 0");
        assert!(!parse_probe(&not_run).unwrap().runnable);
        assert_eq!(parse_probe("ateam-gate: no command to run\n"), None);
        assert_eq!(parse_probe(""), None);
    }

    #[test]
    fn a_bundle_is_the_containers_own_and_no_other() {
        let id = "92ca4bf11a0e";
        assert!(is_bundle_of(b"--bundle=/run/moby/92ca4bf11a0e", id));
        assert!(is_bundle_of(
            b"--bundle=/run/containers/overlay-containers/92ca4bf11a0e/userdata",
            id
        ));
        assert!(!is_bundle_of(b"--bundle=/run/moby/92ca4bf11a0e0", id));
        assert!(!is_bundle_of(b"--bundle=/run/moby/x92ca4bf11a0e", id));
        assert!(!is_bundle_of(b"--root=/run/moby/92ca4bf11a0e", id));
        assert!(!is_bundle_of(b"--bundle=/run/moby/", ""));
    }
}
