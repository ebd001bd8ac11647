//! Subscription logins end to end: the person's Claude (or ChatGPT) login, made "on the host"
//! by the test suite's stand-in login provider (tests/support/model_server.py --login-dir,
//! access tokens of 8 s), imported with `ateam login import`, used by a real Claude Code (or
//! Codex CLI) member through its egress proxy, on Docker, rootful and rootless Podman.
//!
//! The member's task runs a script first (the stand-in's `run the command:` step) that waits
//! while ateam refreshes the login (twice, at least), dumps every process's environment and
//! command line and its HOME, /tmp, /etc and /run into its write grant, and then calls the
//! login's token host itself (allowed in its grant) through its proxy; then it writes its
//! file. The test asserts: the model saw only current real tokens, from more than one
//! refresh, and never a placeholder; no real access or refresh token is anywhere the member
//! can read (its dump, its write grant, its transcript and control folders, the container's
//! configuration), while its placeholder is (the scan can see a token); the member's own
//! refresh call was refused, logged and shown in `ateam events`; and the copy the login was
//! imported from is spent (one owner).

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::standin::{StandIn, chown_tree, copy_dir};
use common::{Engine, rootless_user, text};

/// One agent's login, as its example and the stand-in know it.
struct Agent {
    name: &'static str,
    /// The stand-in's file of its login, as the agent keeps it on a host.
    file: &'static str,
    /// Its token endpoint on the stand-in.
    token_path: &'static str,
    /// The vendor's host where it refreshes: allowed in the grant, refused by the proxy.
    token_host: &'static str,
    /// The example's credential line, replaced by the login's.
    key_credential: &'static str,
    /// What the member's environment or state holds instead of the token.
    placeholder: &'static str,
}

const CLAUDE: Agent = Agent {
    name: "claude",
    file: "claude-credentials.json",
    token_path: "/v1/oauth/token",
    token_host: "platform.claude.com",
    key_credential: "credentials: {header: x-api-key, secret: ANTHROPIC_API_KEY}",
    placeholder: "sk-ant-oat01-ateam-placeholder",
};

const CODEX: Agent = Agent {
    name: "codex",
    file: "codex-auth.json",
    token_path: "/oauth/token",
    token_host: "auth.openai.com",
    key_credential: "credentials: {bearer: OPENAI_API_KEY}",
    placeholder: "ateam-placeholder-account",
};

/// How long the stand-in's access tokens live.
const TTL: u64 = 8;

/// The script the member runs before it writes its file (in its write grant).
const SCAN: &str = r#"set -u
sleep 9
d=scan
mkdir -p "$d"
for p in /proc/[0-9]*; do
    tr '\0' '\n' < "$p/environ" >> "$d/environ.txt" 2>/dev/null
    tr '\0' ' ' < "$p/cmdline" >> "$d/cmdline.txt" 2>/dev/null
    echo >> "$d/cmdline.txt"
done
tar -cf "$d/home-tmp-etc-run.tar" "$HOME" /tmp /etc /run 2>/dev/null
exec 3<>/dev/tcp/127.0.0.1/3128
printf 'CONNECT TOKEN_HOST:443 HTTP/1.1\r\nHost: TOKEN_HOST:443\r\n\r\n' >&3
head -c 400 <&3 > "$d/refresh-answer.txt"
"#;

/// The stand-in model and login provider, a child process on a free port, ended on drop.
struct Provider {
    model: StandIn,
    port: u16,
    logins: PathBuf,
}

impl Provider {
    fn start(dir: &Path) -> Provider {
        let logins = dir.join("logins");
        let extra = [
            "--login-dir".into(),
            logins.clone().into_os_string(),
            "--login-ttl".into(),
            TTL.to_string().into(),
        ];
        let model = StandIn::start(dir, &extra);
        Provider {
            port: model.port,
            model,
            logins,
        }
    }

    fn entries(&self) -> Vec<serde_json::Value> {
        self.model.entries()
    }

    /// Every real token it issued (access and refresh), of every generation.
    fn tokens(&self) -> Vec<String> {
        self.entries()
            .iter()
            .filter(|e| e["step"] == "issued")
            .flat_map(|e| [&e["access_token"], &e["refresh_token"]])
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect()
    }
}

