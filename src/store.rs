//! ateam's state folder: the last applied model of each team, and the lock that keeps two
//! applies from interleaving. Folders are 0700, files 0600, writes atomic.
//! Where each file lives: `core::layout`. `controller`: the running controller's record
//! and lock, which status reads.

pub mod controller;
pub mod suspended;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::core::container::{Engine, LastExit};
use crate::core::layout;
use crate::model::Team;

/// Where a team was applied: the engine (written `"docker"` or `"podman"`, as since the
/// first records) and its address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineRecord {
    /// Which engine: a later apply of the team asks the same one.
    pub engine: Engine,
    /// Its address (`unix:///path`, `tcp://host:port`).
    pub uri: String,
}
use crate::files::{self, Owner};

/// Why the state folder could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file of the store's could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `--no-wait` and someone holds the lock.
    #[error(
        "another ateam command is changing this store ({holder}); try again, or drop --no-wait to wait for it"
    )]
    Busy {
        /// Who holds it, as its file says.
        holder: String,
    },
    /// A team's model in the store is not one ateam wrote.
    #[error("{}: not a model ateam wrote ({source}); remove it to forget the team", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// Written by a later ateam, in a format this one does not know.
    #[error(
        "{}: written by a newer ateam (record version {version}, this one reads up to {}); upgrade ateam", .path.display(), RECORD_VERSION
    )]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its record version.
        version: u64,
    },
    /// A team's engine record names no engine this ateam knows (or is broken): its engine is
    /// not guessed.
    #[error("{}: not an engine record ateam wrote ({source}); remove it, or pass --backend", .path.display())]
    EngineRecord {
        /// The file.
        path: PathBuf,
        /// What did not parse.
        #[source]
        source: serde_json::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The version of the records this ateam writes (`applied.json`, `engine.json`): a field
/// `version` beside the record's own. Records of 0.1.0 have none and read as version 0; a
/// record of a later version is refused rather than misread. Bump it, and convert here, when
/// a change to a record would not read back with serde defaults.
pub(crate) const RECORD_VERSION: u64 = 1;

fn versioned<T: serde::Serialize>(record: &T, pretty: bool) -> Vec<u8> {
    let mut v = serde_json::to_value(record).expect("a record serializes");
    if let serde_json::Value::Object(map) = &mut v {
        map.insert("version".into(), RECORD_VERSION.into());
    }
    if pretty {
        serde_json::to_vec_pretty(&v)
    } else {
        serde_json::to_vec(&v)
    }
    .expect("a value serializes")
}

fn read_versioned<T: serde::de::DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
) -> Result<T, StoreError> {
    let corrupt = |source| StoreError::Corrupt {
        path: path.to_path_buf(),
        source,
    };
    let mut v: serde_json::Value = serde_json::from_slice(bytes).map_err(corrupt)?;
    let version = match &mut v {
        serde_json::Value::Object(map) => {
            map.remove("version").and_then(|n| n.as_u64()).unwrap_or(0)
        }
        serde_json::Value::Null
        | serde_json::Value::Bool(_)
        | serde_json::Value::Number(_)
        | serde_json::Value::String(_)
        | serde_json::Value::Array(_) => 0,
    };
    if version > RECORD_VERSION {
        return Err(StoreError::Newer {
            path: path.to_path_buf(),
            version,
        });
    }
    serde_json::from_value(v).map_err(corrupt)
}

/// ateam's state folder: the teams as applied, where they were applied, and the lock that
/// one apply or delete at a time holds.
pub struct Store {
    /// The state folder.
    pub dir: PathBuf,
    owner: Owner,
}

/// Held while an apply or delete runs; released on drop (and by the kernel if ateam dies).
#[must_use = "the lock is released when this is dropped"]
pub struct Lock {
    file: File,
}

impl Lock {
    /// Writes who holds it, for the next one that waits.
    pub(crate) fn announce(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        writeln!(self.file, "pid {}", std::process::id())
    }
}

