//! The stand-in of the remote model (tests/support/model_server.py), for the real-agent
//! tests: a child process over HTTPS on a free loopback port, ended on drop.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running stand-in and its request log (one JSON object per line).
pub struct StandIn {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl StandIn {
    /// Started in `dir` (its port file and log there) with `extra` flags (`--login-dir ...`).
    /// HTTPS, as the real APIs: the member's proxy ends the agent's TLS and injects the key
    /// (examples/agents/*/model-ca.pem is this certificate's CA).
    pub fn start(dir: &Path, extra: &[OsString]) -> StandIn {
        let support = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support");
        let mut tls: Vec<OsString> = vec!["--tls-cert".into()];
        tls.push(support.join("model-tls/cert.pem").into());
        tls.push("--tls-key".into());
        tls.push(support.join("model-tls/key.pem").into());
        tls.extend(extra.iter().cloned());
        StandIn::serve(dir, &tls)
    }

    /// Over plain HTTP on 127.0.0.1, for an agent on the host (a main session's): the
    /// certificate of `start` is for the members' name of the host only.
    pub fn start_plain(dir: &Path) -> StandIn {
        StandIn::serve(dir, &[])
    }

    fn serve(dir: &Path, extra: &[OsString]) -> StandIn {
        let support = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support");
        let (port_file, log) = (dir.join("model.port"), dir.join("model.jsonl"));
        let child = Command::new("python3")
            .arg(support.join("model_server.py"))
            .args(["--port", "0", "--port-file"])
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs the stand-in model");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break p;
            }
            assert!(
                Instant::now() < deadline,
                "the stand-in model never said its port"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        StandIn { child, port, log }
    }

    /// Every line of its log, as JSON.
    pub fn entries(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("the stand-in logs JSON lines"))
            .collect()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `p` and everything below it handed to `uid:gid`, symlinks themselves.
pub fn chown_tree(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).expect("lchown");
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).expect("a folder") {
            chown_tree(&e.expect("an entry").path(), uid, gid);
        }
    }
}

/// A copy of the folder `from` (files and folders) at `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a folder");
    for e in std::fs::read_dir(from).expect("a folder") {
        let e = e.expect("an entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("a type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).expect("a copy");
        }
    }
}
