//! The model's side of `agent:`: a member's agent expanded to its command, and its model
//! host added to (or, for `export`, taken out of) the member's grant. The recipes themselves
//! are `core::agents`'s; what is here reads the validated manifest.

use std::path::Path;

use crate::core::agents::{AgentKind, expand};
use crate::core::agents::{Ask, Expanded, Mode, team_tools_args};
use crate::core::intercept::Intercept;

use super::{AccessGrant, Agent, Network};

/// Whether two allow entries name the same host (the default port spelled or not).
fn same_host(a: &str, b: &str) -> bool {
    let norm = |h: &str| {
        let h = h.to_ascii_lowercase();
        h.strip_suffix(":443").map(str::to_string).unwrap_or(h)
    };
    norm(a) == norm(b)
}

impl AccessGrant {
    /// The grant with `host` (an agent's model host) added, unless it already names that
    /// host (the person's entry is kept as written, not doubled) or has an open network
    /// (which reaches it already, with no proxy). Returns whether it was added: what
    /// `agent:` expands to, which `export` takes out again.
    pub fn add_model_host(&mut self, host: Intercept) -> bool {
        match &mut self.network {
            Network::Open => false,
            Network::Allow(list) if list.iter().any(|h| same_host(h, &host.host)) => false,
            Network::Allow(list) => {
                list.push(host.host.clone());
                self.intercept.push(host);
                true
            }
            Network::None => {
                self.network = Network::Allow(vec![host.host.clone()]);
                self.intercept.push(host);
                true
            }
        }
    }

    /// The grant without the host `agent:` added (`add_model_host`): the grant as written.
    pub fn remove_model_host(&mut self, host: &str) {
        self.intercept.retain(|i| i.host != host);
        if let Network::Allow(list) = &mut self.network {
            list.retain(|h| h != host);
            if list.is_empty() {
                self.network = Network::None;
            }
        }
    }
}

impl Agent {
    /// What the agent expands to (`None`: an agent ateam does not know): its first task, or
    /// its terminal UI when it is interactive.
    pub fn expand(&self, transcripts: &Path, cwd: &Path) -> Option<Expanded> {
        let mode = if self.interactive {
            Mode::Interactive
        } else {
            Mode::Task
        };
        self.expand_as(mode, &self.task, transcripts, cwd)
    }

    /// Its command for its next `task`, in the session it had (`ateam task`).
    pub fn next_task(&self, task: &str, transcripts: &Path, cwd: &Path) -> Option<Expanded> {
        self.expand_as(Mode::Next, task, transcripts, cwd)
    }

    fn expand_as(
        &self,
        mode: Mode,
        task: &str,
        transcripts: &Path,
        cwd: &Path,
    ) -> Option<Expanded> {
        let kind = AgentKind::parse(&self.name)?;
        let ask = Ask {
            kind,
            mode,
            task,
            cwd,
            model: self.model.as_deref(),
            model_url: self.model_url.as_deref(),
            args: &self.args,
            login: self.login,
        };
        let mut x = expand(ask, transcripts);
        if self.team_tools && !x.command.is_empty() {
            // Right after the program: Claude Code's `--mcp-config` takes every value up to
            // the next flag.
            x.command.splice(1..1, team_tools_args(kind));
        }
        Some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::agents::{AgentLogin, model_host};

    fn agent(name: &str, interactive: bool) -> Agent {
        Agent {
            name: name.into(),
            task: "first".into(),
            model: None,
            model_url: Some("https://m.test:8790".into()),
            args: vec![],
            interactive,
            home: Default::default(),
            version: None,
            sha256: None,
            dir: None,
            login: Default::default(),
            team_tools: false,
            model_ca: None,
            model_host: None,
        }
    }

    #[test]
    fn a_next_task_continues_the_session_and_an_interactive_agent_runs_its_ui() {
        let (t, cwd) = (Path::new("/s/members/coder"), Path::new("/w/a \"b\""));
        let c = agent("claude", false).next_task("second", t, cwd).unwrap();
        assert_eq!(
            c.command,
            [
                "/opt/ateam-agent/claude",
                "-p",
                "--continue",
                "--dangerously-skip-permissions",
                "second"
            ]
        );
        let x = agent("codex", false).next_task("second", t, cwd).unwrap();
        assert_eq!(
            &x.command[..3],
            ["/opt/ateam-agent/codex", "exec", "--skip-git-repo-check"]
        );
        assert_eq!(
            &x.command[x.command.len() - 3..],
            ["resume", "--last", "second"]
        );
        let ui = agent("claude", true).expand(t, cwd).unwrap();
        assert_eq!(
            ui.command,
            [
                "/opt/ateam-agent/claude",
                "--dangerously-skip-permissions",
                "first"
            ]
        );
        let mut quiet = agent("codex", true);
        quiet.task.clear();
        let ui = quiet.expand(t, cwd).unwrap();
        assert_eq!(
            ui.command[..2],
            [
                "/opt/ateam-agent/codex",
                "--dangerously-bypass-approvals-and-sandbox"
            ]
        );
        assert!(
            ui.command
                .contains(&r#"projects."/w/a \"b\"".trust_level="trusted""#.to_string()),
            "{:?}",
            ui.command
        );
        assert!(!ui.command.contains(&"exec".to_string()));
        assert_ne!(ui.command.last().map(String::as_str), Some(""));
    }

    #[test]
    fn an_agent_adds_its_model_host_once_and_never_to_an_open_network() {
        let host = || model_host(AgentKind::Claude, None, AgentLogin::ApiKey, None).unwrap();
        // No network: the model host only.
        let mut g = AccessGrant::empty();
        assert!(g.add_model_host(host()));
        assert_eq!(g.network, Network::Allow(vec!["api.anthropic.com".into()]));
        assert_eq!(g.intercept, [host()]);
        // Taken out again, the grant is as written.
        g.remove_model_host("api.anthropic.com");
        assert_eq!(g, AccessGrant::empty());
        // A list without it: added at its end.
        let mut g = AccessGrant::empty();
        g.network = Network::Allow(vec!["github.com".into()]);
        assert!(g.add_model_host(host()));
        assert_eq!(
            g.network,
            Network::Allow(vec!["github.com".into(), "api.anthropic.com".into()])
        );
        g.remove_model_host("api.anthropic.com");
        assert_eq!(g.network, Network::Allow(vec!["github.com".into()]));
        assert!(g.intercept.is_empty());
        // The person's own entry for it (any spelling of the same port) is kept, not doubled.
        for theirs in ["api.anthropic.com", "API.anthropic.com:443"] {
            let mut g = AccessGrant::empty();
            g.network = Network::Allow(vec![theirs.into()]);
            assert!(!g.add_model_host(host()), "{theirs}");
            assert_eq!(g.network, Network::Allow(vec![theirs.into()]));
            assert!(g.intercept.is_empty());
        }
        // Another port is another host.
        let mut g = AccessGrant::empty();
        g.network = Network::Allow(vec!["api.anthropic.com:8443".into()]);
        assert!(g.add_model_host(host()));
        let mut g = AccessGrant::empty();
        g.network = Network::Open;
        assert!(!g.add_model_host(host()));
        assert_eq!(g.network, Network::Open);
    }
}
