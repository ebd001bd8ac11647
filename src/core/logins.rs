//! Subscription logins: the person's Claude or ChatGPT login (made on the host with the
//! agent's own login, or a token), used by members that never hold it. Pure: what a login
//! is, how the agents' own credential files read, what a member holds instead (a
//! placeholder shaped as its agent expects), when ateam refreshes, what a refresh asks and
//! answers. The store, the lock and the network are `crate::logins`'.
//!
//! One owner: refresh tokens rotate on use, so once imported a login is ateam's alone
//! (`ateam login import`); a member's own call to a token endpoint is refused by its proxy
//! (`refused_host`, `is_token_path`).

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Whose login: the agent it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoginKind {
    /// A Claude (claude.ai) login of Claude Code: `~/.claude/.credentials.json`, or a token
    /// from `claude setup-token`.
    Claude,
    /// A ChatGPT login of Codex CLI: `~/.codex/auth.json`.
    Codex,
}

/// Both kinds, in a fixed order.
pub const KINDS: [LoginKind; 2] = [LoginKind::Claude, LoginKind::Codex];

/// The hosts where the agents' logins are made and refreshed. A member that uses a login
/// reaches none of them, by any route and on any port: ateam alone refreshes.
pub(crate) const TOKEN_HOSTS: [&str; 4] = [
    "platform.claude.com",
    "console.anthropic.com",
    "auth.openai.com",
    "auth.api.openai.org",
];

/// Codex's placeholder tokens expire on 2100-01-01: Codex refreshes a token whose `exp` has
/// passed, never this one.
const FAR_FUTURE: u64 = 4_102_444_800;
/// When Codex's placeholder tokens say they were issued (2026-01-01): fixed, so that the
/// placeholder is one value the proxy can recognise.
const PLACEHOLDER_ISSUED: u64 = 1_767_225_600;

/// The ChatGPT claims of an OpenAI token (`chatgpt_account_id`, `chatgpt_plan_type`).
const OPENAI_AUTH_CLAIM: &str = "https://api.openai.com/auth";

impl LoginKind {
    /// By its name (`claude`, `codex`), in a manifest or on the command line.
    pub fn parse(name: &str) -> Option<LoginKind> {
        match name {
            "claude" => Some(LoginKind::Claude),
            "codex" => Some(LoginKind::Codex),
            _ => None,
        }
    }

    /// How manifests and the command line spell it.
    pub fn name(self) -> &'static str {
        match self {
            LoginKind::Claude => "claude",
            LoginKind::Codex => "codex",
        }
    }

    /// The name its access token has among a proxy's injected values (`intercept.json`). Not
    /// a variable name (`:`), so no `secretEnv` can be it.
    pub(crate) fn secret_name(self) -> &'static str {
        match self {
            LoginKind::Claude => "login:claude",
            LoginKind::Codex => "login:codex",
        }
    }

    /// The name of its account id among a proxy's injected values, for a login whose
    /// requests name the account (Codex's `chatgpt-account-id`).
    pub(crate) fn account_secret_name(self) -> Option<&'static str> {
        match self {
            LoginKind::Claude => None,
            LoginKind::Codex => Some("login:codex:account"),
        }
    }

    /// The header that names the account, set by the proxy with the real id.
    pub(crate) fn account_header(self) -> Option<&'static str> {
        match self {
            LoginKind::Claude => None,
            LoginKind::Codex => Some("chatgpt-account-id"),
        }
    }

    /// Where the vendor refreshes it (`ateam login import --token-url` names another).
    pub(crate) fn default_token_url(self) -> &'static str {
        match self {
            LoginKind::Claude => "https://platform.claude.com/v1/oauth/token",
            LoginKind::Codex => "https://auth.openai.com/oauth/token",
        }
    }

    /// The OAuth client the agent's login was made with (its refresh must name it).
    pub(crate) fn client_id(self) -> &'static str {
        match self {
            LoginKind::Claude => "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
            LoginKind::Codex => "app_EMoamEEZ73f0CkXaXp7hrann",
        }
    }

    /// Where the agent keeps its login on the host, below the person's home.
    pub fn default_file(self) -> &'static str {
        match self {
            LoginKind::Claude => ".claude/.credentials.json",
            LoginKind::Codex => ".codex/auth.json",
        }
    }

    /// What the member sends as its bearer token: shaped as the agent's own (Claude Code
    /// takes `sk-ant-oat01-` for an OAuth token; Codex a JWT), worth nothing anywhere.
    pub(crate) fn placeholder_bearer(self) -> String {
        match self {
            LoginKind::Claude => "sk-ant-oat01-ateam-placeholder".to_string(),
            LoginKind::Codex => jwt(&serde_json::json!({
                "iss": "https://auth.openai.com",
                "sub": "ateam-placeholder",
                "iat": PLACEHOLDER_ISSUED,
                "exp": FAR_FUTURE,
                OPENAI_AUTH_CLAIM: {"chatgpt_account_id": PLACEHOLDER_ACCOUNT},
            })),
        }
    }
}

