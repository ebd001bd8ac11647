//! An engine service of a test's own, to stop and start while the shared ones stay up for
//! the other tests (tests/controller.rs, tests/faults.rs).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Engine, engine_uri, var};

/// An engine service of this test's own, to stop and start (the shared ones stay up for the
/// other tests): a dockerd with its own data root (its containers stop with it), or a second
/// `podman system service` over the shared storage (its containers outlive it, as with a
/// restart of podman.service).
pub struct PrivateEngine {
    engine: Engine,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PrivateEngine {
    /// A dockerd for `Engine::Docker`, else a Podman service (root's).
    pub fn new(engine: Engine) -> PrivateEngine {
        let dir = tempfile::Builder::new()
            .prefix("ateam-eng-")
            .tempdir()
            .unwrap();
        let mut e = PrivateEngine {
            engine,
            dir,
            child: None,
        };
        e.start();
        if engine == Engine::Docker {
            // Its own data root has no images: the demo image, from the shared engine.
            let load = format!(
                "docker -H {} save {img} | docker -H {} load",
                engine_uri(Engine::Docker),
                e.uri(),
                img = var("ATEAM_TEST_IMAGE")
            );
            let ok = Command::new("sh").args(["-c", &load]).status().unwrap();
            assert!(ok.success(), "{load}");
        }
        e
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("engine.sock")
    }

    pub fn uri(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    pub fn start(&mut self) {
        let d = self.dir.path();
        let mut c = match self.engine {
            Engine::Docker => {
                let mut c = Command::new("dockerd");
                c.arg("--host")
                    .arg(self.uri())
                    .arg("--data-root")
                    .arg(d.join("data"))
                    .arg("--exec-root")
                    .arg(d.join("exec"))
                    .arg("--pidfile")
                    .arg(d.join("docker.pid"))
                    .args(["--iptables=false", "--ip-masq=false", "--bridge=none"])
                    .args(["--shutdown-timeout", "2"]);
                c
            }
            Engine::Podman | Engine::Rootless => {
                let mut c = Command::new("podman");
                c.args(["system", "service", "--time=0", &self.uri()]);
                c
            }
        };
        let log = std::fs::File::create(d.join("engine.log")).unwrap();
        self.child = Some(
            c.stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            assert!(
                Instant::now() < deadline,
                "{:?}: the private engine did not start:\n{}",
                self.engine,
                std::fs::read_to_string(d.join("engine.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// As `systemctl stop` would: SIGTERM, and wait until it is gone.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(self.socket());
    }
}

impl Drop for PrivateEngine {
    fn drop(&mut self) {
        self.stop();
    }
}
