//! The world of the intercepted-egress tests (tests/egress_intercept.rs and the attacks on it,
//! tests/attacks_intercept.rs): a team whose member `c` of the clients' image has a grant with
//! two hosts with rules on the host's loopback (an API with `x-api-key` injected, a git host
//! with basic auth injected and `push: false`), ateam run as each engine's user with the real
//! values in its environment, and everything deleted on drop.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::common::{self, Engine, rootless_user, text};
use crate::upstream::Upstream;

/// What the two tests' grants differ in.
pub struct Rules {
    pub helper_requests: bool,
    /// The API host's path patterns, as YAML (`"/v1/**", "/sse"`).
    pub api_paths: &'static str,
    /// An http rule for the git host besides its git rule, as YAML.
    pub git_http: Option<&'static str>,
}

pub const IMAGE: &str = "ateam-clients:latest";
pub const PLACEHOLDER_API: &str = "ateam-placeholder-ANTHROPIC_API_KEY";

pub struct World {
    pub engine: Engine,
    dir: tempfile::TempDir,
    pub team: String,
    /// The real values, unique to this run: nothing of the member may hold them.
    pub api_key: String,
    pub git_token: String,
}

impl World {
    /// A world in a temp folder named after `prefix`, its team after `team`.
    pub fn new(engine: Engine, prefix: &str, team: &str) -> World {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let n = std::process::id() % 100000;
        let e = &format!("{engine:?}").to_lowercase()[..1];
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let w = World {
            engine,
            dir,
            team: format!("{team}-{e}{n}"),
            api_key: format!("sk-ant-real-{e}{n}x{nanos}"),
            git_token: format!("ghp_real{e}{n}y{nanos}"),
        };
        for d in ["work", "state", "sessions", "git"] {
            std::fs::create_dir(w.root().join(d)).unwrap();
        }
        if engine == Engine::Rootless {
            let (_, uid, gid) = rootless_user();
            for d in ["", "work", "state", "sessions"] {
                std::os::unix::fs::chown(w.root().join(d), Some(uid), Some(gid)).unwrap();
            }
        }
        w
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// The team: member `c` with one grant, the API host and the git host with rules.
    pub fn write(&self, api: &Upstream, git: &Upstream, m: &Rules) {
        std::fs::write(self.root().join("api-ca.pem"), &api.ca_pem).unwrap();
        std::fs::write(self.root().join("git-ca.pem"), &git.ca_pem).unwrap();
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: {IMAGE}, sessionDir: ./sessions, allowUnenforcedLimits: true, helperRequests: {helpers}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net}}
spec:
  read: [./work]
  network:
    allow:
      - host: host.ateam.internal:{api}
        upstreamCA: ./api-ca.pem
        credentials: {{header: x-api-key, secret: ANTHROPIC_API_KEY}}
        http: [{{methods: [GET, POST], paths: [{api_paths}]}}]
      - host: host.ateam.internal:{git}
        upstreamCA: ./git-ca.pem
        git: {{repositories: [acme/shop], push: false}}
        credentials: {{basic: {{username: x-access-token, secret: GIT_TOKEN}}}}{git_http}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: c}}
spec:
  parent: lead
  access: net
  command: [sleep, "100000"]
  resources: {{memory: 256Mi, pids: 128}}
  secretEnv: [ANTHROPIC_API_KEY, GIT_TOKEN]
"#,
            team = self.team,
            api = api.port,
            git = git.port,
            helpers = m.helper_requests,
            api_paths = m.api_paths,
            git_http = m
                .git_http
                .map(|h| format!("\n        http: [{h}]"))
                .unwrap_or_default(),
        );
        std::fs::write(self.manifest(), yaml).unwrap();
        if self.engine == Engine::Rootless {
            let (_, uid, gid) = rootless_user();
            for f in ["team.yaml", "api-ca.pem", "git-ca.pem"] {
                std::os::unix::fs::chown(self.root().join(f), Some(uid), Some(gid)).unwrap();
            }
        }
    }

    pub fn manifest(&self) -> PathBuf {
        self.root().join("team.yaml")
    }

    pub fn ateam(&self, args: &[&str]) -> Output {
        let env = [
            ("ANTHROPIC_API_KEY", self.api_key.as_str()),
            ("GIT_TOKEN", self.git_token.as_str()),
        ];
        common::ateam_command_env(self.engine, &self.root().join("state"), &env)
            .args(args)
            .current_dir(self.root())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// ateam's output, checked to succeed and to hold neither real value.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.ateam(args);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{:?}: {args:?}: {all}",
            self.engine
        );
        self.clean(&all, &format!("the output of ateam {args:?}"));
        all
    }

    pub fn clean(&self, s: &str, what: &str) {
        assert!(
            !s.contains(&self.api_key) && !s.contains(&self.git_token),
            "{:?}: {what} holds a real credential: {s}",
            self.engine
        );
    }

    /// stdout and stderr of a shell script run inside `c`, as the member.
    pub fn inside(&self, script: &str) -> String {
        let out = self.ateam(&["exec", "c", "--team", &self.team, "--", "sh", "-c", script]);
        format!(
            "{}{}[exit {:?}]",
            text(&out.stdout),
            text(&out.stderr),
            out.status.code()
        )
    }

    pub fn container_id(&self) -> String {
        let out = common::engine_command(self.engine, false)
            .args(["ps", "-q", "--no-trunc", "--filter"])
            .arg(format!("name=ateam_{}_c", self.team))
            .output()
            .unwrap();
        text(&out.stdout).trim().to_string()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.ateam(&["delete", "--team", &self.team, "--purge"]);
        if self.engine == Engine::Rootless {
            let (name, _, _) = rootless_user();
            let _ = Command::new("runuser")
                .args(["-u", &name, "--", "podman", "unshare", "rm", "-rf"])
                .arg(self.root())
                .output();
        }
    }
}