/// A copy of examples/agents/<agent> under a unique team name, its member on the person's
/// login instead of a key: the common world (`common::World`: engine, folder, team, `ateam`,
/// teardown with --purge) and this crate's looks.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

impl World {
    fn new(engine: Engine, agent: &Agent, p: &Provider) -> World {
        let w = World(common::World::new(
            engine,
            "logins",
            &format!("lg{}", &agent.name[..2]),
        ));
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/agents")
            .join(agent.name);
        copy_dir(&src, &w.root());
        let team = &w.team;
        let manifest = w.path("team.yaml");
        let mut text = std::fs::read_to_string(&manifest)
            .unwrap()
            .replace(
                &format!("name: {}-agent\n", agent.name),
                &format!("name: {team}\n"),
            )
            .replace(
                "host.ateam.internal:8790",
                &format!("host.ateam.internal:{}", p.port),
            )
            .replace(
                agent.key_credential,
                &format!("credentials: {{login: {}}}", agent.name),
            )
            // The person allowed the token host too: the proxy refuses it all the same.
            .replace(
                "        upstreamCA: ./model-ca.pem   # the stand-in's own CA (a real API needs none)\n",
                &format!(
                    "        upstreamCA: ./model-ca.pem\n      - {}\n",
                    agent.token_host
                ),
            )
            .replace(
                &format!("task: \"create the file hello.txt containing exactly: hello from {}\"", agent.name),
                &format!(
                    "task: \"run the command: bash scan.sh, then create the file hello.txt containing exactly: hello from {}\"\n    login: subscription",
                    agent.name
                ),
            );
        assert!(
            text.contains("login: subscription") && text.contains("{login: "),
            "the example changed: {text}"
        );
        if engine == Engine::Rootless {
            text = text.replace(
                "  sessionDir: ./sessions\n",
                "  sessionDir: ./sessions\n  allowUnenforcedLimits: true\n",
            );
        }
        std::fs::write(&manifest, text).unwrap();
        std::fs::write(
            w.path("workspace/repo/scan.sh"),
            SCAN.replace("TOKEN_HOST", agent.token_host),
        )
        .unwrap();
        let (uid, gid) = w.rootless_person().unwrap_or((FOLDER_OWNER, FOLDER_OWNER));
        chown_tree(&w.root(), uid, gid);
        w
    }

    fn manifest(&self) -> String {
        self.path("team.yaml").display().to_string()
    }

