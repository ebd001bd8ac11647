//! Hosts with rules in a grant's allow list: their checks, and the `core::intercept`
//! values made of them. Each problem names the field under the entry it is about
//! (`credentials.header`, `http[0].methods[1]`), for `validate` to locate.

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::paths::resolve;
use super::raw::{self, CredentialsSpec};
use crate::core::egress::{Entry, Target};
use crate::core::intercept::covers::{ports, reaches};
use crate::core::intercept::{Credential, GitRule, HttpRule, Intercept};
use crate::core::logins::LoginKind;
use crate::model::AccessGrant;

/// A problem under one entry: the field below it ("" for the entry) and what is wrong.
pub(crate) type Bad = (String, String);

/// Headers a credential may not be put in: they belong to the connection (hop-by-hop), or
/// say where or how long the request is; the proxy owns them.
const RESERVED_HEADERS: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// The intercept `r` describes, and every problem with it. `dir` is the manifest's folder
/// (a relative `upstreamCA` is read from there).
pub(crate) fn intercept_of(r: &raw::HostRules, dir: &Path, home: &Path) -> (Intercept, Vec<Bad>) {
    let mut bad: Vec<Bad> = Vec::new();
    check_host(&r.host, &mut bad);
    let credentials = r.credentials.as_ref().and_then(|c| credential(c, &mut bad));
    for (i, rule) in r.http.iter().enumerate() {
        for (j, m) in rule.methods.iter().enumerate() {
            if !is_token(m) {
                bad.push((
                    format!("http[{i}].methods[{j}]"),
                    format!("`{m}` is not an HTTP method (a token such as GET or POST)"),
                ));
            }
        }
        for (j, p) in rule.paths.iter().enumerate() {
            if let Err(e) = check_path(p) {
                bad.push((format!("http[{i}].paths[{j}]"), e));
            }
        }
    }
    if let Some(g) = &r.git {
        for (j, repo) in g.repositories.iter().enumerate() {
            if !is_repository(repo) {
                bad.push((
                    format!("git.repositories[{j}]"),
                    format!(
                        "`{repo}` is not a repository path on the host (`owner/name`, letters, digits, `.`, `_`, `-`)"
                    ),
                ));
            }
        }
    }
    let upstream_ca = r.upstream_ca.as_deref().and_then(|ca| {
        upstream_ca(ca, dir, home)
            .map_err(|e| bad.push(("upstreamCA".into(), e)))
            .ok()
    });
    let intercept = Intercept {
        host: r.host.clone(),
        credentials,
        http: r
            .http
            .iter()
            .map(|h| HttpRule {
                methods: h.methods.clone(),
                paths: h.paths.clone(),
            })
            .collect(),
        git: r.git.as_ref().map(|g| GitRule {
            repositories: g.repositories.clone(),
            push: g.push,
        }),
        upstream_ca,
    };
    (intercept, bad)
}

/// The manifest's spelling of `i` (as `export` writes it): `upstreamCA` as the PEM text.
pub(crate) fn host_rules(i: &Intercept) -> raw::HostRules {
    raw::HostRules {
        host: i.host.clone(),
        credentials: i
            .credentials
            .as_ref()
            .map(|c| Box::new(credentials_spec(c))),
        http: i
            .http
            .iter()
            .map(|h| raw::HttpRuleSpec {
                methods: h.methods.clone(),
                paths: h.paths.clone(),
            })
            .collect(),
        git: i.git.as_ref().map(|g| raw::GitSpec {
            repositories: g.repositories.clone(),
            push: g.push,
        }),
        upstream_ca: i.upstream_ca.clone(),
    }
}

/// The manifest's spelling of a credential.
fn credentials_spec(c: &Credential) -> CredentialsSpec {
    match c {
        Credential::Header { header, secret } => CredentialsSpec {
            header: Some(header.clone()),
            secret: Some(secret.clone()),
            ..CredentialsSpec::default()
        },
        Credential::Bearer { secret } => CredentialsSpec {
            bearer: Some(secret.clone()),
            ..CredentialsSpec::default()
        },
        Credential::Basic { username, secret } => CredentialsSpec {
            basic: Some(raw::BasicSpec {
                username: username.clone(),
                secret: secret.clone(),
            }),
            ..CredentialsSpec::default()
        },
        Credential::Login { login } => CredentialsSpec {
            login: Some(login.name().to_string()),
            ..CredentialsSpec::default()
        },
    }
}

/// Each secret `grant` injects that `secret_env` (a member's) does not declare, as a
/// problem: the member's variable must exist to hold the placeholder, and declaring it is
/// how a person says its value comes from apply's environment.
pub(crate) fn undeclared_secrets(grant: &AccessGrant, secret_env: &[String]) -> Vec<String> {
    grant
        .intercept
        .iter()
        .filter_map(|i| Some((i, i.credentials.as_ref()?)))
        .filter(|(_, c)| c.login().is_none() && !secret_env.iter().any(|s| s == c.secret()))
        .map(|(i, c)| {
            format!(
                "grant `{}` injects `{}` into `{}`, which this member's secretEnv does not declare; add it there (apply reads its value from its environment; the member sees only a placeholder)",
                grant.name,
                c.secret(),
                i.host
            )
        })
        .collect()
}

