//! Transcript folders' usage as a watcher (`status -w`, `top`, the controller's metrics)
//! reads it: one look after another from the same process. A member owns its folder and can
//! fill it up to the walk's bound (`TRANSCRIPT_WALK`, 100,000 entries): walked at
//! every look, four times a second for `status -w`, that is a third of a core spent on what
//! the watch does not even print. So a folder is walked again only when what it shows may
//! have moved (its own change stamp moved: an entry was added, removed or renamed in it) or
//! when the figure is `REFRESH` old (a file grew: that does not move the folder's stamp),
//! and never sooner than `COST_RATIO` times what its last walk took: whatever the member
//! does, its folder costs a watcher at most about 1/`COST_RATIO` of a core.
//!
//! A one-shot `status` makes a new cache, so it walks every folder, as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::files;
use crate::report::TranscriptUsage;
use crate::transcripts::{AgentFacts, AgentHome};

/// How old a figure may get while the folder's stamp stays put: files growing move sizes
/// and the last activity but not the folder's stamp. `top` shows both; `status -w` neither.
pub const REFRESH: Duration = Duration::from_secs(3);

/// A folder is never walked again sooner than this many times what its last walk took: a
/// member that keeps changing its folder costs a watcher at most ~1/25 of a core (4 %).
pub const COST_RATIO: u32 = 25;

/// What tells that a folder's entries changed: `lstat` of the folder itself (its mtime and
/// ctime move when an entry is added, removed or renamed in it; a new folder is a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    size: i64,
    nlink: u64,
}

impl Stamp {
    fn of(dir: &Path) -> Option<Stamp> {
        let st = rustix::fs::lstat(dir).ok()?;
        Some(Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
            size: st.st_size,
            #[allow(clippy::useless_conversion)]
            nlink: u64::from(st.st_nlink),
        })
    }
}

/// One folder's last walk.
#[derive(Debug, Clone, Copy)]
struct Walked {
    stamp: Option<Stamp>,
    at: Instant,
    took: Duration,
    usage: TranscriptUsage,
}

impl Walked {
    /// Whether the folder is to be walked again at `now`, its stamp being `stamp`.
    fn due(&self, stamp: Option<Stamp>, now: Instant) -> bool {
        let age = now.saturating_duration_since(self.at);
        if age < self.took.saturating_mul(COST_RATIO) {
            return false;
        }
        stamp != self.stamp || age >= REFRESH
    }
}

/// The last walk of each transcript folder a process looked at (shared by its looks), and
/// what each agent member's transcript said at that walk.
#[derive(Debug, Default)]
pub struct TranscriptCache {
    folders: Mutex<HashMap<PathBuf, Walked>>,
    walks: AtomicU64,
    agents: Mutex<HashMap<PathBuf, AgentRead>>,
}

/// An agent's transcript as read: at which usage of its folder, after which exit (a
/// container id), and what it said.
type AgentRead = (TranscriptUsage, Option<String>, AgentFacts);

impl TranscriptCache {
    /// `dir`'s usage now: its last walk's, or a new walk's when due.
    pub fn usage(&self, dir: &Path) -> TranscriptUsage {
        self.usage_at(dir, Instant::now())
    }

    /// `usage`, as of `now` (tests move the clock).
    pub fn usage_at(&self, dir: &Path, now: Instant) -> TranscriptUsage {
        let stamp = Stamp::of(dir);
        let last = self.lock().get(dir).copied();
        if let Some(w) = last.filter(|w| !w.due(stamp, now)) {
            return w.usage;
        }
        let began = Instant::now();
        let (bytes, last_change) = transcript_usage(dir);
        self.walks.fetch_add(1, Ordering::Relaxed);
        let usage = TranscriptUsage { bytes, last_change };
        let walked = Walked {
            stamp,
            at: now,
            took: began.elapsed(),
            usage,
        };
        self.lock().insert(dir.to_path_buf(), walked);
        usage
    }

    /// What agent `a`'s transcript says, its folder's usage being `usage` and its container
    /// `exited` (its id, once a look saw it exited): read again only when either moved (so at
    /// the pace of the walks and within their cost bound, and once more after an exit, when
    /// the agent's last lines are surely written).
    pub fn agent(&self, a: &AgentHome, usage: TranscriptUsage, exited: Option<&str>) -> AgentFacts {
        let agents = || self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((u, e, facts)) = agents().get(&a.transcripts)
            && *u == usage
            && (exited.is_none() || e.as_deref() == exited)
        {
            return facts.clone();
        }
        let facts = crate::transcripts::agent_facts(a);
        let e = exited.map(str::to_string);
        agents().insert(a.transcripts.clone(), (usage, e, facts.clone()));
        facts
    }

