//! What the proxy does with one request to a host with rules: refuse it (and why), or let it
//! through with the credential edits to make. Pure: the proxy looks the secret's value up by
//! name and applies the edits; nothing here ever holds a real credential.

use http::HeaderMap;

use super::{Credential, GitRule, HttpRule, Intercept};
use crate::core::logins::is_token_path;

/// Headers that carry credentials: each must be absent or carry the member's placeholder,
/// and all are removed before the request goes on. Names are compared folded (`folded`):
/// `x_api_key` is `x-api-key` to WSGI, Rack and PHP.
pub(crate) const CREDENTIAL_HEADERS: [&str; 7] = [
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "x-auth-token",
    "private-token",
    "cookie",
];

/// Query parameters (compared without case) that carry credentials.
const CREDENTIAL_PARAMS: [&str; 13] = [
    "key",
    "api_key",
    "apikey",
    "api-key",
    "access_token",
    "token",
    "auth",
    "auth_token",
    "private_token",
    "client_secret",
    "password",
    "sig",
    "signature",
];

/// Headers and query parameters through which common servers take another method than the
/// request line's (Google APIs, Express's method-override, Symfony, Laravel): each value
/// must pass the rules as the method itself would. Compared folded.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// A header's name as servers that fold spellings see it: lower case, `_` as `-` (CGI-style
/// servers map both to one variable; nginx drops one of them, others keep both).
pub(crate) fn folded(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'_' => '-',
            b => b.to_ascii_lowercase() as char,
        })
        .collect()
}

/// `path` without its path parameters: `;...` cut from every segment, as Java servlet
/// containers (JGit, Gerrit, Bitbucket Server) and other matrix-parameter servers read it.
pub(crate) fn without_params(path: &str) -> String {
    path.split('/')
        .map(|seg| seg.split(';').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/")
}

/// git's two smart-HTTP services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitService {
    /// `git-upload-pack`: fetch and clone.
    UploadPack,
    /// `git-receive-pack`: push.
    ReceivePack,
}

impl GitService {
    /// The service's name, as in `?service=` and the path.
    pub fn name(self) -> &'static str {
        match self {
            GitService::UploadPack => "git-upload-pack",
            GitService::ReceivePack => "git-receive-pack",
        }
    }
}

/// A git smart-HTTP request: which repository (as in the path, without the leading `/`),
/// which service, and whether it is the advertisement (`info/refs`) git prints errors of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GitRequest {
    /// The repository's path, `.git` and all if the request has it.
    pub repo: String,
    /// Fetch or push.
    pub service: GitService,
    /// It is the `info/refs` advertisement, not the service's `POST`.
    pub advertisement: bool,
}

/// The judge's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Send it on: remove every header of `remove` (lower case), then set the credential.
    Allowed {
        /// Headers to remove (lower case): with a credential to inject, every credential
        /// header and the injected one, so the placeholder never goes upstream; else none.
        remove: Vec<String>,
        /// The credential to set; `None`: the host has none, and the request goes as sent.
        inject: Option<Credential>,
    },
    /// Answer it here. `git`: a refused git advertisement, answered so that git prints it.
    Refused {
        /// The HTTP status to answer with.
        status: u16,
        /// Why, for the member and the egress log.
        reason: String,
        /// The service of a refused advertisement.
        git: Option<GitService>,
    },
}

fn refused(status: u16, reason: impl Into<String>) -> Verdict {
    Verdict::Refused {
        status,
        reason: reason.into(),
        git: None,
    }
}