/// How a member's login and its grant's disagree, each as (the member's field, why): a
/// login the grant injects that the member's agent does not use (the person's login would
/// go on requests of a member nobody asked it for), and a member's login that no host of its
/// grant injects (its agent would send the placeholder to nobody who replaces it).
pub(crate) fn login_problems(
    grant: &AccessGrant,
    login: Option<LoginKind>,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let injected: Vec<(&Intercept, LoginKind)> = grant
        .intercept
        .iter()
        .filter_map(|i| Some((i, i.credentials.as_ref()?.login()?)))
        .collect();
    for (i, l) in &injected {
        if login != Some(*l) {
            out.push((
                "spec.access",
                format!(
                    "grant `{}` injects the person's {l} login into `{}`, which this member does not use: give it `agent: {{name: {l}, login: subscription}}` (its agent then holds a placeholder), or use a grant without it",
                    grant.name,
                    i.host,
                    l = l.name()
                ),
            ));
        }
    }
    if let Some(l) = login
        && !injected.iter().any(|(_, k)| *k == l)
    {
        out.push((
            "spec.agent.login",
            format!(
                "no host of grant `{}` injects the {l} login: give its model host `credentials: {{login: {l}}}` (the vendor's, or the modelUrl's host)",
                grant.name,
                l = l.name()
            ),
        ));
    }
    out
}

/// Entries of one allow list that say the same host twice where one has rules: which
/// would the proxy follow? Each as (the later entry's index, what is wrong).
pub(crate) fn overlaps(allow: &[raw::AllowEntry]) -> Vec<(usize, String)> {
    let parsed: Vec<Option<Entry>> = allow.iter().map(|a| Entry::parse(a.host()).ok()).collect();
    let mut out = Vec::new();
    for (j, later) in allow.iter().enumerate() {
        let Some(lj) = &parsed[j] else { continue };
        let earlier = (0..j).find(|&i| {
            let ruled = matches!(allow[i], raw::AllowEntry::Rules(_))
                || matches!(later, raw::AllowEntry::Rules(_));
            ruled
                && parsed[i].as_ref().is_some_and(|li| {
                    same_host(li, lj) && ports(li).iter().any(|p| lj.allows_port(*p))
                })
        });
        if let Some(i) = earlier {
            let what = match (&allow[i], later) {
                (raw::AllowEntry::Rules(_), raw::AllowEntry::Rules(_)) => "has rules twice",
                _ => "is both a plain entry and a host with rules",
            };
            out.push((
                j,
                format!(
                    "`{}` {what} (with `{}` at allow[{i}]); say each host once",
                    later.host(),
                    allow[i].host()
                ),
            ));
        }
    }
    out
}

/// The same name or address (ports aside); wildcards only as the same wildcard.
fn same_host(a: &Entry, b: &Entry) -> bool {
    match (&a.target, &b.target) {
        (Target::Below(x), Target::Below(y)) => x == y,
        (Target::Below(_), Target::Name(_) | Target::Ip(_))
        | (Target::Name(_) | Target::Ip(_), Target::Below(_)) => false,
        (Target::Name(_) | Target::Ip(_), Target::Name(_) | Target::Ip(_)) => reaches(
            &Entry {
                port: None,
                ..a.clone()
            },
            &Entry {
                port: None,
                ..b.clone()
            },
        ),
    }
}

fn check_host(host: &str, bad: &mut Vec<Bad>) {
    match Entry::parse(host) {
        Err(e) => bad.push(("host".into(), e)),
        Ok(e) => match e.target {
            Target::Below(_) => bad.push((
                "host".into(),
                format!(
                    "`{host}` is a wildcard: rules need one host (the proxy makes a certificate for each name), so list each host"
                ),
            )),
            Target::Name(_) | Target::Ip(_) => {}
        },
    }
}

