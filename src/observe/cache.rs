//! Inspects of running containers, kept between looks in the team's run folder, so that a
//! no-op apply, a status or the controller's look after an event does not ask the engine
//! again about every member (on Podman an inspect costs 3 to 5 ms: fifty of them were most of
//! a status).
//!
//! An entry is used only while the container's first process is the very one that was
//! inspected: same pid, same boot, same start time (the gate's start token). A restart, a
//! stop, a kill, a pause, a replacement under the same name all change that or the listed
//! state, and mean a new inspect. What could still change in place is `update`: the limits,
//! read from the cgroup at every look anyway, and on Docker the restart policy, which only an
//! inspect shows. So an entry holds (`Guard`) where the engine can change nothing else in
//! place (`EngineInfo::inspect_holds_while_running`: Podman before 5), or where the engine's
//! replayable events say no `update` of that container happened since the entry's anchor:
//! the newest event the engine held before the entry's inspect. Docker holds its last 256
//! events in memory: when the anchor is no longer among them (more than 256 events since, or
//! the daemon restarted), no entry holds. (Docker refuses to connect a container of network
//! `none`, the members', to any network, so `update` is the only change in place.)
//!
//! It is a cache: unreadable, of another version or lost, it is simply empty.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::backend::{EventMark, Inspected, Summary};
use crate::core::container::ContainerState;
use crate::core::layout;
use crate::runtime::procfs;

const VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// `Start::token`.
    token: String,
    /// `Start::cgroup` (absent from files written before it was kept).
    #[serde(default)]
    cgroup: Option<String>,
    inspected: Inspected,
}

/// What was read of a container's running first process, which holds while that very
/// process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// `procfs::start_token`.
    pub token: String,
    /// `cgroup::membership`, if it could be read.
    pub cgroup: Option<String>,
}

impl Start {
    /// What is read of the running start of `pid` now; none when it is gone.
    pub fn read(pid: u32) -> Option<Start> {
        let token = procfs::start_token(pid).ok()?;
        let cgroup = crate::runtime::cgroup::membership(pid);
        Some(Start { token, cgroup })
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    /// The newest event the engine held before these inspects (see `Guard::Events`).
    #[serde(default)]
    anchor: Option<EventMark>,
    entries: BTreeMap<String, Entry>,
}

/// What says that a kept inspect still holds.
#[derive(Debug)]
pub enum Guard {
    /// The engine can change nothing in place that the look reads from an inspect.
    Holds,
    /// The events the engine still holds from the oldest anchor on, oldest first.
    Events(Vec<EventMark>),
}

/// One team's kept inspects, and the ones this look made.
#[derive(Debug, Default)]
pub struct Cache {
    path: PathBuf,
    old: BTreeMap<String, Entry>,
    new: BTreeMap<String, Entry>,
    /// The anchor read, and the one this look's inspects are newer than.
    anchor: (Option<EventMark>, Option<EventMark>),
}

impl Cache {
    /// The inspects kept in the team's folder `run_dir` (none if the file is missing, unreadable
    /// or of another version).
    pub fn load(run_dir: &Path) -> Cache {
        let path = layout::inspect_cache_path(run_dir);
        let file = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<File>(&b).ok())
            .filter(|f| f.version == VERSION)
            .unwrap_or_default();
        Cache {
            path,
            old: file.entries,
            new: BTreeMap::new(),
            anchor: (file.anchor, None),
        }
    }

    /// The cgroups kept with each entry's start (`Start::cgroup`).
    pub fn memberships(&self) -> impl Iterator<Item = &str> {
        self.old.values().filter_map(|e| e.cgroup.as_deref())
    }

    /// Each kept entry's container id, the pid of its first process and that process's
    /// cgroups (`Start::cgroup`), where they were kept.
    pub fn kept_starts(&self) -> impl Iterator<Item = (&str, u32, &str)> {
        self.old
            .iter()
            .filter_map(|(id, e)| Some((id.as_str(), e.inspected.pid?, e.cgroup.as_deref()?)))
    }

    /// Whether it keeps no inspect at all: nothing for a guard to vouch for.
    pub fn is_empty(&self) -> bool {
        self.old.is_empty()
    }

    /// When the kept entries' anchor happened (nanoseconds since the epoch), if they have one.
    pub fn anchor_time(&self) -> Option<i64> {
        self.anchor.0.as_ref().map(|a| a.time_nano)
    }