/// Judges one request to `i.host` (`port`: the port intercepted). `target` is the request
/// target as sent (origin-form expected), `headers` its headers.
pub fn judge(i: &Intercept, port: u16, method: &str, target: &str, headers: &HeaderMap) -> Verdict {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    if let Err(why) = safe_path(path) {
        return refused(400, why);
    }
    if let Err(why) = framing(headers) {
        return refused(400, why);
    }
    if let Err(why) = host_header(i, port, headers) {
        return refused(403, why);
    }
    // Every method an upstream may act on (the line's and each override's), on every form of
    // the path an upstream may read (as sent, and without `;` parameters), passes the rules.
    let overrides = match method_overrides(headers, query) {
        Ok(o) => o,
        Err(why) => return refused(400, why),
    };
    let plain = without_params(path);
    for m in std::iter::once(method).chain(overrides.iter().map(String::as_str)) {
        // TRACE (and IIS's TRACK) answers with the request as the upstream got it: with the
        // injected credential in it.
        if ["TRACE", "TRACK"].iter().any(|t| t.eq_ignore_ascii_case(m)) {
            return refused(
                405,
                format!(
                    "{m} is refused on a host with rules: its answer would echo the credential"
                ),
            );
        }
        for p in [path, plain.as_str()] {
            if let Err(v) = rules(i, m, p, query) {
                return v;
            }
        }
    }
    let Some(cred) = &i.credentials else {
        return Verdict::Allowed {
            remove: Vec::new(),
            inject: None,
        };
    };
    // The request that carries the real token may not be a refresh or revocation: ateam
    // alone refreshes a login.
    if let Some(login) = cred.login()
        && is_token_path(path)
    {
        return refused(
            403,
            format!(
                "{method} {path} is a token endpoint: ateam alone refreshes the {} login (the member holds a placeholder)",
                login.name()
            ),
        );
    }
    let ph = cred.placeholder();
    if let Err(why) = foreign_credentials(cred, &ph, headers, query) {
        return refused(403, why);
    }
    let mut remove: Vec<String> = CREDENTIAL_HEADERS.iter().map(|h| h.to_string()).collect();
    match cred {
        Credential::Header { header, .. } => remove.push(header.to_ascii_lowercase()),
        Credential::Login { login } => remove.extend(login.account_header().map(str::to_string)),
        Credential::Bearer { .. } | Credential::Basic { .. } => {}
    }
    // Every other spelling of them the request carries (`x_api_key`) goes too.
    let wanted: Vec<String> = remove.iter().map(|n| folded(n)).collect();
    for name in headers.keys() {
        let n = name.as_str();
        if !remove.iter().any(|r| r == n) && wanted.contains(&folded(n)) {
            remove.push(n.to_string());
        }
    }
    Verdict::Allowed {
        remove,
        inject: Some(cred.clone()),
    }
}

/// The methods the request's override headers and parameters name (upper case), in any
/// spelling a server folds to one of `METHOD_OVERRIDES` or `_method`.
fn method_overrides(headers: &HeaderMap, query: Option<&str>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (name, v) in headers {
        if METHOD_OVERRIDES.contains(&folded(name.as_str()).as_str()) {
            let v = v
                .to_str()
                .map_err(|_| format!("header {name} is not a method"))?;
            out.push(v.trim().to_ascii_uppercase());
        }
    }
    for kv in query.unwrap_or("").split(['&', ';']) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let k = folded(&percent_decoded(k));
        if k == folded("_method") || METHOD_OVERRIDES.contains(&k.as_str()) {
            out.push(percent_decoded(v).trim().to_ascii_uppercase());
        }
    }
    Ok(out)
}

/// The header a credential becomes, given the secret's real value: (name, value).
pub fn injected(c: &Credential, value: &str) -> (String, String) {
    use base64::Engine;
    match c {
        Credential::Header { header, .. } => (header.to_ascii_lowercase(), value.to_string()),
        Credential::Bearer { .. } | Credential::Login { .. } => {
            ("authorization".into(), format!("Bearer {value}"))
        }
        Credential::Basic { username, .. } => (
            "authorization".into(),
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{value}"))
            ),
        ),
    }
}

