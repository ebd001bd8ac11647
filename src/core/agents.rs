//! What `agent:` on a Member expands to: the command, flags and environment that run Claude
//! Code or Codex CLI as a member (docs/agents.md), so that a manifest names the agent and its
//! task instead of twenty lines of flags. Pure: validation calls it, and `diff`, `export` and
//! `status` show the result as any command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::logins::{CLAUDE_TOKEN_VAR, LoginKind};

/// The agents ateam knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// Claude Code (`claude`, npm `@anthropic-ai/claude-code`).
    Claude,
    /// Codex CLI (`codex`, npm `@openai/codex`).
    Codex,
}

impl AgentKind {
    /// By its name in a manifest.
    pub fn parse(name: &str) -> Option<AgentKind> {
        match name {
            "claude" => Some(AgentKind::Claude),
            "codex" => Some(AgentKind::Codex),
            _ => None,
        }
    }

    /// The variable its key is read from (and injected into by the proxy).
    pub fn key_var(self) -> &'static str {
        match self {
            AgentKind::Claude => "ANTHROPIC_API_KEY",
            AgentKind::Codex => "OPENAI_API_KEY",
        }
    }

    /// Its subscription login (Claude's, ChatGPT's).
    pub fn login(self) -> LoginKind {
        match self {
            AgentKind::Claude => LoginKind::Claude,
            AgentKind::Codex => LoginKind::Codex,
        }
    }
}

/// How an agent reaches its model: with an API key (`secretEnv`), or with the person's
/// subscription login (`ateam login import`), which the proxy injects and ateam refreshes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AgentLogin {
    /// The API key of `key_var`, from apply's environment.
    #[default]
    ApiKey,
    /// The person's Claude or ChatGPT login.
    Subscription,
}

impl AgentLogin {
    /// By its name in a manifest.
    pub fn parse(name: &str) -> Option<AgentLogin> {
        match name {
            "apiKey" => Some(AgentLogin::ApiKey),
            "subscription" => Some(AgentLogin::Subscription),
            _ => None,
        }
    }

    /// The default (what records before it meant).
    pub fn is_api_key(&self) -> bool {
        *self == AgentLogin::ApiKey
    }

    /// Its name in a manifest.
    pub fn name(self) -> &'static str {
        match self {
            AgentLogin::ApiKey => "apiKey",
            AgentLogin::Subscription => "subscription",
        }
    }
}

/// What an agent needs to run as a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// Its command: the agent, the flags a container needs, the person's, the task.
    pub command: Vec<String>,
    /// Its environment (the manifest's `env` wins over these).
    pub env: BTreeMap<String, String>,
    /// The secret it reads its key from; none with a subscription login.
    pub secret: Option<&'static str>,
    /// Its state folder, inside the transcript folder (made before it starts: Codex refuses a
    /// `CODEX_HOME` that is not there).
    pub home: PathBuf,
    /// The subscription login the proxy injects for it.
    pub login: Option<LoginKind>,
    /// A file of placeholder tokens its agent reads its login from (Codex's `auth.json`),
    /// written before each start (`core::logins::codex_placeholder_auth`).
    pub login_file: Option<PathBuf>,
}

/// An agent as a manifest asks for it.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// Which agent.
    pub kind: AgentKind,
    /// Its first task (a prompt).
    pub task: &'a str,
    /// The model, if not the agent's default.
    pub model: Option<&'a str>,
    /// The model's base URL, if not the vendor's (a local server, a gateway).
    pub model_url: Option<&'a str>,
    /// Flags the person adds, before the task.
    pub args: &'a [String],
    /// A key, or the person's subscription login.
    pub login: AgentLogin,
}

