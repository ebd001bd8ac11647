//! The part of a test's `World` every engine test crate shares: which engine, a temporary
//! folder for the team's files and ateam's state (`<root>/state`), the team's name, running
//! `ateam` there as the engine's user, and ending the team when the World is dropped. Each
//! crate wraps it in its own `World` with what is its own (its manifests, its checks).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use super::{Engine, ateam_command_env, engine_command, rootless_user, text};

pub struct World {
    pub engine: Engine,
    pub team: String,
    root: PathBuf,
    /// The engine's address when it is the test's own (a `PrivateEngine` to stop and start, a
    /// `FaultySocket` in front of the shared one) rather than the shared engine's: ateam, the
    /// engine's CLI and the teardown all talk to it (`set_uri`).
    uri: Option<String>,
    /// Its Teams run their members under gVisor (`common::gvisor`, read when it was made).
    pub gvisor: bool,
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
            "{tag}{}{}{}",
            &format!("{engine:?}").to_lowercase()[..1],
            if super::gvisor() { "g" } else { "" },
            std::process::id() % 100000
        );
        World {
            engine,
            purge: true,
            removed: false,
            uri: super::gvisor().then(|| super::gvisor_uri(engine)).flatten(),
            gvisor: super::gvisor(),
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
    /// Under gVisor a Team written gets `runtime: gvisor` (`common::with_gvisor`).
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        let text = if self.gvisor {
            super::with_gvisor(text)
        } else {
            text.to_string()
        };
        std::fs::write(&p, text).unwrap();
        self.give(&[rel]);
        p
    }

    /// `ateam --backend …` as the engine's user, state in `<root>/state`, in the temporary
    /// folder; the caller adds the arguments.
    pub fn command(&self) -> Command {
        self.command_env(&[])
    }

    /// `command` with these variables in ateam's environment (a secret a member is handed,
    /// an agent's key): through `runuser`'s `env -i` too, where `Command::env` would be lost.
    pub fn command_env(&self, env: &[(&str, &str)]) -> Command {
        let mut env = env.to_vec();
        if let Some(uri) = &self.uri {
            let var = match self.engine {
                Engine::Docker => "DOCKER_HOST",
                Engine::Podman | Engine::Rootless => "CONTAINER_HOST",
            };
            env.push((var, uri));
        }
        let mut c = ateam_command_env(self.engine, &self.state(), &env);
        c.current_dir(&self.root);
        c
    }

    /// From now on ateam, `engine_cli` and the teardown talk to the engine at `uri` (the
    /// test's own), or again to the shared one (`None`). Root's engines only.
    pub fn set_uri(&mut self, uri: Option<String>) {
        assert!(
            uri.is_none() || self.engine != Engine::Rootless,
            "an engine of the test's own is root's"
        );
        self.uri = uri;
    }

    /// The engine's own CLI (`docker -H` / `podman --url`), as root, at the World's engine:
    /// for looking, and for changes made behind ateam's back.
    pub fn engine_cli(&self) -> Command {
        match &self.uri {
            None => engine_command(self.engine, false),
            Some(uri) => {
                let (bin, flag) = match self.engine {
                    Engine::Docker => ("docker", "-H"),
                    Engine::Podman | Engine::Rootless => ("podman", "--url"),
                };
                let mut c = Command::new(bin);
                c.arg(flag).arg(uri);
                c
            }
        }
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
    /// --purge`, then whatever container with the team's label is left on the engine
    /// (strangers have no record), then on rootless Podman the files the engine's user made
    /// below the folder (subuids root cannot always remove otherwise). For a crate whose own
    /// teardown must come after it.
    pub fn remove(&mut self) {
        if std::mem::replace(&mut self.removed, true) {
            return;
        }
        let mut args = vec!["delete", "--team", &self.team];
        if self.purge {
            args.push("--purge");
        }
        let _ = self.ateam(&args);
        let label = format!("label=ateam.dev/team={}", self.team);
        if let Ok(out) = self
            .engine_cli()
            .args(["ps", "-aq", "--filter", &label])
            .output()
        {
            for id in text(&out.stdout).split_whitespace() {
                let _ = self.engine_cli().args(["rm", "-f", id]).output();
            }
        }
        if self.engine == Engine::Rootless {
            let (name, _, _) = rootless_user();
            let _ = Command::new("runuser")
                .args(["-u", &name, "--", "podman", "unshare", "rm", "-rf"])
                .arg(&self.root)
                .output();
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.remove();
    }
}