/// Origin-form, no dot segments, no encoded `/`, `.`, `\` or NUL, no `//`: what a glob sees
/// is what the upstream serves. Upstreams differ in what they undo (a second decoding, `;`
/// parameters dropped by Java servers, `\` taken for `/`, overlong UTF-8 by old decoders),
/// so the path is also decoded up to three times and each form must be as plain.
fn safe_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("the request target must be a path (origin-form)".into());
    }
    let lower = path.to_ascii_lowercase();
    for enc in ["%2f", "%2e", "%5c", "%00"] {
        if lower.contains(enc) {
            return Err(format!("the path carries an encoded `{enc}`"));
        }
    }
    if path.contains("//") {
        return Err("the path has an empty segment (`//`)".into());
    }
    let slashes = path.bytes().filter(|b| *b == b'/').count();
    let mut form = path.as_bytes().to_vec();
    for _ in 0..4 {
        let Ok(text) = std::str::from_utf8(&form) else {
            return Err("the path decodes to bytes that are not UTF-8 (overlong or bad)".into());
        };
        if text.chars().any(|c| c == '\\' || c.is_control()) {
            return Err("the path carries a `\\` or a control character, maybe encoded".into());
        }
        if text.bytes().filter(|b| *b == b'/').count() != slashes {
            return Err("the path carries an encoded `/` (encoded more than once)".into());
        }
        // `..;x` is `..` to a server that drops path parameters.
        let dot = |seg: &str| matches!(seg.split(';').next(), Some("." | ".."));
        if text.split('/').any(dot) {
            return Err("the path has a `.` or `..` segment, maybe encoded or with `;`".into());
        }
        let next = percent_decoded_bytes(text.as_bytes(), false);
        if next == form {
            break;
        }
        form = next;
    }
    Ok(())
}

/// A request whose length two parsers could read differently is refused, not re-framed:
/// `Transfer-Encoding` with `Content-Length` (the classic smuggling pair), or more than one
/// `Transfer-Encoding`.
fn framing(headers: &HeaderMap) -> Result<(), String> {
    let te = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .count();
    if te > 0 && headers.contains_key(http::header::CONTENT_LENGTH) {
        return Err("the request has both Transfer-Encoding and Content-Length".into());
    }
    if te > 1 {
        return Err("the request has more than one Transfer-Encoding header".into());
    }
    Ok(())
}

