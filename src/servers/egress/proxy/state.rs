//! What one proxy holds while it serves: the member's folders, the policy and intercepts in
//! force (read anew whenever their files change, and then every open connection told so),
//! its own addresses, its log, and the bound on intercepted handshakes. Here is what every
//! connection asks of it (the list, the deny list, a learning run, whose listeners count),
//! and what an intercepted connection needs of it (`intercept::Proxy`).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::dir::Dir;
use super::handshakes::Handshakes;
use super::intercept::{self as icpt, Route};
use super::policy::{Intercepts, Policy, Stamps, read_intercepts, read_policy, stamps};
use crate::core::egress::{Allowlist, Host};
use crate::core::intercept::Intercept;
use crate::core::layout;
use crate::servers::egress::InterceptFile;
use crate::servers::egress::listeners::Owners;
use crate::servers::egress::log::{self, Event, Log};

/// One proxy's state, shared by every connection it serves.
pub(super) struct State {
    /// The member's control folder: its gate's release file names the start running now.
    pub(super) ctl_dir: Dir,
    /// The policy file's folder and name.
    pub(super) policy_dir: Dir,
    pub(super) policy_name: String,
    pub(super) policy: Mutex<Policy>,
    /// `intercept.json`, beside the policy file, as last read.
    pub(super) intercept: Mutex<Intercepts>,
    pub(super) own: Mutex<Vec<IpAddr>>,
    pub(super) log: Mutex<Log>,
    /// TLS configurations per intercepted host, built once per intercept file.
    pub(super) prepared: Mutex<icpt::Cache>,
    /// Bumped whenever the policy or the intercept file is read anew: open connections look
    /// again whether what they carry is still allowed.
    pub(super) generation: tokio::sync::watch::Sender<u64>,
    /// The bound on intercepted handshakes.
    pub(super) handshakes: Mutex<Handshakes>,
}

/// The host's own addresses (every interface's), refused like loopback unless named exactly.
pub(super) fn own_addresses() -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default()
}

impl State {
    /// The stamps of the policy's files now.
    fn stamps(&self) -> Stamps {
        stamps(&self.policy_dir, &self.policy_name, &self.ctl_dir)
    }

    /// The list in force: re-read when its file changed (apply rewrites it atomically).
    pub(super) fn list(&self) -> Result<Arc<(Allowlist, Vec<Intercept>)>, String> {
        self.rules()
    }

    /// The list and the intercepts in force.
    pub(super) fn rules(&self) -> Result<Arc<(Allowlist, Vec<Intercept>)>, String> {
        let mut p = self.policy.lock().expect("policy lock");
        if self.stamps() != p.stamp {
            *p = read_policy(&self.policy_dir, &self.policy_name, &self.ctl_dir);
            self.generation.send_modify(|g| *g += 1);
        }
        p.list.clone()
    }

    /// Why `host:port` is refused whatever the list says, if the grant's `deny` names it.
    pub(super) fn denied(&self, host: &str, port: u16) -> Option<String> {
        let _ = self.rules();
        let p = self.policy.lock().expect("policy lock");
        let h = Host::parse(host)?;
        p.deny
            .allows(&h, port)
            .then(|| format!("{h}:{port} {}", log::DENIED))
    }

    /// Whether a learning run lets `host:port` past the list now (`LearnFile::learns`), the
    /// list not naming it.
    pub(super) fn learns(&self, host: &str, port: u16) -> bool {
        let Ok(rules) = self.rules() else {
            return false;
        };
        let p = self.policy.lock().expect("policy lock");
        let listed = Host::parse(host).is_some_and(|h| rules.0.allows(&h, port));
        !listed
            && p.learn
                .as_ref()
                .is_some_and(|l| l.learns(host, port, Event::now()))
    }

    /// Whose listeners on the host the member may reach, by the policy in force.
    pub(super) fn owners(&self) -> Owners {
        let mut p = self.policy.lock().expect("policy lock");
        if self.stamps() != p.stamp {
            *p = read_policy(&self.policy_dir, &self.policy_name, &self.ctl_dir);
            self.generation.send_modify(|g| *g += 1);
        }
        Owners {
            applied_by: p.owners.0.clone(),
            named: p.owners.1.clone(),
            own: rustix::process::geteuid().as_raw(),
        }
    }

    /// The intercept file in force: re-read when it changed.
    pub(super) fn intercepts(&self) -> Result<Arc<InterceptFile>, String> {
        let mut f = self.intercept.lock().expect("intercept lock");
        if self.policy_dir.stamp(layout::EGRESS_INTERCEPT_NAME) != f.stamp {
            *f = read_intercepts(&self.policy_dir);
            self.generation.send_modify(|g| *g += 1);
        }
        f.file.clone()
    }

    pub(super) fn reload(&self) {
        *self.policy.lock().expect("policy lock") =
            read_policy(&self.policy_dir, &self.policy_name, &self.ctl_dir);
        *self.intercept.lock().expect("intercept lock") = read_intercepts(&self.policy_dir);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Builds the TLS configurations of every host the policy intercepts, as the member's
    /// first CONNECT to each would; what fails is left for that CONNECT to refuse.
    pub(super) fn prepare_all(&self) {
        let (Ok(rules), Ok(file)) = (self.rules(), self.intercepts()) else {
            return;
        };
        for i in &rules.1 {
            let _ = self.prepared.lock().expect("prepared lock").get(i, &file);
        }
    }

    /// Whether a connection to `host:port` opened earlier is still allowed as it was made:
    /// intercepted with rules (`intercepted`), or tunnelled by the allowlist.
    fn still_allowed(&self, host: &str, port: u16, intercepted: bool) -> bool {
        let Ok(rules) = self.rules() else {
            return false;
        };
        if self.denied(host, port).is_some() {
            return false;
        }
        let (list, intercepts) = &*rules;
        match icpt::route(intercepts, host, port, true) {
            Route::Intercept(_) => intercepted,
            Route::Refuse(_) => false,
            Route::Tunnel => {
                !intercepted
                    && (Host::parse(host).is_some_and(|h| list.allows(&h, port))
                        || self.learns(host, port))
            }
        }
    }
}

impl icpt::Proxy for State {
    /// The intercept in force for what a connection's CONNECT asked for, with its TLS
    /// configurations and secret; `None` when that host is no longer intercepted.
    fn intercept_in_force(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Option<(Intercept, Arc<icpt::Prepared>)>, String> {
        let rules = self.rules()?;
        match icpt::route(&rules.1, host, port, true) {
            Route::Intercept(i) => {
                let file = self.intercepts()?;
                let p = self
                    .prepared
                    .lock()
                    .expect("prepared lock")
                    .get(&i, &file)?;
                Ok(Some((*i, p)))
            }
            Route::Tunnel | Route::Refuse(_) => Ok(None),
        }
    }

    /// Resolves once `host:port` is no longer allowed as its connection was made: looked at
    /// whenever the policy is read anew (at a request, and at each housekeeping tick).
    async fn revoked(&self, host: &str, port: u16, intercepted: bool) {
        let mut rx = self.generation.subscribe();
        loop {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
            if !self.still_allowed(host, port, intercepted) {
                return;
            }
        }
    }

    fn record(&self, e: Event) {
        self.log.lock().expect("log lock").write(&e);
    }
}