    /// Forgets the entries `guard` does not vouch for: with events, all of them when the
    /// anchor is no longer among them, else those a container `update` followed. The newest
    /// event becomes the anchor of this look's inspects.
    pub fn check(&mut self, guard: &Guard) {
        let Guard::Events(events) = guard else {
            return;
        };
        let since = self
            .anchor
            .0
            .as_ref()
            .and_then(|a| events.iter().position(|e| e == a));
        match since {
            Some(i) => {
                for e in &events[i + 1..] {
                    if e.kind == "container" && e.action == "update" {
                        self.old.remove(&e.id);
                    }
                }
            }
            None => self.old.clear(),
        }
        self.anchor.1 = events.last().cloned();
    }

    /// The kept inspect of `s`, if its first process is still the one inspected; with that
    /// process's start token.
    pub fn get(&self, s: &Summary) -> Option<(Inspected, Start)> {
        let e = self.old.get(&s.id)?;
        let pid = e.inspected.pid?;
        let same = s.state == ContainerState::Running
            && e.inspected.summary.state == ContainerState::Running
            && procfs::start_token(pid).ok()? == e.token;
        same.then(|| {
            let i = Inspected {
                // What the list says now: a rename shows there, not in the kept inspect.
                summary: s.clone(),
                ..e.inspected.clone()
            };
            let start = Start {
                token: e.token.clone(),
                // An entry written before cgroups were kept: read them now.
                cgroup: e
                    .cgroup
                    .clone()
                    .or_else(|| crate::runtime::cgroup::membership(pid)),
            };
            (i, start)
        })
    }

    /// Keeps `i` (as the engine said it, before any overlay) for the next look, with what was
    /// read of its running first process (`Start::read`, since `i`). Not its labels: `get`
    /// takes the list's, and they were most of the file (the spec, in `ateam.dev/spec`): at
    /// 200 members 770 KB read and parsed at every look.
    pub fn keep(&mut self, i: &Inspected, start: Option<&Start>) {
        let running = i.pid.is_some() && i.summary.state == ContainerState::Running;
        if let (true, Some(start)) = (running, start) {
            let mut inspected = i.clone();
            inspected.summary.labels.clear();
            let entry = Entry {
                token: start.token.clone(),
                cgroup: start.cgroup.clone(),
                inspected,
            };
            self.new.insert(i.summary.id.clone(), entry);
        }
    }

    /// Writes what this look kept, when it differs from what was read. Best effort: a cache
    /// that cannot be written is only slower next time.
    pub fn save(self) {
        let same = self.old.len() == self.new.len()
            && self
                .old
                .iter()
                .zip(&self.new)
                .all(|((a, x), (b, y))| a == b && x.token == y.token && x.cgroup == y.cgroup)
            && (self.anchor.1.is_none() || self.anchor.0 == self.anchor.1);
        if same || !self.path.parent().is_some_and(Path::is_dir) {
            return;
        }
        let file = File {
            version: VERSION,
            anchor: self.anchor.1,
            entries: self.new,
        };
        if let Ok(bytes) = serde_json::to_vec(&file) {
            let _ = replace(&self.path, &bytes);
        }
    }
}