/// Who holds the lock at `path`, as its file says. The file names the last process that
/// announced itself: one that took the lock and has not announced yet (an apply judging its
/// manifests) leaves a dead process's pid there, which is said as such rather than shown as
/// the one to wait for. (A dead process's `flock` itself is gone with it.)
fn holder(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    // The file is ours, but bounded and shown as data all the same.
    let text: String = String::from_utf8_lossy(&text[..text.len().min(64)])
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let pid = text
        .strip_prefix("pid ")
        .and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(pid) if Path::new(&format!("/proc/{pid}")).exists() => format!("pid {pid}"),
        Some(pid) => {
            format!("another process; the lock file names pid {pid}, which is no longer running")
        }
        None => "another process".to_string(),
    }
}

impl Store {
    /// The store in `dir`, its files belonging to `owner`.
    pub fn new(dir: PathBuf, owner: Owner) -> Store {
        Store { dir, owner }
    }

    /// Takes the store's lock. When it is held, waits (calling `waiting` once with who holds
    /// it) unless `no_wait`.
    pub fn lock(&self, no_wait: bool, waiting: impl FnOnce(&str)) -> Result<Lock, StoreError> {
        files::private_dir(&self.dir, self.owner).map_err(io(&self.dir))?;
        let path = layout::lock_path(&self.dir);
        let file = files::open_lock(&path).map_err(io(&path))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let holder = holder(&path);
            if no_wait {
                return Err(StoreError::Busy { holder });
            }
            waiting(&holder);
            flock(&file, FlockOperation::LockExclusive).map_err(|e| StoreError::Io {
                path: path.clone(),
                source: e.into(),
            })?;
        }
        let mut lock = Lock { file };
        lock.announce().map_err(io(&path))?;
        Ok(lock)
    }

    /// The lock, if its file exists and nobody holds it: taken without creating, waiting or
    /// writing anything, so that manifests judged under it and refused leave the store as it
    /// was.
    pub(crate) fn try_lock_existing(&self) -> Option<Lock> {
        let path = layout::lock_path(&self.dir);
        let file = OpenOptions::new().read(true).write(true).open(path).ok()?;
        flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
        Some(Lock { file })
    }

    fn team_file(&self, team: &str) -> PathBuf {
        layout::applied_path(&self.dir, team)
    }

    /// Records what was applied for a team (after its apply converged or partly did: the
    /// record is what the user asked for, which status compares against).
    pub(crate) fn save_team(&self, team: &Team) -> Result<(), StoreError> {
        let path = self.team_file(&team.name);
        let dir = path.parent().unwrap_or(&self.dir).to_path_buf();
        files::private_dir(&dir, self.owner).map_err(io(&dir))?;
        // Applied again: no longer a deleted team.
        for deleted in [
            layout::deleted_path(&self.dir, &team.name),
            layout::deleted_mark_path(&self.dir, &team.name),
        ] {
            files::remove_if_present(&deleted).map_err(io(&deleted))?;
        }
        let json = versioned(team, true);
        if std::fs::read(&path).map(|old| old == json).unwrap_or(false) {
            return Ok(());
        }
        files::write_atomic(&path, &json, 0o600, self.owner).map_err(io(&path))
    }

    /// Remembers which engine a team was applied on, so that status, logs and delete find
    /// it again without the environment that apply ran in.
    pub(crate) fn save_engine(&self, team: &str, engine: &EngineRecord) -> Result<(), StoreError> {
        let path = layout::engine_path(&self.dir, team);
        let dir = layout::team_run_dir(&self.dir, team);
        files::private_dir(&dir, self.owner).map_err(io(&dir))?;
        let json = versioned(engine, false);
        if std::fs::read(&path).map(|old| old == json).unwrap_or(false) {
            return Ok(());
        }
        files::write_atomic(&path, &json, 0o600, self.owner).map_err(io(&path))
    }

    /// The engine `team` was applied on; none when no record was written. A record that
    /// cannot be read, or names an unknown engine, is an error rather than a guess.
    pub fn engine(&self, team: &str) -> Result<Option<EngineRecord>, StoreError> {
        let path = layout::engine_path(&self.dir, team);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        match read_versioned(&path, &bytes) {
            Ok(r) => Ok(Some(r)),
            Err(StoreError::Corrupt { path, source }) => {
                Err(StoreError::EngineRecord { path, source })
            }
            Err(e) => Err(e),
        }
    }

    /// Remembers a team deleted without `--purge` (its containers gone, its transcripts
    /// kept), so that a later `delete --team NAME --purge` knows where they are.
    pub(crate) fn save_deleted(&self, team: &Team) -> Result<(), StoreError> {
        let path = layout::deleted_path(&self.dir, &team.name);
        let dir = layout::team_run_dir(&self.dir, &team.name);
        files::private_dir(&dir, self.owner).map_err(io(&dir))?;
        files::write_atomic(&path, &versioned(team, true), 0o600, self.owner).map_err(io(&path))
    }

    /// Marks `team` deleted by the person, now (`layout::deleted_mark_path`).
    pub(crate) fn mark_deleted(&self, team: &str) -> Result<(), StoreError> {
        let path = layout::deleted_mark_path(&self.dir, team);
        let dir = layout::team_run_dir(&self.dir, team);
        files::private_dir(&dir, self.owner).map_err(io(&dir))?;
        let now = crate::core::container::rfc3339(std::time::SystemTime::now());
        files::write_atomic(&path, format!("{now}\n").as_bytes(), 0o600, self.owner)
            .map_err(io(&path))
    }

    /// When the person deleted `team`, if it was not applied since.
    pub(crate) fn deleted_at(&self, team: &str) -> Option<std::time::SystemTime> {
        std::fs::symlink_metadata(layout::deleted_mark_path(&self.dir, team))
            .and_then(|m| m.modified())
            .ok()
    }

    /// Forgets the mark of `mark_deleted` (a controller's own prune is no person's word).
    pub(crate) fn unmark_deleted(&self, team: &str) -> Result<(), StoreError> {
        let path = layout::deleted_mark_path(&self.dir, team);
        files::remove_if_present(&path).map_err(io(&path))
    }

    /// The team as a delete without `--purge` left it, if it was.
    pub fn deleted(&self, name: &str) -> Result<Option<Team>, StoreError> {
        let path = layout::deleted_path(&self.dir, name);
        match std::fs::read(&path) {
            Ok(bytes) => read_versioned(&path, &bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// Forgets that `team` was applied: its model and its engine record.
    pub(crate) fn forget_team(&self, team: &str) -> Result<(), StoreError> {
        files::remove_if_present(&layout::engine_path(&self.dir, team)).map_err(io(&self.dir))?;
        files::remove_if_present(&self.team_file(team)).map_err(io(&self.team_file(team)))
    }

    /// Every applied team, sorted by name.
    pub fn teams(&self) -> Result<Vec<Team>, StoreError> {
        let mut teams = Vec::new();
        for n in self.team_names()? {
            if let Some(t) = self.team(&n)? {
                teams.push(t);
            }
        }
        Ok(teams)
    }

    /// The names of the teams' folders, sorted, none of their files read: a folder may be
    /// a deleted team's (`teams` reads which are applied).
    pub(crate) fn team_names(&self) -> Result<Vec<String>, StoreError> {
        let root = layout::teams_dir(&self.dir);
        let mut names: Vec<String> = match std::fs::read_dir(&root) {
            Ok(rd) => rd
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => {
                return Err(StoreError::Io {
                    path: root,
                    source: e,
                });
            }
        };
        names.sort();
        Ok(names)
    }

    /// Refuses to go on when a member record of `team` was written by a later ateam
    /// (`Record::check_version`), before anything is changed; `only`: that member's alone (a
    /// look at one member changes nothing of the others).
    pub(crate) fn check_member_records(
        &self,
        team: &str,
        only: Option<&str>,
    ) -> Result<(), StoreError> {
        let run = layout::team_run_dir(&self.dir, team);
        if let Some(member) = only {
            return Record::check_version(&layout::member_record_path(&run, member));
        }
        let Ok(entries) = std::fs::read_dir(layout::members_dir(&run)) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let member = e.file_name();
            Record::check_version(&layout::member_record_path(&run, &member.to_string_lossy()))?;
        }
        Ok(())
    }

    /// The team `name` as last applied, if it was.
    pub fn team(&self, name: &str) -> Result<Option<Team>, StoreError> {
        let path = self.team_file(name);
        match std::fs::read(&path) {
            Ok(bytes) => read_versioned(&path, &bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }
}

/// The containers ateam made for one member, by id. An id is written after create and before
/// start, so a container that is not here was not made by ateam (whatever its labels say) and
/// is never adopted, released or started.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The format's version, so that a later ateam can read (or refuse) an older record.
    pub version: u32,
    /// The ids of the containers.
    pub ids: std::collections::BTreeSet<String>,
    /// How the member last ended, as ateam saw it: a start that failed, or the exit of a
    /// container it restarted (the engine forgets that at the restart). Absent from records
    /// written before it existed, which read the same.
    #[serde(default, rename = "lastExit", skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<LastExit>,
}

impl Record {
    /// The format this ateam writes and reads.
    pub(crate) const VERSION: u32 = 1;

    /// The record at `path`; empty when there is none or it cannot be read (then nothing is
    /// trusted, the safe side).
    pub fn load(path: &Path) -> Record {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .filter(|r| r.version == Record::VERSION)
            .unwrap_or_default()
    }

    /// Refuses a record written by a later ateam: `load` would read it as empty (nothing
    /// trusted), and the apply that follows would replace that member's container and
    /// overwrite the newer record with this version. Absent or unreadable records pass.
    pub fn check_version(path: &Path) -> Result<(), StoreError> {
        #[derive(serde::Deserialize)]
        struct Version {
            #[serde(default)]
            version: u64,
        }
        let Ok(bytes) = std::fs::read(path) else {
            return Ok(());
        };
        match serde_json::from_slice::<Version>(&bytes) {
            Ok(v) if v.version > u64::from(Record::VERSION) => Err(StoreError::Newer {
                path: path.to_path_buf(),
                version: v.version,
            }),
            _ => Ok(()),
        }
    }

    /// Adds (`true`) or drops (`false`) an id, atomically.
    pub fn update(path: &Path, id: &str, add: bool, owner: Owner) -> std::io::Result<()> {
        let mut r = Record::load(path);
        let changed = if add {
            r.ids.insert(id.to_string())
        } else {
            r.ids.remove(id)
        };
        if !changed {
            return Ok(());
        }
        r.save(path, owner)
    }

    /// Keeps how the member last ended, atomically (the ids stay as they are).
    pub(crate) fn set_last_exit(path: &Path, last: LastExit, owner: Owner) -> std::io::Result<()> {
        let mut r = Record::load(path);
        r.last_exit = Some(last);
        r.save(path, owner)
    }

    fn save(mut self, path: &Path, owner: Owner) -> std::io::Result<()> {
        self.version = Record::VERSION;
        if let Some(dir) = path.parent() {
            files::private_dir(dir, owner)?;
        }
        let json = serde_json::to_vec(&self).expect("a record serializes");
        files::write_atomic(path, &json, 0o600, owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        }
    }

    #[test]
    fn a_second_lock_waits_or_fails_fast() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path().join("state"), me());
        let held = store.lock(false, |_| panic!("free at first")).unwrap();
        let other = Store::new(t.path().join("state"), me());
        match other.lock(true, |_| {}) {
            Err(StoreError::Busy { holder }) => {
                assert_eq!(holder, format!("pid {}", std::process::id()))
            }
            other => panic!("{:?}", other.err()),
        }
        drop(held);
        let _again = other.lock(true, |_| {}).unwrap();
    }

    /// A lock file that names a process gone: free when nobody holds its `flock` (the kernel
    /// let the dead one's go), and never shown as that pid to wait for when someone does.
    #[test]
    fn a_lock_file_naming_a_dead_process() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path().join("state"), me());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let path = layout::lock_path(&store.dir);
        files::private_dir(&store.dir, me()).unwrap();
        std::fs::write(&path, format!("pid {dead}\n")).unwrap();
        // Held (as an apply holds it before it announces itself), the file naming the dead.
        let file = files::open_lock(&path).unwrap();
        flock(&file, FlockOperation::NonBlockingLockExclusive).unwrap();
        match store.lock(true, |_| {}) {
            Err(StoreError::Busy { holder }) => {
                assert!(holder.contains("no longer running"), "{holder}");
                assert!(holder.contains(&dead.to_string()), "{holder}");
            }
            other => panic!("{:?}", other.err()),
        }
        drop(file);
        let mut said = None;
        let _lock = store
            .lock(false, |who| said = Some(who.to_string()))
            .unwrap();
        assert_eq!(said, None, "a dead holder is not waited for");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("pid {}\n", std::process::id()));
    }

    #[test]
    fn a_record_keeps_ids_and_refuses_what_it_cannot_read() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("m/containers.json");
        assert!(Record::load(&path).ids.is_empty());
        Record::update(&path, "abc", true, me()).unwrap();
        Record::update(&path, "def", true, me()).unwrap();
        Record::update(&path, "abc", false, me()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"version":1,"ids":["def"]}"#
        );
        // How a member last ended is kept beside the ids, and the ids beside it.
        let oom = LastExit::exited(137, true, Some("2024-05-01T12:00:00Z".into()), None);
        Record::set_last_exit(&path, oom.clone(), me()).unwrap();
        Record::update(&path, "ghi", true, me()).unwrap();
        let r = Record::load(&path);
        assert_eq!(r.last_exit, Some(oom));
        assert_eq!(r.ids.len(), 2);
        // A record written before `lastExit` existed reads the same, with none.
        std::fs::write(&path, r#"{"version":1,"ids":["def"]}"#).unwrap();
        assert_eq!(Record::load(&path).ids.len(), 1);
        assert_eq!(Record::load(&path).last_exit, None);
        std::fs::write(&path, r#"{"version":99,"ids":["def"]}"#).unwrap();
        assert!(Record::load(&path).ids.is_empty(), "an unknown version");
        match Record::check_version(&path) {
            Err(StoreError::Newer { version: 99, .. }) => {}
            other => panic!("a newer record passed: {other:?}"),
        }
        std::fs::write(&path, "garbage").unwrap();
        assert!(Record::load(&path).ids.is_empty());
        Record::check_version(&path).unwrap();
    }

    /// A store written by ateam 0.1.0 (unversioned records, no `user` fields), checked in.
    #[test]
    fn a_store_written_by_0_1_0_still_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v0.1.0");
        let store = Store::new(dir, me());
        let teams = store.teams().unwrap();
        assert_eq!(teams.len(), 1);
        assert_eq!(teams[0].name, "demo");
        assert_eq!(teams[0].members.len(), 3);
        assert_eq!(teams[0].user, None);
        assert_eq!(
            store.engine("demo").unwrap().unwrap().engine,
            Engine::Docker
        );
    }

    #[test]
    fn records_carry_their_version_and_a_newer_one_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path().join("state"), me());
        store
            .save_engine(
                "x",
                &EngineRecord {
                    engine: Engine::Podman,
                    uri: "unix:///s".into(),
                },
            )
            .unwrap();
        let path = layout::engine_path(&store.dir, "x");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""version":1"#), "{text}");
        assert!(text.contains(r#""engine":"podman""#), "{text}");
        assert_eq!(store.engine("x").unwrap().unwrap().engine, Engine::Podman);
        let applied = layout::applied_path(&store.dir, "x");
        std::fs::write(&applied, r#"{"version": 99, "name": "x"}"#).unwrap();
        match store.team("x") {
            Err(StoreError::Newer { version: 99, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    /// An engine record ateam does not know is an error, never taken for Docker; no record
    /// at all is none.
    #[test]
    fn an_unknown_engine_record_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path().join("state"), me());
        assert!(store.engine("x").unwrap().is_none());
        let path = layout::engine_path(&store.dir, "x");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, r#"{"version":1,"engine":"lxc","uri":"unix:///s"}"#).unwrap();
        match store.engine("x") {
            Err(e @ StoreError::EngineRecord { .. }) => {
                assert!(e.to_string().contains("unknown variant `lxc`"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        std::fs::write(
            &path,
            r#"{"version":1,"engine":"docker","uri":"unix:///s"}"#,
        )
        .unwrap();
        assert_eq!(store.engine("x").unwrap().unwrap().engine, Engine::Docker);
    }

    #[test]
    fn teams_round_trip() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path().join("state"), me());
        assert!(store.teams().unwrap().is_empty());
        let team = Team::named("demo", "/x");
        store.save_team(&team).unwrap();
        assert_eq!(store.teams().unwrap(), vec![team]);
        store.forget_team("demo").unwrap();
        assert!(store.teams().unwrap().is_empty());
    }
}