fn credential(c: &CredentialsSpec, bad: &mut Vec<Bad>) -> Option<Credential> {
    let one_of = "write one of `{header: NAME, secret: VAR}`, `{bearer: VAR}`, `{basic: {username: NAME, secret: VAR}}` or `{login: claude|codex}`";
    let cred = match (&c.header, &c.secret, &c.bearer, &c.basic, &c.login) {
        (Some(header), Some(secret), None, None, None) => Credential::Header {
            header: header.clone(),
            secret: secret.clone(),
        },
        (None, None, Some(secret), None, None) => Credential::Bearer {
            secret: secret.clone(),
        },
        (None, None, None, Some(b), None) => Credential::Basic {
            username: b.username.clone(),
            secret: b.secret.clone(),
        },
        (None, None, None, None, Some(name)) => match LoginKind::parse(name) {
            Some(login) => return Some(Credential::Login { login }),
            None => {
                bad.push((
                    "credentials.login".into(),
                    format!(
                        "`{name}` is not a login ateam knows: claude (Claude Code's) or codex (Codex CLI's ChatGPT login)"
                    ),
                ));
                return None;
            }
        },
        _ => {
            bad.push((
                "credentials".into(),
                format!("one credential per host: {one_of}"),
            ));
            return None;
        }
    };
    let secret_field = match &cred {
        Credential::Header { header, .. } => {
            let lower = header.to_ascii_lowercase();
            if !is_token(header) {
                bad.push((
                    "credentials.header".into(),
                    format!("`{header}` is not a header name (a token such as x-api-key)"),
                ));
            } else if RESERVED_HEADERS.contains(&lower.as_str()) {
                bad.push((
                    "credentials.header".into(),
                    format!(
                        "`{header}` belongs to the connection, not the request: the proxy sets it; name the header the API reads the key from"
                    ),
                ));
            }
            "credentials.secret"
        }
        Credential::Bearer { .. } => "credentials.bearer",
        Credential::Login { .. } => return Some(cred),
        Credential::Basic { username, .. } => {
            if username.is_empty()
                || username.contains(':')
                || username.chars().any(char::is_control)
            {
                bad.push((
                    "credentials.basic.username".into(),
                    format!("`{username}` cannot be a basic username (not empty, no `:`)"),
                ));
            }
            "credentials.basic.secret"
        }
    };
    if let Err(e) = super::validate::check_env_name(cred.secret()) {
        bad.push((secret_field.into(), e));
    }
    Some(cred)
}

/// RFC 9110's token: what a method or a header name is made of.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!(
            "`{p}` is not a path pattern: it starts with `/` (`/v1/**`)"
        ));
    }
    if p.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(format!(
            "`{p}` holds a space, a control character, `?` or `#`: a pattern matches the path without its query"
        ));
    }
    Ok(())
}

fn is_repository(r: &str) -> bool {
    let parts: Vec<&str> = r.split('/').collect();
    parts.len() >= 2
        && parts.iter().all(|s| {
            !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
}

/// The PEM text of `ca`: itself when it is PEM (as `export` writes it), else the file it
/// names. Every certificate in it must parse; no other section is allowed.
pub(crate) fn upstream_ca(ca: &str, dir: &Path, home: &Path) -> Result<String, String> {
    let (text, name) = if ca.trim_start().starts_with("-----BEGIN") {
        (ca.to_string(), "the PEM text".to_string())
    } else {
        let path = resolve(ca, dir, home);
        let shown = format!("`{}`", path.display());
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        (text, shown)
    };
    let not_pem = || format!("{name} holds no PEM certificates (-----BEGIN CERTIFICATE-----)");
    let sections = text.matches("-----BEGIN ").count();
    let mut certs = 0;
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(text.as_bytes()) {
        let der = der.map_err(|e| format!("{name} is not valid PEM: {e}"))?;
        roots
            .add(der)
            .map_err(|e| format!("{name} holds a certificate that does not parse: {e}"))?;
        certs += 1;
    }
    match (certs, sections) {
        (0, _) => Err(not_pem()),
        (c, s) if c != s => Err(format!(
            "{name} holds PEM sections that are not certificates (a key?); keep only the CA's certificates"
        )),
        _ => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_paths_and_repositories() {
        assert!(is_token("GET") && is_token("x-api-key") && !is_token("GET ME") && !is_token(""));
        assert!(check_path("/v1/**").is_ok());
        assert!(check_path("v1/**").is_err());
        assert!(check_path("/v1?x=1").is_err());
        assert!(is_repository("acme/shop") && is_repository("group/sub/app.git"));
        assert!(!is_repository("shop") && !is_repository("acme/../x") && !is_repository("a//b"));
    }

    #[test]
    fn overlapping_entries() {
        let rules = |h: &str| {
            raw::AllowEntry::Rules(raw::HostRules {
                host: h.into(),
                credentials: None,
                http: vec![],
                git: None,
                upstream_ca: None,
            })
        };
        let o = overlaps(&["a.org".into(), rules("A.org:443")]);
        assert_eq!(o.len(), 1);
        assert!(o[0].1.contains("both a plain entry"), "{o:?}");
        assert_eq!(overlaps(&[rules("a.org:443"), rules("a.org:8443")]), vec![]);
        assert!(
            overlaps(&[rules("a.org"), rules("a.org:80")])[0]
                .1
                .contains("rules twice")
        );
        // A wildcard tunnel beside one of its hosts with rules: the rules win, no clash.
        assert_eq!(overlaps(&["*.a.org".into(), rules("x.a.org")]), vec![]);
        assert_eq!(overlaps(&["a.org".into(), "a.org".into()]), vec![]);
    }
}