/// The command and environment of `ask` for a member whose transcript folder is `transcripts`.
/// In a container that is already the sandbox, the agents' own approvals and sandboxes are
/// off; their state (settings, sessions) goes into the transcript folder, which ateam keeps;
/// telemetry, error reports and update checks are off (they would need hosts of their own).
pub fn expand(ask: Ask, transcripts: &Path) -> Expanded {
    let s = |v: &str| v.to_string();
    match ask.kind {
        AgentKind::Claude => {
            let home = transcripts.join("claude");
            let mut command = vec![s("claude"), s("-p"), s("--dangerously-skip-permissions")];
            if let Some(m) = ask.model {
                command.extend([s("--model"), s(m)]);
            }
            command.extend(ask.args.iter().cloned());
            command.push(s(ask.task));
            let mut env: BTreeMap<String, String> = [
                ("CLAUDE_CONFIG_DIR", home.display().to_string()),
                ("DISABLE_TELEMETRY", s("1")),
                ("DISABLE_ERROR_REPORTING", s("1")),
                ("DISABLE_AUTOUPDATER", s("1")),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", s("1")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            if let Some(u) = ask.model_url {
                env.insert(s("ANTHROPIC_BASE_URL"), s(u));
            }
            let login = (ask.login == AgentLogin::Subscription).then_some(LoginKind::Claude);
            if login.is_some() {
                // Claude Code sends it as `Authorization: Bearer` with its OAuth beta, and
                // never refreshes a token it was given this way.
                env.insert(s(CLAUDE_TOKEN_VAR), LoginKind::Claude.placeholder_bearer());
            }
            Expanded {
                command,
                env,
                secret: login.is_none().then_some(ask.kind.key_var()),
                home,
                login,
                login_file: None,
            }
        }
        AgentKind::Codex => codex(ask, transcripts),
    }
}

fn codex(ask: Ask, transcripts: &Path) -> Expanded {
    let s = |v: &str| v.to_string();
    let home = transcripts.join("codex");
    let mut command = vec![
        s("codex"),
        s("exec"),
        s("--skip-git-repo-check"),
        s("--dangerously-bypass-approvals-and-sandbox"),
    ];
    let login = (ask.login == AgentLogin::Subscription).then_some(LoginKind::Codex);
    let mut set = |kv: String| command.extend([s("-c"), kv]);
    for kv in [
        "analytics.enabled=false",
        "check_for_update_on_startup=false",
        "features.plugins=false",
        "features.remote_plugin=false",
        "features.apps=false",
    ] {
        set(s(kv));
    }
    if login.is_some() {
        // Its ChatGPT login from `auth.json` in CODEX_HOME (placeholders), never a keyring
        // or an API key.
        set(s("cli_auth_credentials_store=file"));
        set(s("forced_login_method=chatgpt"));
    }
    if let Some(u) = ask.model_url {
        let u = u.trim_end_matches('/');
        let base = if u.ends_with("/v1") {
            s(u)
        } else {
            format!("{u}/v1")
        };
        let auth = match login {
            None => format!("model_providers.model.env_key={}", ask.kind.key_var()),
            Some(_) => s("model_providers.model.requires_openai_auth=true"),
        };
        for kv in [
            s("model_provider=model"),
            s("model_providers.model.name=model"),
            format!("model_providers.model.base_url={base}"),
            auth,
            s("model_providers.model.wire_api=responses"),
        ] {
            set(kv);
        }
        if login.is_some() {
            // Its account and settings calls (`/backend-api/wham/...`) go to the same host,
            // not to chatgpt.com.
            set(format!(
                "chatgpt_base_url={}/backend-api/",
                u.trim_end_matches("/v1")
            ));
        }
    }
    if let Some(m) = ask.model {
        command.extend([s("-m"), s(m)]);
    }
    command.extend(ask.args.iter().cloned());
    command.push(s(ask.task));
    Expanded {
        command,
        env: BTreeMap::from([(s("CODEX_HOME"), home.display().to_string())]),
        secret: login.is_none().then_some(ask.kind.key_var()),
        login_file: login.map(|_| home.join("auth.json")),
        home,
        login,
    }
}

