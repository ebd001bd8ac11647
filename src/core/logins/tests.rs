use super::*;

const NOW: u64 = 1_800_000_000_000;

fn claude_file(expires_at: u64) -> Vec<u8> {
    serde_json::json!({"claudeAiOauth": {
        "accessToken": "sk-ant-oat01-real",
        "refreshToken": "sk-ant-ort01-real",
        "expiresAt": expires_at,
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max",
    }})
    .to_string()
    .into_bytes()
}

fn codex_file(exp_secs: u64) -> Vec<u8> {
    let access = jwt(&serde_json::json!({"exp": exp_secs}));
    let id = jwt(&serde_json::json!({OPENAI_AUTH_CLAIM: {
        "chatgpt_account_id": "acct-1", "chatgpt_plan_type": "pro"}}));
    serde_json::json!({"OPENAI_API_KEY": null, "tokens": {
        "id_token": id, "access_token": access, "refresh_token": "rt-1"},
        "last_refresh": "2026-12-01T00:00:00Z"})
    .to_string()
    .into_bytes()
}

#[test]
fn claude_code_s_file_and_a_setup_token_import() {
    let l = import(
        LoginKind::Claude,
        &claude_file(NOW + 3_600_000),
        "f",
        None,
        None,
        NOW,
    )
    .unwrap();
    assert_eq!(l.access_token, "sk-ant-oat01-real");
    assert_eq!(l.refresh_token.as_deref(), Some("sk-ant-ort01-real"));
    assert_eq!(l.expires_at, Some(NOW + 3_600_000));
    assert_eq!(l.token_url, "https://platform.claude.com/v1/oauth/token");
    assert_eq!(l.subscription.as_deref(), Some("max"));
    // A token of `claude setup-token`: no refresh token, never refreshed.
    let t = import(
        LoginKind::Claude,
        b"sk-ant-oat01-long-lived\n",
        "-",
        None,
        None,
        NOW,
    )
    .unwrap();
    assert_eq!(t.access_token, "sk-ant-oat01-long-lived");
    assert_eq!(refresh_at(&t), None);
    for bad in [&b"{\"other\": 1}"[..], b"two words", b"{not json", b"\xff"] {
        assert!(
            import(LoginKind::Claude, bad, "f", None, None, NOW).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn codex_s_auth_json_imports_with_its_account_and_expiry() {
    let l = import(
        LoginKind::Codex,
        &codex_file(1_800_003_600),
        "f",
        Some("https://x/oauth/token"),
        None,
        NOW,
    )
    .unwrap();
    assert_eq!(l.account_id.as_deref(), Some("acct-1"));
    assert_eq!(l.expires_at, Some(1_800_003_600_000));
    assert_eq!(l.token_url, "https://x/oauth/token");
    assert_eq!(codex_plan(&l).as_deref(), Some("pro"));
    let key_only = br#"{"OPENAI_API_KEY": "sk-x", "tokens": null}"#;
    let e = import(LoginKind::Codex, key_only, "f", None, None, NOW).unwrap_err();
    assert!(e.to_string().contains("API key"), "{e}");
}

#[test]
fn a_refresh_comes_before_the_end_by_half_the_life_at_most_five_minutes() {
    let mut l = import(
        LoginKind::Claude,
        &claude_file(NOW + 8_000),
        "f",
        None,
        None,
        NOW,
    )
    .unwrap();
    assert_eq!(refresh_at(&l), Some(NOW + 4_000));
    l.expires_at = Some(NOW + 8 * 3_600_000);
    assert_eq!(refresh_at(&l), Some(NOW + 8 * 3_600_000 - 300_000));
    // Failures back off: 5 s, then 10 s, ... from the failure.
    let f = failed(&l, "503", false, NOW + 8 * 3_600_000 - 100_000);
    assert_eq!(refresh_at(&f), Some(NOW + 8 * 3_600_000 - 95_000));
    let f2 = failed(&f, "503", false, NOW + 8 * 3_600_000 - 90_000);
    assert_eq!(refresh_at(&f2), Some(NOW + 8 * 3_600_000 - 80_000));
    // A refused refresh token is never spent again.
    assert_eq!(refresh_at(&failed(&l, "invalid_grant", true, NOW)), None);
}

#[test]
fn a_refresh_rotates_the_refresh_token_and_a_refusal_says_so() {
    let l = import(
        LoginKind::Claude,
        &claude_file(NOW + 8_000),
        "f",
        None,
        None,
        NOW,
    )
    .unwrap();
    let body = refresh_body(&l, "sk-ant-ort01-real");
    assert_eq!(body["grant_type"], "refresh_token");
    assert_eq!(body["client_id"], LoginKind::Claude.client_id());
    assert_eq!(body["scope"], "user:inference user:profile");
    let answer = br#"{"access_token":"a2","refresh_token":"r2","expires_in":60}"#;
    let Refreshed::Done(n) = refreshed(&l, 200, answer, NOW + 5) else {
        panic!("not refreshed")
    };
    assert_eq!(
        (n.access_token.as_str(), n.refresh_token.as_deref()),
        ("a2", Some("r2"))
    );
    assert_eq!(n.expires_at, Some(NOW + 5 + 60_000));
    assert_eq!(n.refreshes, 1);
    // No new refresh token: the old one stays.
    let Refreshed::Done(k) = refreshed(&l, 200, br#"{"access_token":"a3"}"#, NOW) else {
        panic!()
    };
    assert_eq!(k.refresh_token.as_deref(), Some("sk-ant-ort01-real"));
    assert!(matches!(
        refreshed(&l, 400, br#"{"error":"invalid_grant"}"#, NOW),
        Refreshed::Refused(_)
    ));
    assert!(matches!(
        refreshed(&l, 503, b"busy", NOW),
        Refreshed::Failed(_)
    ));
    assert!(matches!(
        refreshed(&l, 200, b"{}", NOW),
        Refreshed::Failed(_)
    ));
    // Codex: the account follows a new id token.
    let c = import(
        LoginKind::Codex,
        &codex_file(1_800_003_600),
        "f",
        None,
        None,
        NOW,
    )
    .unwrap();
    assert!(refresh_body(&c, "rt-1").get("scope").is_none());
    let id = jwt(&serde_json::json!({OPENAI_AUTH_CLAIM: {"chatgpt_account_id": "acct-2"}}));
    let answer =
        serde_json::json!({"access_token": jwt(&serde_json::json!({"exp": 1_800_000_100u64})),
        "refresh_token": "rt-2", "id_token": id})
        .to_string();
    let Refreshed::Done(n) = refreshed(&c, 200, answer.as_bytes(), NOW) else {
        panic!()
    };
    assert_eq!(n.account_id.as_deref(), Some("acct-2"));
    assert_eq!(n.expires_at, Some(1_800_000_100_000));
}

#[test]
fn placeholders_are_shaped_as_the_agents_expect_and_hold_nothing() {
    assert!(
        LoginKind::Claude
            .placeholder_bearer()
            .starts_with("sk-ant-oat01-")
    );
    let p = LoginKind::Codex.placeholder_bearer();
    let claims = jwt_claims(&p).unwrap();
    assert_eq!(claims["exp"], FAR_FUTURE);
    assert_eq!(
        claims[OPENAI_AUTH_CLAIM]["chatgpt_account_id"],
        PLACEHOLDER_ACCOUNT
    );
    // One value, so the proxy can tell it.
    assert_eq!(p, LoginKind::Codex.placeholder_bearer());
    let auth: serde_json::Value =
        serde_json::from_str(&codex_placeholder_auth("2026-12-06T00:00:00Z", Some("pro"))).unwrap();
    assert_eq!(auth["tokens"]["access_token"], p);
    assert_eq!(auth["last_refresh"], "2026-12-06T00:00:00Z");
    let id = jwt_claims(auth["tokens"]["id_token"].as_str().unwrap()).unwrap();
    assert_eq!(id[OPENAI_AUTH_CLAIM]["chatgpt_plan_type"], "pro");
    assert_eq!(id["exp"], FAR_FUTURE);
}

#[test]
fn token_hosts_and_paths_are_refused() {
    assert!(refused_host("Platform.Claude.com.").is_some());
    assert!(refused_host("auth.openai.com").is_some());
    assert!(refused_host("api.anthropic.com").is_none());
    assert!(refused_host("chatgpt.com").is_none());
    assert!(is_token_path("/v1/oauth/token") && is_token_path("/oauth/token/"));
    assert!(is_token_path("/OAuth/Revoke"));
    assert!(!is_token_path("/api/oauth/profile") && !is_token_path("/v1/messages"));
}
