//! The part of a test's `World` every engine test crate shares: which engine, a temporary
//! folder for the team's files and ateam's state (`<root>/state`), the team's name, running
//! `ateam` there as the engine's user, and ending the team when the World is dropped. Each
//! crate wraps it in its own `World` with what is its own (its manifests, its checks).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use super::{Engine, ateam_command, remove_team, rootless_user, text};

pub struct World {
    pub engine: Engine,
    pub team: String,
    root: PathBuf,
    /// Whether the team's `delete` on drop has `--purge`.
    purge: bool,
    /// Whether the team was ended.
    removed: bool,
    // Last: the folder goes once the team is gone.
    _dir: tempfile::TempDir,
}

impl World {
    /// A temporary folder `ateam-<what>-…` and a team named `<tag><e><pid>` (`e` the engine's
    /// initial: the cases of the three engines run at once, apart).
    pub fn new(engine: Engine, what: &str, tag: &str) -> World {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ateam-{what}-"))
            .tempdir()
            .unwrap();
        let team = format!(
            "{tag}{}{}",
            &format!("{engine:?}").to_lowercase()[..1],
            std::process::id() % 100000
        );
        World {
            engine,
            purge: true,
            removed: false,
            team,
            root: dir.path().canonicalize().unwrap(),
            _dir: dir,
        }
    }

    /// The temporary folder (canonical).
    pub fn root(&self) -> PathBuf {
        self.root.clone()
    }

    /// `rel` below the temporary folder.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// ateam's state folder: `<root>/state`.
    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    /// Makes the folders `rels` (in order, each below the temporary folder).
    pub fn dirs(&self, rels: &[&str]) {
        for d in rels {
            std::fs::create_dir(self.path(d)).unwrap();
        }
    }

    /// The person's (uid, gid) on rootless Podman, where ateam runs as the unprivileged user
    /// whose files the test's must be; `None` where ateam runs as root.
    pub fn rootless_person(&self) -> Option<(u32, u32)> {
        (self.engine == Engine::Rootless).then(|| {
            let (_, uid, gid) = rootless_user();
            (uid, gid)
        })
    }

    /// On rootless Podman, gives `rels` (below the temporary folder; `""` is the folder
    /// itself) to the unprivileged user, as that user would have made them; elsewhere nothing.
    pub fn give(&self, rels: &[&str]) {
        if let Some((uid, gid)) = self.rootless_person() {
            for d in rels {
                std::os::unix::fs::chown(self.path(d), Some(uid), Some(gid)).unwrap();
            }
        }
    }

    /// Writes `text` as `rel` below the temporary folder, the person's (`give`); its path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::write(&p, text).unwrap();
        self.give(&[rel]);
        p
    }

    /// `ateam --backend …` as the engine's user, state in `<root>/state`, in the temporary
    /// folder; the caller adds the arguments.
    pub fn command(&self) -> Command {
        let mut c = ateam_command(self.engine, &self.state());
        c.current_dir(&self.root);
        c
    }

    /// `ateam args`, with nothing on its standard input.
    pub fn ateam(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `ateam args`, which must succeed: its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.ateam(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{:?}: {args:?} failed:\n{}\n{}",
            self.engine,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// The world, its team ended by `delete --team <team>` without `--purge`.
    pub fn without_purge(mut self) -> World {
        self.purge = false;
        self
    }

    /// Ends the team now (as on drop, which then does nothing): `delete --team <team>
    /// --purge`, then whatever container of the team is left on the engine, then on rootless
    /// Podman the files the engine's user made below the folder (`remove_team`). For a crate
    /// whose own teardown must come after it.
    pub fn remove(&mut self) {
        if std::mem::replace(&mut self.removed, true) {
            return;
        }
        let mut args = vec!["delete", "--team", &self.team];
        if self.purge {
            args.push("--purge");
        }
        remove_team(self.engine, &self.team, &self.root, || {
            let _ = self.ateam(&args);
        });
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.remove();
    }
}