/// The account id a member's Codex names (the proxy puts the real one in its place).
pub(crate) const PLACEHOLDER_ACCOUNT: &str = "ateam-placeholder-account";

/// A JWT of `claims`, signed by nobody (`alg: none` would make some parsers refuse it, so
/// the header says RS256 and the signature is a placeholder: nothing here verifies it).
fn jwt(claims: &serde_json::Value) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = br#"{"alg":"RS256","typ":"JWT","kid":"ateam-placeholder"}"#;
    format!(
        "{}.{}.{}",
        b64(header),
        b64(claims.to_string().as_bytes()),
        b64(b"ateam-placeholder-signature")
    )
}

/// The claims of a JWT, unverified (ateam reads its own login's expiry and account).
pub(crate) fn jwt_claims(token: &str) -> Option<serde_json::Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Codex's `auth.json` for a member: the shape Codex reads for a ChatGPT login, every token a
/// placeholder (far-future expiry, so Codex never refreshes), `last_refresh` now (`now_rfc3339`),
/// and `plan` (the person's plan type, which Codex shows and may choose models by).
pub(crate) fn codex_placeholder_auth(now_rfc3339: &str, plan: Option<&str>) -> String {
    let auth = serde_json::json!({
        "chatgpt_account_id": PLACEHOLDER_ACCOUNT,
        "chatgpt_plan_type": plan.unwrap_or("plus"),
        "chatgpt_user_id": "ateam-placeholder-user",
        "user_id": "ateam-placeholder-user",
    });
    let id_token = jwt(&serde_json::json!({
        "iss": "https://auth.openai.com",
        "aud": [LoginKind::Codex.client_id()],
        "sub": "ateam-placeholder",
        "email": "member@ateam.invalid",
        "email_verified": true,
        "iat": PLACEHOLDER_ISSUED,
        "exp": FAR_FUTURE,
        OPENAI_AUTH_CLAIM: auth,
    }));
    let doc = serde_json::json!({
        "auth_mode": "chatgpt",
        "OPENAI_API_KEY": null,
        "tokens": {
            "id_token": id_token,
            "access_token": LoginKind::Codex.placeholder_bearer(),
            "refresh_token": "ateam-placeholder-refresh-token",
            "account_id": PLACEHOLDER_ACCOUNT,
        },
        "last_refresh": now_rfc3339,
    });
    serde_json::to_string_pretty(&doc).expect("a JSON value always serializes")
}

/// The variable Claude Code reads an OAuth token from: the member's holds the placeholder.
pub(crate) const CLAUDE_TOKEN_VAR: &str = "CLAUDE_CODE_OAUTH_TOKEN";

/// Why a member may not reach `host` (a name as a request gave it), when it uses a login:
/// where logins are refreshed, ateam alone goes.
pub(crate) fn refused_host(host: &str) -> Option<String> {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    TOKEN_HOSTS.contains(&h.as_str()).then(|| {
        format!(
            "{h} is where subscription logins are refreshed: ateam alone refreshes this member's login (it holds a placeholder)"
        )
    })
}