/// The intercepted host's name (lower case, no trailing dot).
fn host_name(i: &Intercept) -> String {
    let h = match i.host.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => i.host.as_str(),
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

fn host_header(i: &Intercept, port: u16, headers: &HeaderMap) -> Result<(), String> {
    let mut all = headers.get_all(http::header::HOST).iter();
    let Some(v) = all.next() else {
        return Ok(());
    };
    // Which one counts differs between servers: a second Host could steer the request, and
    // its credential, to another site behind the same front end.
    if all.next().is_some() {
        return Err("the request has more than one Host header".into());
    }
    let want = host_name(i);
    let v = v.to_str().unwrap_or("").to_ascii_lowercase();
    let (name, p) = match v.rsplit_once(':') {
        Some((n, p)) if !p.contains(']') => (n, p.parse::<u16>().ok()),
        _ => (v.as_str(), Some(443)),
    };
    if name.trim_end_matches('.') == want && p == Some(port) {
        Ok(())
    } else {
        Err(format!(
            "the Host header names another host than {want}:{port}"
        ))
    }
}

/// Whether the rules allow it; the error is the refusal.
fn rules(i: &Intercept, method: &str, path: &str, query: Option<&str>) -> Result<(), Verdict> {
    if i.http.is_empty() && i.git.is_none() {
        return Ok(());
    }
    // `push: false` is a promise: a push is judged by the git rule alone, never let through
    // by an http rule that happens to cover its path.
    if let Some(rule) = &i.git
        && looks_like_push(path, query)
    {
        let reason = match git_request(method, path, query) {
            Some(g) if g.service == GitService::ReceivePack => match git_allows(rule, &g) {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            },
            _ => format!(
                "{method} {path} names git-receive-pack in a form git does not send; refused as a push"
            ),
        };
        return Err(Verdict::Refused {
            status: 403,
            reason,
            git: (method == "GET").then_some(GitService::ReceivePack),
        });
    }
    if i.http.iter().any(|r| http_allows(r, method, path)) {
        return Ok(());
    }
    let host = host_name(i);
    if let (Some(rule), Some(g)) = (&i.git, git_request(method, path, query)) {
        return match git_allows(rule, &g) {
            Ok(()) => Ok(()),
            Err(reason) => Err(Verdict::Refused {
                status: 403,
                reason,
                git: g.advertisement.then_some(g.service),
            }),
        };
    }
    let what = if i.git.is_some() && i.http.is_empty() {
        NOT_GIT.to_string()
    } else {
        format!(
            "{OUTSIDE_RULES} ({})",
            i.http.iter().map(show_rule).collect::<Vec<_>>().join("; ")
        )
    };
    Err(refused(403, format!("{method} {path} on {host} {what}")))
}

/// The words of a refusal by a host's http rules.
const OUTSIDE_RULES: &str = "is outside the http rules";
/// The words of a refusal by a host whose only rule is `git`.
const NOT_GIT: &str = "is not git smart HTTP, the only thing allowed";

/// Whether the proxy's `reason` is a refusal by a host's rules (no rule matched), not by a
/// header, an override or the git rule's repositories.
pub(crate) fn refused_by_rules(reason: &str) -> bool {
    reason.contains(OUTSIDE_RULES) || reason.contains(NOT_GIT)
}

/// Whether `i`'s rules let `method path` through (the path as logged, without its query),
/// judged as the proxy judges a request without headers: what an approval of one request
/// asks of the rules, and whether a rule added for it would be enough.
pub(crate) fn rules_allow(i: &Intercept, method: &str, path: &str) -> bool {
    safe_path(path).is_ok()
        && rules(i, method, path, None).is_ok()
        && rules(i, method, &without_params(path), None).is_ok()
}

fn show_rule(r: &HttpRule) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "any".to_string()
        } else {
            v.join(",")
        }
    };
    format!("methods {} paths {}", list(&r.methods), list(&r.paths))
}

fn http_allows(r: &HttpRule, method: &str, path: &str) -> bool {
    (r.methods.is_empty() || r.methods.iter().any(|m| m.eq_ignore_ascii_case(method)))
        && (r.paths.is_empty() || r.paths.iter().any(|g| glob(g.as_bytes(), path.as_bytes())))
}

/// `*`: any bytes but `/`; `**`: any bytes.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    match pat {
        [] => s.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=s.len()).any(|k| glob(rest, &s[k..])),
        [b'*', rest @ ..] => {
            let seg = s.iter().position(|b| *b == b'/').unwrap_or(s.len());
            (0..=seg).any(|k| glob(rest, &s[k..]))
        }
        [c, rest @ ..] => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// Whether an upstream could take this for a push: `git-receive-pack` as the path's last
/// segment or as any `service` value, once decoded and whatever the case (git http-backend
/// decodes both, and takes the last of two `service` parameters).
fn looks_like_push(path: &str, query: Option<&str>) -> bool {
    // `git-receive-pack;x` (or `%3Bx`) is a push to a server that drops path parameters.
    let is = |s: &str| {
        let d = percent_decoded(s);
        d.split(';')
            .next()
            .unwrap_or("")
            .eq_ignore_ascii_case("git-receive-pack")
    };
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    is(last)
        || query.unwrap_or("").split(['&', ';']).any(|kv| {
            kv.split_once('=')
                .is_some_and(|(k, v)| percent_decoded(k).eq_ignore_ascii_case("service") && is(v))
        })
}