    /// How many walks this cache made (for tests and benchmarks).
    pub fn walks(&self) -> u64 {
        self.walks.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Walked>> {
        // A panic elsewhere leaves figures that are still figures.
        self.folders.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How much of a transcript folder `status` looks at: a member owns the folder and can make
/// it as deep or as wide as it likes; what lies past these bounds is not counted.
pub const TRANSCRIPT_WALK: files::Bounds = files::Bounds {
    depth: 32,
    entries: 100_000,
};

/// For `status`: the size of a transcript folder and when it last changed. Symlinks are
/// counted as themselves (never their targets), FIFOs are never opened, the walk is
/// bounded (`TRANSCRIPT_WALK`), and the sum stops at `u64::MAX`.
pub fn transcript_usage(dir: &Path) -> (u64, Option<std::time::SystemTime>) {
    let mut size: u64 = 0;
    let mut newest = None;
    let Ok(d) = files::Dir::open(dir) else {
        return (0, None);
    };
    d.walk(TRANSCRIPT_WALK, |e| {
        // Saturating: sparse files on a file system that allows 8 EiB each (tmpfs, xfs,
        // btrfs) cost the member nothing but add up past 64 bits.
        if e.kind != rustix::fs::FileType::Directory {
            size = size.saturating_add(e.len);
        }
        newest = newest.max(e.modified);
    });
    (size, newest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sparse_transcript_sizes_stop_at_the_top() {
        // tmpfs allows files of 8 EiB; where /dev/shm is missing or smaller, nothing to prove.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        for i in 0..3 {
            let f = std::fs::File::create(dir.path().join(format!("sparse-{i}"))).unwrap();
            if f.set_len(i64::MAX as u64).is_err() {
                return;
            }
        }
        assert_eq!(transcript_usage(dir.path()).0, u64::MAX);
    }

    use super::*;

    /// Looks at an unchanged folder reuse the walk; an entry added is seen at the next look;
    /// a file that grew is seen once the figure is `REFRESH` old.
    #[test]
    fn an_unchanged_folder_is_walked_once_across_looks() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("m");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("log"), "hello").unwrap();
        let cache = TranscriptCache::default();
        let t0 = Instant::now();
        for i in 0..20 {
            let u = cache.usage_at(&dir, t0 + Duration::from_millis(100 * i));
            assert_eq!(u.bytes, 5);
        }
        assert_eq!(cache.walks(), 1, "twenty looks in two seconds, one walk");

        std::fs::write(dir.join("more"), "abc").unwrap();
        let later = t0 + Duration::from_millis(2100);
        assert_eq!(
            cache.usage_at(&dir, later).bytes,
            8,
            "a new entry is seen at once"
        );
        assert_eq!(cache.walks(), 2);

        std::fs::write(dir.join("log"), "hello, world").unwrap();
        let soon = later + Duration::from_millis(500);
        assert_eq!(cache.usage_at(&dir, soon).bytes, 8, "a file grew: not yet");
        let stale = later + REFRESH;
        assert_eq!(cache.usage_at(&dir, stale).bytes, 15, "and at REFRESH");
        assert_eq!(cache.walks(), 3);
    }

    /// An agent's transcript is read again when its folder's usage moved, and once after a
    /// look saw its container exit (read before, it may lack the last lines the agent wrote
    /// as it ended), not at every look after.
    #[test]
    fn an_agents_transcript_is_read_again_once_after_its_exit() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("claude/projects/w");
        std::fs::create_dir_all(&p).unwrap();
        let full: &[u8] =
            include_bytes!("../../tests/fixtures/transcripts/claude-2.1.332-three-tasks.jsonl");
        let cut = 146_505 + 700; // within task 2's first lines
        let cut = cut + full[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
        std::fs::write(p.join("s.jsonl"), &full[..cut]).unwrap();
        let a = AgentHome {
            member: "m".into(),
            kind: crate::core::agents::AgentKind::Claude,
            transcripts: t.path().to_path_buf(),
            home: "claude".into(),
        };
        let cache = TranscriptCache::default();
        let u = TranscriptUsage::default();
        let ended = |f: AgentFacts| f.latest().is_some_and(|t| t.ended);
        assert!(!ended(cache.agent(&a, u, None)));
        std::fs::write(p.join("s.jsonl"), full).unwrap();
        assert!(
            !ended(cache.agent(&a, u, None)),
            "the same usage: the same read"
        );
        assert!(
            ended(cache.agent(&a, u, Some("c1"))),
            "read again after the exit"
        );
        std::fs::write(p.join("s.jsonl"), &full[..cut]).unwrap();
        assert!(ended(cache.agent(&a, u, Some("c1"))), "once");
        assert!(ended(cache.agent(&a, u, None)));
    }

    /// A folder a member keeps changing is walked no sooner than `COST_RATIO` times what
    /// its last walk took: here a walk that took 40 ms, so not again within a second.
    #[test]
    fn a_folder_that_keeps_changing_costs_a_bounded_share() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("m");
        std::fs::create_dir(&dir).unwrap();
        let cache = TranscriptCache::default();
        let t0 = Instant::now();
        cache.usage_at(&dir, t0);
        cache.lock().get_mut(&dir).unwrap().took = Duration::from_millis(40);
        for i in 0..99 {
            // The member changes its folder before every look, 100 looks a second.
            std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
            cache.usage_at(&dir, t0 + Duration::from_millis(10 * i));
        }
        assert_eq!(cache.walks(), 1, "no walk within 25 x 40 ms");
        std::fs::File::create(dir.join("last")).unwrap();
        cache.usage_at(&dir, t0 + Duration::from_millis(1000));
        assert_eq!(cache.walks(), 2, "and one after");
    }
}