/// Whether `path` (without its query) is a token or revocation endpoint: refused on the
/// host that carries a login, whose requests get the real token.
pub(crate) fn is_token_path(path: &str) -> bool {
    let p = path.trim_end_matches('/').to_ascii_lowercase();
    p.ends_with("/oauth/token") || p.ends_with("/oauth/revoke")
}

/// A login as ateam keeps it (`<state>/logins/<kind>.json`, 0600): the tokens, when the
/// access token ends, where it is refreshed, and how the last refresh went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Login {
    /// Whose.
    pub kind: LoginKind,
    /// What the proxy injects.
    pub access_token: String,
    /// What a refresh spends (rotated by each); none: a token that is not refreshed (`claude
    /// setup-token`'s, valid for a year).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token ends, in milliseconds since the epoch; none: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// When this access token was obtained (imported or refreshed), in milliseconds.
    pub obtained_at: u64,
    /// The ChatGPT account (Codex), injected as `chatgpt-account-id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Codex's id token (it carries the plan), kept as the last refresh gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
    /// The scopes to ask for at a refresh (Claude).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Claude's subscription type, as its file said (shown by `ateam login status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<String>,
    /// Where it is refreshed.
    pub token_url: String,
    /// PEM certificates trusted for `token_url` besides the machine's roots (a test's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ca: Option<String>,
    /// The file it was imported from (or `-`).
    pub imported_from: String,
    /// Refreshes since the import.
    #[serde(default)]
    pub refreshes: u64,
    /// Refreshes that failed in a row, and the last one's reason and time.
    #[serde(default)]
    pub failures: u32,
    /// Why the last refresh failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it failed (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<u64>,
    /// The provider refused the refresh token itself: only a new import helps.
    #[serde(default)]
    pub refused: bool,
}

/// Why an agent's credential file cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Not JSON, or not the agent's shape.
    #[error("{0}")]
    Shape(String),
}

fn shape(why: impl Into<String>) -> ImportError {
    ImportError::Shape(why.into())
}

/// A login read from the agent's own file (`bytes`), as it comes: Claude Code's
/// `.credentials.json` (`claudeAiOauth`) or a bare token of `claude setup-token`; Codex's
/// `auth.json` (`tokens`). `now` in milliseconds.
pub fn import(
    kind: LoginKind,
    bytes: &[u8],
    from: &str,
    token_url: Option<&str>,
    token_ca: Option<String>,
    now: u64,
) -> Result<Login, ImportError> {
    let text = std::str::from_utf8(bytes).map_err(|_| shape("the file is not UTF-8 text"))?;
    let mut login = Login {
        kind,
        access_token: String::new(),
        refresh_token: None,
        expires_at: None,
        obtained_at: now,
        account_id: None,
        id_token: None,
        scopes: Vec::new(),
        subscription: None,
        token_url: token_url.unwrap_or(kind.default_token_url()).to_string(),
        token_ca,
        imported_from: from.to_string(),
        refreshes: 0,
        failures: 0,
        last_error: None,
        failed_at: None,
        refused: false,
    };
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        return match kind {
            LoginKind::Claude if is_token(trimmed) => {
                login.access_token = trimmed.to_string();
                Ok(login)
            }
            LoginKind::Claude => Err(shape(
                "neither Claude Code's .credentials.json (JSON) nor a token of `claude setup-token` (one line, sk-ant-oat01-...)",
            )),
            LoginKind::Codex => Err(shape("not Codex's auth.json: it is not JSON")),
        };
    }
    let doc: serde_json::Value = serde_json::from_str(trimmed)
        .map_err(|e| shape(format!("not JSON (line {}): {e}", e.line())))?;
    match kind {
        LoginKind::Claude => claude_file(&doc, &mut login)?,
        LoginKind::Codex => codex_file(&doc, &mut login)?,
    }
    if !is_token(&login.access_token)
        || login.refresh_token.as_deref().is_some_and(|r| !is_token(r))
    {
        return Err(shape("a token holds spaces or control characters"));
    }
    Ok(login)
}

