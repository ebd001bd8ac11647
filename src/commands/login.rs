//! `ateam login import|status|refresh|remove`: the person's subscription logins, which ateam
//! owns once imported (docs/agents.md, "Subscription logins"), and the hidden
//! `login-keeper` that apply starts.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::{Global, LoginAgent, LoginCommand, Output};
use ateam::core::logins::{Login, LoginKind, refresh_at};
use ateam::logins::{self, now_ms};

use super::common::app;
use super::exit::Exit;

/// The most of a credential file read: they are a few KiB.
const MAX_FILE: u64 = 1 << 20;

fn kind(a: LoginAgent) -> LoginKind {
    match a {
        LoginAgent::Claude => LoginKind::Claude,
        LoginAgent::Codex => LoginKind::Codex,
    }
}

pub fn run(global: &Global, c: LoginCommand) -> anyhow::Result<Exit> {
    match c {
        LoginCommand::Import {
            agent,
            from,
            token_url,
            token_ca,
            no_refresh,
        } => import(global, kind(agent), from, token_url, token_ca, no_refresh),
        LoginCommand::Status { output } => status(global, output),
        LoginCommand::Refresh { agent } => refresh(global, kind(agent)),
        LoginCommand::Remove { agent } => remove(global, kind(agent)),
    }
}

/// The agent's own file of its login on this machine.
fn default_file(kind: LoginKind, home: &Path) -> PathBuf {
    let var = match kind {
        LoginKind::Claude => "CLAUDE_CONFIG_DIR",
        LoginKind::Codex => "CODEX_HOME",
    };
    match std::env::var_os(var) {
        Some(dir) if !dir.is_empty() => {
            let name = Path::new(kind.default_file())
                .file_name()
                .unwrap_or_default();
            PathBuf::from(dir).join(name)
        }
        _ => home.join(kind.default_file()),
    }
}

fn read_limited(mut r: impl Read, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.by_ref()
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {what}"))?;
    if bytes.len() as u64 > MAX_FILE {
        bail!("{what} is larger than {MAX_FILE} bytes: not a credential file");
    }
    Ok(bytes)
}

fn import(
    global: &Global,
    kind: LoginKind,
    from: Option<PathBuf>,
    token_url: Option<String>,
    token_ca: Option<PathBuf>,
    no_refresh: bool,
) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let path = from.unwrap_or_else(|| default_file(kind, &ctx.host.home));
    let (bytes, shown) = if path.as_os_str() == "-" {
        (
            read_limited(std::io::stdin(), "standard input")?,
            "-".to_string(),
        )
    } else {
        let f = std::fs::File::open(&path).with_context(|| {
            format!(
                "{}: log in with `{}` on this machine first, or say --from",
                path.display(),
                kind.name()
            )
        })?;
        (
            read_limited(f, &path.display().to_string())?,
            path.display().to_string(),
        )
    };
    if let Some(u) = &token_url
        && !u.starts_with("https://")
    {
        bail!("--token-url `{u}` must start with https://");
    }
    let ca = match &token_ca {
        None => None,
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading --token-ca {}", p.display()))?,
        ),
    };
    let login = logins::read_agent_file(kind, &bytes, &shown, token_url.as_deref(), ca)?;
    let held = logins::lock(&ctx.host.state_dir, ctx.owner)?;
    let replaced = held.load(kind).ok().flatten().is_some();
    let login = if no_refresh || login.refresh_token.is_none() {
        login
    } else {
        // Spent now: the copy it came from is refused from here on, and ateam is the one
        // owner. A login ateam holds already stays as it is if this fails.
        let next = logins::refresh(&login, now_ms());
        if let Some(why) = &next.last_error {
            bail!(
                "the {} login was not imported: its first refresh failed ({why}){}",
                kind.name(),
                if next.refused {
                    "; the refresh token in the file was spent already: log in with the agent again"
                } else {
                    "; --no-refresh imports it without one"
                }
            );
        }
        next
    };
    held.save(&login)?;
    drop(held);
    eprintln!(
        "{} the {} login from {shown}: {}",
        if replaced { "replaced" } else { "imported" },
        kind.name(),
        describe(&login, now_ms())
    );
    if login.refresh_token.is_some() {
        eprintln!(
            "ateam owns it now and refreshes it by itself; the copy in {shown} {}. To go on using {} on this machine, log in there again (a login of its own); do not log out: that may end this one too.",
            if no_refresh {
                "is spent at ateam's first refresh"
            } else {
                "was spent by this import's refresh"
            },
            kind.name()
        );
    }
    Ok(Exit::Ok)
}