/// What the model's `agent` expands to (`None`: an agent ateam does not know).
pub fn expand_agent(a: &crate::model::Agent, transcripts: &Path) -> Option<Expanded> {
    let kind = AgentKind::parse(&a.name)?;
    Some(expand(
        Ask {
            kind,
            task: &a.task,
            model: a.model.as_deref(),
            model_url: a.model_url.as_deref(),
            args: &a.args,
            login: a.login,
        },
        transcripts,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_and_codex_expand_as_the_recipes_of_docs_agents() {
        let t = Path::new("/s/members/coder");
        let args = vec!["--verbose".to_string()];
        let c = expand(
            Ask {
                kind: AgentKind::Claude,
                task: "fix the test",
                model: Some("opus"),
                model_url: Some("https://host.ateam.internal:8790"),
                args: &args,
                login: AgentLogin::ApiKey,
            },
            t,
        );
        assert_eq!(
            c.command,
            [
                "claude",
                "-p",
                "--dangerously-skip-permissions",
                "--model",
                "opus",
                "--verbose",
                "fix the test"
            ]
        );
        assert_eq!(c.env["CLAUDE_CONFIG_DIR"], "/s/members/coder/claude");
        assert_eq!(
            c.env["ANTHROPIC_BASE_URL"],
            "https://host.ateam.internal:8790"
        );
        assert_eq!(c.secret, Some("ANTHROPIC_API_KEY"));
        let x = expand(
            Ask {
                kind: AgentKind::Codex,
                task: "fix it",
                model: Some("stand-in-model"),
                model_url: Some("https://host.ateam.internal:8790"),
                args: &[],
                login: AgentLogin::ApiKey,
            },
            t,
        );
        assert_eq!(
            &x.command[..4],
            [
                "codex",
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox"
            ]
        );
        assert!(
            x.command.contains(
                &"model_providers.model.base_url=https://host.ateam.internal:8790/v1".to_string()
            ),
            "{:?}",
            x.command
        );
        assert_eq!(x.command.last().map(String::as_str), Some("fix it"));
        assert_eq!(x.env["CODEX_HOME"], "/s/members/coder/codex");
        assert_eq!(x.home, t.join("codex"));
        assert_eq!(x.secret, Some("OPENAI_API_KEY"));
        // The vendor's own host: no provider of ateam's.
        let v = expand(
            Ask {
                kind: AgentKind::Codex,
                task: "t",
                model: None,
                model_url: None,
                args: &[],
                login: AgentLogin::ApiKey,
            },
            t,
        );
        assert!(!v.command.iter().any(|a| a.starts_with("model_provider")));
    }

    #[test]
    fn a_subscription_login_gives_the_agents_placeholders_and_no_key() {
        let t = Path::new("/s/members/coder");
        let ask = |kind, model_url| Ask {
            kind,
            task: "t",
            model: None,
            model_url,
            args: &[],
            login: AgentLogin::Subscription,
        };
        let c = expand(ask(AgentKind::Claude, None), t);
        assert_eq!(c.secret, None);
        assert_eq!(c.login, Some(LoginKind::Claude));
        assert_eq!(
            c.env[CLAUDE_TOKEN_VAR],
            LoginKind::Claude.placeholder_bearer()
        );
        let x = expand(
            ask(AgentKind::Codex, Some("https://host.ateam.internal:8790/")),
            t,
        );
        assert_eq!(x.secret, None);
        assert_eq!(x.login_file, Some(t.join("codex/auth.json")));
        let has = |kv: &str| x.command.iter().any(|a| a == kv);
        assert!(
            has("model_providers.model.requires_openai_auth=true"),
            "{:?}",
            x.command
        );
        assert!(!x.command.iter().any(|a| a.contains("env_key")));
        assert!(has(
            "chatgpt_base_url=https://host.ateam.internal:8790/backend-api/"
        ));
        assert!(has("cli_auth_credentials_store=file") && has("forced_login_method=chatgpt"));
        // The vendor's host: Codex's own ChatGPT endpoints, no provider of ateam's.
        let v = expand(ask(AgentKind::Codex, None), t);
        assert!(
            !v.command
                .iter()
                .any(|a| a.starts_with("model_provider") || a.starts_with("chatgpt_base_url"))
        );
    }
}