/// One printable word: what a token is (and what may go in a header).
fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic())
}

fn str_at<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_json::Value::as_str)
}

fn claude_file(doc: &serde_json::Value, login: &mut Login) -> Result<(), ImportError> {
    let o = doc.get("claudeAiOauth").ok_or_else(|| {
        shape("not Claude Code's .credentials.json: it has no `claudeAiOauth` (log in with `claude` first, or import a token of `claude setup-token`)")
    })?;
    login.access_token = str_at(o, "accessToken")
        .ok_or_else(|| shape("`claudeAiOauth.accessToken` is missing"))?
        .to_string();
    login.refresh_token = str_at(o, "refreshToken").map(str::to_string);
    login.expires_at = o.get("expiresAt").and_then(serde_json::Value::as_u64);
    login.scopes = o
        .get("scopes")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    login.subscription = str_at(o, "subscriptionType").map(str::to_string);
    Ok(())
}

fn codex_file(doc: &serde_json::Value, login: &mut Login) -> Result<(), ImportError> {
    let Some(t) = doc.get("tokens").filter(|t| t.is_object()) else {
        return Err(shape(if str_at(doc, "OPENAI_API_KEY").is_some() {
            "this auth.json holds an API key, not a ChatGPT login: give the key as `secretEnv: [OPENAI_API_KEY]` instead"
        } else {
            "not Codex's auth.json: it has no `tokens` (log in with `codex login` first)"
        }));
    };
    login.access_token = str_at(t, "access_token")
        .ok_or_else(|| shape("`tokens.access_token` is missing"))?
        .to_string();
    login.refresh_token = Some(
        str_at(t, "refresh_token")
            .ok_or_else(|| shape("`tokens.refresh_token` is missing"))?
            .to_string(),
    );
    login.id_token = str_at(t, "id_token").map(str::to_string);
    login.account_id = str_at(t, "account_id").map(str::to_string).or_else(|| {
        login
            .id_token
            .as_deref()
            .and_then(chatgpt_claim("chatgpt_account_id"))
    });
    if login.account_id.is_none() {
        return Err(shape(
            "no ChatGPT account id (neither `tokens.account_id` nor the id token's chatgpt_account_id)",
        ));
    }
    login.expires_at = token_expiry(&login.access_token);
    Ok(())
}

/// A ChatGPT claim of an OpenAI token (`chatgpt_account_id`, `chatgpt_plan_type`).
fn chatgpt_claim(name: &'static str) -> impl Fn(&str) -> Option<String> {
    move |token| {
        jwt_claims(token)?
            .get(OPENAI_AUTH_CLAIM)?
            .get(name)?
            .as_str()
            .map(str::to_string)
    }
}

/// The plan a Codex login is on, from its id token (`chatgpt_plan_type`).
pub(crate) fn codex_plan(login: &Login) -> Option<String> {
    login
        .id_token
        .as_deref()
        .and_then(chatgpt_claim("chatgpt_plan_type"))
}

/// A JWT's `exp`, in milliseconds.
fn token_expiry(token: &str) -> Option<u64> {
    jwt_claims(token)?
        .get("exp")?
        .as_u64()
        .map(|s| s.saturating_mul(1000))
}

/// Refreshed ahead of its end by half its life, at most 5 minutes: a token of 8 hours at 7 h
/// 55 min, a test's of 8 s at 4 s.
const MARGIN_MAX_MS: u64 = 5 * 60 * 1000;
/// After a failed refresh, the next try waits 5 s, doubling, up to 5 minutes.
const RETRY_FIRST_MS: u64 = 5_000;
const RETRY_MAX_MS: u64 = 5 * 60 * 1000;