/// One line on a login, without any token.
fn describe(l: &Login, now: u64) -> String {
    let left = |ms: u64| -> String {
        if ms <= now {
            return "ended".into();
        }
        let s = (ms - now) / 1000;
        match s {
            0..60 => format!("{s}s"),
            60..3600 => format!("{}m", s / 60),
            _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        }
    };
    let mut parts = vec![match l.expires_at {
        Some(e) => format!("token ends in {}", left(e)),
        None => "token's end unknown".into(),
    }];
    match (&l.refresh_token, refresh_at(l)) {
        (None, _) => parts.push("not refreshable (a long-lived token)".into()),
        (Some(_), Some(at)) => parts.push(format!("refreshed in {}", left(at))),
        (Some(_), None) => parts.push("not refreshed".into()),
    }
    parts.push(format!("{} refreshes", l.refreshes));
    if let Some(why) = &l.last_error {
        parts.push(format!("last refresh failed: {why}"));
    }
    if l.refused {
        parts.push(format!(
            "REFUSED: log in again and `ateam login import {}`",
            l.kind.name()
        ));
    }
    parts.join(", ")
}

fn status(global: &Global, output: Output) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let now = now_ms();
    let keeper = ateam::app::login_keeper::running(&ctx.host.state_dir);
    let mut docs = Vec::new();
    for kind in ateam::core::logins::KINDS {
        let Some(l) = logins::peek(&ctx.host.state_dir, kind)? else {
            continue;
        };
        docs.push(serde_json::json!({
            "login": kind.name(),
            "importedFrom": l.imported_from,
            "tokenUrl": l.token_url,
            "expiresAt": l.expires_at,
            "refreshAt": refresh_at(&l),
            "refreshable": l.refresh_token.is_some(),
            "refreshes": l.refreshes,
            "failures": l.failures,
            "lastError": l.last_error,
            "refused": l.refused,
            "subscription": l.subscription,
            "summary": describe(&l, now),
        }));
    }
    match output {
        Output::Json => outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"logins": docs, "keeperRunning": keeper})
            )?
        ),
        Output::Yaml => bail!("login status prints text or JSON (-o json)"),
        Output::Text => {
            if docs.is_empty() {
                outln!("no login imported (ateam login import claude|codex)");
            }
            for d in &docs {
                outln!(
                    "{}: {} (from {})",
                    d["login"].as_str().unwrap_or(""),
                    d["summary"].as_str().unwrap_or(""),
                    d["importedFrom"].as_str().unwrap_or("")
                );
            }
            outln!(
                "keeper: {}",
                if keeper {
                    "running"
                } else {
                    "not running (apply starts it when a member uses a login)"
                }
            );
        }
    }
    Ok(Exit::Ok)
}

fn refresh(global: &Global, kind: LoginKind) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let held = logins::lock(&ctx.host.state_dir, ctx.owner)?;
    let mut login = held
        .load(kind)?
        .ok_or(logins::LoginError::NotImported { kind })?;
    if login.refresh_token.is_none() {
        bail!("the {} login is a token that is not refreshed", kind.name());
    }
    login.expires_at = Some(0);
    login.refused = false;
    login.failures = 0;
    login.failed_at = None;
    held.save(&login)?;
    let login = held.fresh(kind, now_ms())?;
    eprintln!(
        "refreshed the {} login: {}",
        kind.name(),
        describe(&login, now_ms())
    );
    // The proxies get it from the keeper's next look; give it to them now.
    if ateam::app::login_keeper::running(&ctx.host.state_dir) {
        eprintln!("the login keeper hands it to the proxies within 30 s");
    }
    Ok(Exit::Ok)
}

fn remove(global: &Global, kind: LoginKind) -> anyhow::Result<Exit> {
    let ctx = app(global);
    let held = logins::lock(&ctx.host.state_dir, ctx.owner)?;
    if held.remove(kind)? {
        eprintln!(
            "removed the {} login (members that use it keep the token their proxy holds until it ends)",
            kind.name()
        );
    } else {
        eprintln!("no {} login was imported", kind.name());
    }
    Ok(Exit::Ok)
}

/// The hidden `login-keeper`.
pub fn keeper(global: &Global) -> anyhow::Result<Exit> {
    let ctx = app(global);
    ateam::app::login_keeper::run(&ctx.host.state_dir)?;
    Ok(Exit::Ok)
}