/// A smart-HTTP request of git on `/owner/name[.git]`, if it is one.
pub(crate) fn git_request(method: &str, path: &str, query: Option<&str>) -> Option<GitRequest> {
    let service = |s: &str| match s {
        "git-upload-pack" => Some(GitService::UploadPack),
        "git-receive-pack" => Some(GitService::ReceivePack),
        _ => None,
    };
    let (repo, service, advertisement) = if let Some(repo) = path.strip_suffix("/info/refs") {
        if method != "GET" {
            return None;
        }
        let s = query?
            .split('&')
            .find_map(|kv| kv.strip_prefix("service="))
            .and_then(service)?;
        (repo, s, true)
    } else {
        let (repo, last) = path.rsplit_once('/')?;
        if method != "POST" {
            return None;
        }
        (repo, service(last)?, false)
    };
    let repo = repo.strip_prefix('/')?;
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some(GitRequest {
        repo: repo.to_string(),
        service,
        advertisement,
    })
}

fn git_allows(rule: &GitRule, g: &GitRequest) -> Result<(), String> {
    let bare = |r: &str| r.strip_suffix(".git").unwrap_or(r).to_string();
    if !rule.repositories.is_empty()
        && !rule
            .repositories
            .iter()
            .any(|r| bare(r.trim_matches('/')) == bare(&g.repo))
    {
        return Err(format!(
            "repository {} is not in the git rule's repositories ({})",
            g.repo,
            rule.repositories.join(", ")
        ));
    }
    match g.service {
        GitService::UploadPack => Ok(()),
        GitService::ReceivePack if rule.push => Ok(()),
        GitService::ReceivePack => Err(format!(
            "push to {} is refused: the git rule allows fetch only (push: false)",
            g.repo
        )),
    }
}

/// Every credential the request carries must be the member's placeholder.
fn foreign_credentials(
    cred: &Credential,
    ph: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(), String> {
    let configured = match cred {
        Credential::Header { header, .. } => Some(header.to_ascii_lowercase()),
        Credential::Bearer { .. } | Credential::Basic { .. } | Credential::Login { .. } => None,
    };
    let wanted: Vec<String> = CREDENTIAL_HEADERS
        .iter()
        .copied()
        .chain(configured.as_deref())
        .map(folded)
        .collect();
    for (name, v) in headers {
        if wanted.contains(&folded(name.as_str())) && !carries_placeholder(v.as_bytes(), ph) {
            return Err(format!(
                "header {name} carries a credential that is not this member's"
            ));
        }
    }
    // `;` separates parameters too, for some servers.
    for kv in query.unwrap_or("").split(['&', ';']) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        // `ap%69_key` is `api_key` to the upstream.
        let k = percent_decoded(k);
        if CREDENTIAL_PARAMS.iter().any(|p| p.eq_ignore_ascii_case(&k)) && v != ph {
            return Err(format!(
                "query parameter {k} carries a credential that is not this member's"
            ));
        }
    }
    Ok(())
}

/// `s` with its `%XX` escapes and `+` decoded (bytes that are not UTF-8 become U+FFFD).
fn percent_decoded(s: &str) -> String {
    String::from_utf8_lossy(&percent_decoded_bytes(s.as_bytes(), true)).into_owned()
}

/// `b` with its `%XX` escapes decoded (and `+` as a space, in a query: `plus`).
fn percent_decoded_bytes(b: &[u8], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(if plus && b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    out
}

fn carries_placeholder(v: &[u8], ph: &str) -> bool {
    use base64::Engine;
    let Ok(v) = std::str::from_utf8(v) else {
        return false;
    };
    let v = v.trim();
    if v == ph {
        return true;
    }
    let Some((scheme, rest)) = v.split_once(' ') else {
        return false;
    };
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return rest == ph;
    }
    if scheme.eq_ignore_ascii_case("basic") {
        return base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .is_some_and(|up| up.split_once(':').is_some_and(|(_, p)| p == ph));
    }
    false
}

#[cfg(test)]
mod tests;