/// Writes `bytes` to a new file and renames it over `path`: readers see the old or the new
/// whole. No fsync: losing it in a crash costs one slower look. Owned like its folder, so a
/// root run for a person leaves a file that person's runs can read.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(format!(
        ".inspected.{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        let d = std::fs::metadata(dir)?;
        if rustix::process::geteuid().is_root() && d.uid() != 0 {
            std::os::unix::fs::fchown(&f, Some(d.uid()), Some(d.gid()))?;
        }
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Summary;

    fn keep(c: &mut Cache, i: &Inspected) {
        let start = i.pid.and_then(Start::read);
        c.keep(i, start.as_ref());
    }

    fn inspected(id: &str, pid: u32, state: ContainerState) -> Inspected {
        Inspected {
            summary: Summary {
                id: id.into(),
                name: "ateam_t_a".into(),
                labels: BTreeMap::new(),
                state,
                created: 0,
            },
            effective: Default::default(),
            pid: Some(pid),
            pid_files: None,
            image: "img".into(),
            image_id: String::new(),
            restart_count: 0,
            started_at: None,
            last_exit: None,
        }
    }

    #[test]
    fn kept_while_the_same_process_runs_and_not_after() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let mut c = Cache::load(dir.path());
        let mut i = inspected("c1", me, ContainerState::Running);
        i.summary
            .labels
            .insert("ateam.dev/spec".into(), "{\"spec\":1}".into());
        assert!(c.get(&i.summary).is_none(), "nothing kept yet");
        keep(&mut c, &i);
        c.save();
        let file = std::fs::read_to_string(layout::inspect_cache_path(dir.path())).unwrap();
        assert!(
            !file.contains("ateam.dev/spec"),
            "labels are not kept: {file}"
        );

        let c = Cache::load(dir.path());
        let mut now = i.summary.clone();
        now.name = "renamed".into();
        let (got, start) = c.get(&now).expect("same process: kept");
        assert_eq!(got.summary.name, "renamed", "the list's word on the name");
        assert_eq!(got.summary.labels, now.labels, "the list's labels");
        // Its cgroups kept with it: what the kernel says of this process.
        let mine = crate::runtime::cgroup::membership(me);
        assert!(mine.is_some());
        assert_eq!(start.cgroup, mine);
        assert_eq!(start.token, procfs::start_token(me).unwrap());
        // Stopped, paused or another container of that id: asked again.
        now.state = ContainerState::Exited { code: 137 };
        assert!(c.get(&now).is_none());
        now.state = ContainerState::Paused;
        assert!(c.get(&now).is_none());
        let other = Summary {
            id: "c2".into(),
            ..i.summary.clone()
        };
        assert!(c.get(&other).is_none());
    }

    #[test]
    fn a_process_that_is_gone_is_not_the_same_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let i = inspected("c1", child.id(), ContainerState::Running);
        let mut c = Cache::load(dir.path());
        keep(&mut c, &i);
        c.save();
        assert!(Cache::load(dir.path()).get(&i.summary).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(Cache::load(dir.path()).get(&i.summary).is_none());
    }

    fn mark(t: i64, kind: &str, action: &str, id: &str) -> EventMark {
        EventMark {
            time_nano: t,
            kind: kind.into(),
            action: action.into(),
            id: id.into(),
        }
    }

    /// Kept `c1` and `c2` (this process, so their start tokens hold) under anchor `a`.
    fn kept_under(dir: &Path, a: &EventMark) -> Cache {
        let me = std::process::id();
        let mut c = Cache::load(dir);
        c.check(&Guard::Events(vec![a.clone()]));
        keep(&mut c, &inspected("c1", me, ContainerState::Running));
        keep(&mut c, &inspected("c2", me, ContainerState::Running));
        c.save();
        Cache::load(dir)
    }

    #[test]
    fn events_after_the_anchor_vouch_for_all_but_what_was_updated() {
        let dir = tempfile::tempdir().unwrap();
        let a = mark(10, "network", "destroy", "n1");
        let s1 = inspected("c1", 1, ContainerState::Running).summary;
        let s2 = inspected("c2", 1, ContainerState::Running).summary;

        let mut c = kept_under(dir.path(), &a);
        assert_eq!(c.anchor_time(), Some(10));
        c.check(&Guard::Events(vec![
            a.clone(),
            mark(11, "container", "start", "c3"),
            mark(12, "container", "update", "c2"),
        ]));
        assert!(c.get(&s1).is_some(), "nothing changed c1 in place");
        assert!(c.get(&s2).is_none(), "c2 was updated after its inspect");
        assert_eq!(c.anchor.1.as_ref().map(|m| m.time_nano), Some(12));

        // The anchor is no longer held (the buffer moved on, or the engine restarted).
        let mut c = kept_under(dir.path(), &a);
        c.check(&Guard::Events(vec![mark(13, "container", "start", "c3")]));
        assert!(c.get(&s1).is_none() && c.get(&s2).is_none());

        // Where the engine changes nothing in place, entries hold without events.
        let mut c = kept_under(dir.path(), &a);
        c.check(&Guard::Holds);
        assert!(c.get(&s1).is_some() && c.get(&s2).is_some());
    }

    #[test]
    fn an_entry_kept_without_its_cgroups_reads_them_at_its_use() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let mut c = Cache::load(dir.path());
        let i = inspected("c1", me, ContainerState::Running);
        keep(&mut c, &i);
        c.save();
        // As a file written before cgroups were kept has it.
        let path = layout::inspect_cache_path(dir.path());
        let mut file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let entry = &mut file["entries"]["c1"];
        assert!(entry["cgroup"].is_string());
        entry.as_object_mut().unwrap().remove("cgroup");
        std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
        let (_, start) = Cache::load(dir.path()).get(&i.summary).expect("kept");
        assert_eq!(start.cgroup, crate::runtime::cgroup::membership(me));
    }

    #[test]
    fn a_damaged_or_foreign_file_is_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = layout::inspect_cache_path(dir.path());
        for text in ["not json", r#"{"version": 99, "entries": {}}"#] {
            std::fs::write(&path, text).unwrap();
            let c = Cache::load(dir.path());
            assert!(c.old.is_empty(), "{text}");
        }
    }
}