    fn coder_state(&self) -> String {
        let out = self.ateam(&["status", "-o", "json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        doc["teams"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["team"] == self.team.as_str())
            .flat_map(|t| t["members"].as_array().into_iter().flatten())
            .find(|m| m["name"] == "coder")
            .map(|m| m["state"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    }
}

/// The owner of the example's copy under a root caller: a user of the machine, not root.
const FOLDER_OWNER: u32 = 4242;

/// Every regular file below `dir` (not following links), with its bytes.
fn files_below(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let (path, ft) = (e.path(), e.file_type().unwrap());
        if ft.is_dir() {
            files_below(&path, out);
        } else if ft.is_file() {
            out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Import the stand-in's login, apply, let the member work through refreshes, then look for
/// the real tokens everywhere the member could read them.
fn a_login_member_works_through_a_refresh_holding_no_token(engine: Engine, agent: &Agent) {
    let scratch = tempfile::tempdir().unwrap();
    let p = Provider::start(scratch.path());
    let w = World::new(engine, agent, &p);
    let from = p.logins.join(agent.file);
    let (uid, gid) = match engine {
        Engine::Rootless => (rootless_user().1, rootless_user().2),
        Engine::Docker | Engine::Podman => (0, 0),
    };
    chown_tree(&p.logins, uid, gid);
    std::os::unix::fs::chown(scratch.path(), Some(uid), Some(gid)).unwrap();
    let token_url = format!("https://host.ateam.internal:{}{}", p.port, agent.token_path);
    let ca = w.root().join("model-ca.pem").display().to_string();
    let import = |w: &World| {
        w.ateam(&[
            "login",
            "import",
            agent.name,
            "--from",
            &from.display().to_string(),
            "--token-url",
            &token_url,
            "--token-ca",
            &ca,
        ])
    };
    let out = import(&w);
    assert_eq!(out.status.code(), Some(0), "import: {}", text(&out.stderr));
    // The import spent the copy it read: a second import of it is refused by the provider,
    // and the login ateam holds stays.
    let again = import(&w);
    assert_ne!(again.status.code(), Some(0));
    assert!(
        text(&again.stderr).contains("spent"),
        "{}",
        text(&again.stderr)
    );
    let store = w.state().join(format!("logins/{}.json", agent.name));
    let meta = std::fs::metadata(&store).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );

    let t0 = Instant::now();
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "apply failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let deadline = t0 + Duration::from_secs(150);
    while !w.coder_state().starts_with("exited") {
        if Instant::now() > deadline {
            let logs = w.ateam(&["logs", "coder"]);
            panic!(
                "{} never ended: {}\n{}{}",
                agent.name,
                w.coder_state(),
                text(&logs.stdout),
                text(&logs.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let logs = w.ateam(&["logs", "coder"]);
    let logs = format!("{}{}", text(&logs.stdout), text(&logs.stderr));
    assert_eq!(w.coder_state(), "exited 0", "{logs}");
    let repo = w.root().join("workspace/repo");
    assert_eq!(
        std::fs::read_to_string(repo.join("hello.txt")).unwrap_or_else(|e| panic!("{e}: {logs}")),
        format!("hello from {}\n", agent.name)
    );

    // The model saw the whole turn, every request with a current real token, and tokens of
    // more than one generation: the member worked through ateam's refreshes.
    let entries = p.entries();
    let model: Vec<&serde_json::Value> = entries
        .iter()
        .filter(|e| matches!(e["step"].as_str(), Some("command" | "tool" | "done")))
        .collect();
    let steps: Vec<&str> = model.iter().filter_map(|e| e["step"].as_str()).collect();
    assert!(
        steps.contains(&"command") && steps.contains(&"tool") && steps.contains(&"done"),
        "{steps:?}"
    );
    let refused: Vec<&serde_json::Value> = entries.iter().filter(|e| e["step"] == "401").collect();
    assert!(refused.is_empty(), "the model refused a token: {refused:?}");
    let gens: std::collections::BTreeSet<String> = model
        .iter()
        .map(|e| {
            let auth = e["auth"].as_str().unwrap_or("");
            assert!(auth.starts_with("ok: "), "unchecked or refused: {e}");
            auth.to_string()
        })
        .collect();
    assert!(gens.len() >= 2, "one token for the whole turn: {gens:?}");
    let refreshes = entries
        .iter()
        .filter(|e| e["step"] == "refresh" && e["login"] == agent.name)
        .count();
    assert!(
        refreshes >= 3,
        "import's and at least two by ateam: {refreshes}"
    );
    // One refusal: the second import's, of the spent copy; ateam's own were all good.
    let spent: Vec<&serde_json::Value> =
        entries.iter().filter(|e| e["step"] == "refused").collect();
    assert_eq!(spent.len(), 1, "{spent:?}");
    assert_eq!(spent[0]["why"], "spent");

    // No real token anywhere the member can read; its placeholder where it reads its login.
    let tokens = p.tokens();
    assert!(tokens.len() >= 8, "{tokens:?}");
    let scan = repo.join("scan");
    let environ = std::fs::read(scan.join("environ.txt")).unwrap_or_else(|e| panic!("{e}: {logs}"));
    let mut readable = Vec::new();
    for dir in [
        repo.clone(),
        w.root().join("sessions/members/coder"),
        w.state()
            .join(format!("teams/{}/members/coder/ctl", w.team)),
    ] {
        files_below(&dir, &mut readable);
    }
    let inspect = common::engine_command(engine, false)
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=ateam.dev/team={}", w.team),
        ])
        .output()
        .unwrap();
    for id in text(&inspect.stdout).split_whitespace() {
        let i = common::engine_command(engine, false)
            .args(["inspect", id])
            .output()
            .unwrap();
        readable.push((PathBuf::from(format!("inspect {id}")), i.stdout));
    }
    assert!(readable.len() > 10, "{} files", readable.len());
    for (path, bytes) in &readable {
        for t in &tokens {
            assert!(
                !contains(bytes, t),
                "a real token of the login is in {}",
                path.display()
            );
        }
    }
    let placeholder_seen = contains(&environ, agent.placeholder)
        || readable.iter().any(|(_, b)| contains(b, agent.placeholder));
    assert!(
        placeholder_seen,
        "the scan never saw the member's placeholder"
    );
    assert!(
        contains(
            &std::fs::read(scan.join("cmdline.txt")).unwrap(),
            agent.name
        ),
        "the scan saw no command line of the agent"
    );

    // The member's own refresh call: refused, logged, an event.
    let answer = text(&std::fs::read(scan.join("refresh-answer.txt")).unwrap());
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("ateam alone refreshes"),
        "{answer}"
    );
    let egress = text(&w.ateam(&["logs", "coder", "--egress"]).stdout);
    assert!(
        egress.lines().any(|l| l.contains("REFUSED")
            && l.contains(&format!("{}:443", agent.token_host))
            && l.contains("ateam alone refreshes")),
        "{egress}"
    );
    assert!(
        egress.contains(&format!("injected the {} login", agent.name)),
        "{egress}"
    );
    let events = text(&w.ateam(&["events", &w.team]).stdout);
    assert!(
        events.contains("egress-refused") && events.contains(agent.token_host),
        "{events}"
    );
    eprintln!(
        "[logins] {} on {engine:?}: {} refreshes, {} token generations seen by the model, {} files scanned, {:.1} s",
        agent.name,
        refreshes,
        gens.len(),
        readable.len(),
        t0.elapsed().as_secs_f64()
    );
}

fn claude_code_works_through_a_refresh_holding_no_token(engine: Engine) {
    a_login_member_works_through_a_refresh_holding_no_token(engine, &CLAUDE);
}

fn codex_works_through_a_refresh_holding_no_token(engine: Engine) {
    a_login_member_works_through_a_refresh_holding_no_token(engine, &CODEX);
}

/// Six `ateam login refresh` at once, each a process of its own reading the login from disk
/// (as after a restart): the lock makes them one after another, each spending the refresh
/// token the one before it stored, so the provider refuses none. Without the lock two would
/// spend the same token and one would be refused.
#[test]
fn concurrent_refreshes_spend_each_refresh_token_once() {
    let scratch = tempfile::tempdir().unwrap();
    let p = Provider::start(scratch.path());
    let state = scratch.path().join("state");
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/model-tls/ca.pem");
    let ateam = |args: &[&str]| {
        let mut c = Command::new(common::ateam_bin());
        c.env("ATEAM_STATE_DIR", &state).args(args);
        c
    };
    let out = ateam(&["login", "import", "claude", "--from"])
        .arg(p.logins.join(CLAUDE.file))
        .arg("--token-url")
        .arg(format!(
            "https://host.ateam.internal:{}/v1/oauth/token",
            p.port
        ))
        .arg("--token-ca")
        .arg(&ca)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let children: Vec<Child> = (0..6)
        .map(|_| {
            ateam(&["login", "refresh", "claude"])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let entries = p.entries();
    let count = |step: &str| entries.iter().filter(|e| e["step"] == step).count();
    assert_eq!((count("refresh"), count("refused")), (7, 0), "{entries:#?}");
    // What ateam keeps is the provider's latest.
    let latest = entries
        .iter()
        .rfind(|e| e["step"] == "issued" && e["login"] == "claude")
        .unwrap();
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("logins/claude.json")).unwrap()).unwrap();
    assert_eq!(stored["refreshToken"], latest["refresh_token"]);
    assert_eq!(stored["refreshes"], 7);
}

macro_rules! logins {
    ($($engine:ident),*) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn claude_code_works_through_a_refresh_holding_no_token() {
                    super::claude_code_works_through_a_refresh_holding_no_token(crate::common::engine_of(stringify!($engine)));
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn codex_works_through_a_refresh_holding_no_token() {
                    super::codex_works_through_a_refresh_holding_no_token(crate::common::engine_of(stringify!($engine)));
                }
            }
        )*
    };
}

logins!(docker, podman, rootless_podman);