/// When ateam refreshes `login` next (ms); none: never (no refresh token, an unknown expiry,
/// or a refresh token the provider refused).
pub fn refresh_at(login: &Login) -> Option<u64> {
    let _ = login.refresh_token.as_ref()?;
    if login.refused {
        return None;
    }
    let end = login.expires_at?;
    let life = end.saturating_sub(login.obtained_at);
    let due = end.saturating_sub((life / 2).min(MARGIN_MAX_MS));
    let retry = login.failed_at.map(|at| {
        let wait = RETRY_FIRST_MS
            .saturating_mul(1u64 << login.failures.saturating_sub(1).min(16))
            .min(RETRY_MAX_MS);
        at.saturating_add(wait)
    });
    Some(match retry {
        Some(r) if login.failures > 0 => due.max(r),
        _ => due,
    })
}

/// The body of a refresh of `login` (JSON, as each agent sends its own).
pub(crate) fn refresh_body(login: &Login, refresh_token: &str) -> serde_json::Value {
    let mut body = serde_json::json!({
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": login.kind.client_id(),
    });
    if login.kind == LoginKind::Claude && !login.scopes.is_empty() {
        body["scope"] = serde_json::Value::String(login.scopes.join(" "));
    }
    body
}

/// How a refresh ended, from the provider's answer (`status`, `body`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// The login with its new tokens.
    Done(Box<Login>),
    /// The provider refused the refresh token itself (used, revoked, expired): only a new
    /// import helps.
    Refused(String),
    /// Anything else (a server error, an answer that does not parse): try again later.
    Failed(String),
}

/// The login after the provider answered a refresh at `now` (ms). A new refresh token
/// replaces the old (rotated); without one, the old stays.
pub fn refreshed(login: &Login, status: u16, body: &[u8], now: u64) -> Refreshed {
    let doc: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if status != 200 {
        let error = doc
            .as_ref()
            .and_then(|d| {
                str_at(d, "error")
                    .or_else(|| d.get("error").and_then(|e| str_at(e, "type")))
                    .map(str::to_string)
            })
            .unwrap_or_default();
        let why = format!("the token endpoint answered {status} {error}");
        let spent = matches!(status, 400 | 401)
            && matches!(
                error.as_str(),
                "invalid_grant"
                    | "refresh_token_reused"
                    | "refresh_token_expired"
                    | "refresh_token_invalidated"
            );
        return if spent {
            Refreshed::Refused(why.trim_end().to_string())
        } else {
            Refreshed::Failed(why.trim_end().to_string())
        };
    }
    let Some(doc) = doc else {
        return Refreshed::Failed("the token endpoint's answer is not JSON".into());
    };
    let Some(access) = str_at(&doc, "access_token").filter(|a| is_token(a)) else {
        return Refreshed::Failed("the token endpoint's answer has no access_token".into());
    };
    let mut next = login.clone();
    next.access_token = access.to_string();
    if let Some(r) = str_at(&doc, "refresh_token").filter(|r| is_token(r)) {
        next.refresh_token = Some(r.to_string());
    }
    if let Some(id) = str_at(&doc, "id_token") {
        next.id_token = Some(id.to_string());
        if let Some(acct) = chatgpt_claim("chatgpt_account_id")(id) {
            next.account_id = Some(acct);
        }
    }
    next.expires_at = doc
        .get("expires_in")
        .and_then(serde_json::Value::as_f64)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| now.saturating_add((s * 1000.0) as u64))
        .or_else(|| token_expiry(access))
        .or(Some(now.saturating_add(60 * 60 * 1000)));
    next.obtained_at = now;
    next.refreshes += 1;
    next.failures = 0;
    next.last_error = None;
    next.failed_at = None;
    Refreshed::Done(Box::new(next))
}

/// `login` after a failed refresh at `now`.
pub fn failed(login: &Login, why: &str, refused: bool, now: u64) -> Login {
    let mut next = login.clone();
    next.failures = next.failures.saturating_add(1);
    next.last_error = Some(why.to_string());
    next.failed_at = Some(now);
    next.refused = refused;
    next
}

#[cfg(test)]
mod tests;
