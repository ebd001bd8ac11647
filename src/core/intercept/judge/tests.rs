use super::*;
use crate::core::intercept::placeholder;
use crate::core::logins::LoginKind;

fn icpt() -> Intercept {
    Intercept {
        host: "api.example.com".into(),
        credentials: Some(Credential::Header {
            header: "X-Api-Key".into(),
            secret: "KEY".into(),
        }),
        http: vec![HttpRule {
            methods: vec!["get".into()],
            paths: vec!["/v1/*/items".into(), "/files/**".into()],
        }],
        git: None,
        upstream_ca: None,
    }
}

fn h(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in pairs {
        m.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    m
}

fn status(v: &Verdict) -> u16 {
    match v {
        Verdict::Allowed { .. } => 200,
        Verdict::Refused { status, .. } => *status,
    }
}

fn reason(v: &Verdict) -> &str {
    match v {
        Verdict::Allowed { .. } => "",
        Verdict::Refused { reason, .. } => reason,
    }
}

#[test]
fn globs_match_within_a_segment_or_across() {
    assert!(glob(b"/v1/*/items", b"/v1/abc/items"));
    assert!(!glob(b"/v1/*/items", b"/v1/a/b/items"));
    assert!(glob(b"/files/**", b"/files/a/b/c"));
    assert!(glob(b"/**", b"/"));
    assert!(!glob(b"/a*", b"/b"));
    assert!(glob(b"/a*", b"/a"));
}

#[test]
fn methods_and_paths_outside_the_rules_are_refused_naming_the_rule() {
    let i = icpt();
    let ok = judge(&i, 443, "GET", "/v1/x/items?page=2", &h(&[]));
    assert_eq!(status(&ok), 200);
    for (m, t) in [
        ("POST", "/v1/x/items"),
        ("GET", "/v1/x/y/items"),
        ("GET", "/v2"),
    ] {
        let v = judge(&i, 443, m, t, &h(&[]));
        assert_eq!(status(&v), 403, "{m} {t}");
        assert!(
            reason(&v).contains("methods get paths /v1/*/items,/files/**"),
            "{v:?}"
        );
    }
}

#[test]
fn paths_that_could_slip_past_a_glob_are_bad_requests() {
    let i = icpt();
    for t in [
        "/files/../admin",
        "/files/./x",
        "/files/a%2F..%2Fb",
        "/files/%2e%2e/x",
        "/files/a%5cb",
        "/files/a%00",
        "http://api.example.com/files/x",
        "*",
    ] {
        assert_eq!(status(&judge(&i, 443, "GET", t, &h(&[]))), 400, "{t}");
    }
}

#[test]
fn the_host_header_must_name_the_intercepted_host() {
    let i = icpt();
    for good in ["api.example.com", "API.example.com:443", "api.example.com."] {
        assert_eq!(
            status(&judge(&i, 443, "GET", "/files/a", &h(&[("host", good)]))),
            200,
            "{good}"
        );
    }
    for bad in [
        "evil.example",
        "api.example.com:8443",
        "api.example.com.evil",
    ] {
        assert_eq!(
            status(&judge(&i, 443, "GET", "/files/a", &h(&[("host", bad)]))),
            403,
            "{bad}"
        );
    }
    assert_eq!(
        status(&judge(
            &i,
            8443,
            "GET",
            "/files/a",
            &h(&[("host", "api.example.com:8443")])
        )),
        200
    );
    assert_eq!(
        status(&judge(
            &i,
            8443,
            "GET",
            "/files/a",
            &h(&[("host", "api.example.com")])
        )),
        403
    );
}

#[test]
fn foreign_credentials_are_refused_and_placeholders_replaced() {
    let i = icpt();
    let ph = placeholder("KEY");
    let basic = {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("u:{ph}"))
        )
    };
    for ok in [
        vec![],
        vec![("x-api-key", ph.clone())],
        vec![("authorization", format!("Bearer {ph}"))],
        vec![("authorization", basic)],
    ] {
        let pairs: Vec<(&str, &str)> = ok.iter().map(|(k, v)| (*k, v.as_str())).collect();
        match judge(&i, 443, "GET", "/files/a", &h(&pairs)) {
            Verdict::Allowed { remove, inject } => {
                assert!(
                    remove.contains(&"x-api-key".to_string())
                        && remove.contains(&"cookie".to_string())
                );
                assert_eq!(inject, i.credentials);
            }
            v => panic!("{ok:?}: {v:?}"),
        }
    }
    for (k, v) in [
        ("x-api-key", "sk-real-other"),
        ("authorization", "Bearer sk-other"),
        ("cookie", "session=abc"),
        ("private-token", "glpat-x"),
    ] {
        let got = judge(&i, 443, "GET", "/files/a", &h(&[(k, v)]));
        assert_eq!(status(&got), 403);
        assert!(
            reason(&got).contains("not this member's") && !reason(&got).contains(v),
            "{got:?}"
        );
    }
    let q = judge(&i, 443, "GET", "/files/a?API_KEY=sk-other", &h(&[]));
    assert_eq!(status(&q), 403);
    assert!(!reason(&q).contains("sk-other"));
    let q = judge(&i, 443, "GET", "/files/a?x=1&ap%69_KEY=sk-other", &h(&[]));
    assert_eq!(status(&q), 403, "{q:?}");
    let q = judge(&i, 443, "GET", &format!("/files/a?key={ph}&x=1"), &h(&[]));
    assert_eq!(status(&q), 200);
}

#[test]
fn without_credentials_nothing_is_checked_or_removed() {
    let mut i = icpt();
    i.credentials = None;
    assert_eq!(
        judge(
            &i,
            443,
            "GET",
            "/files/a",
            &h(&[("authorization", "Bearer mine")])
        ),
        Verdict::Allowed {
            remove: vec![],
            inject: None
        }
    );
}

#[test]
fn git_fetch_is_allowed_push_only_with_push_and_repositories_are_matched() {
    let mut i = icpt();
    i.http.clear();
    i.credentials = None;
    i.git = Some(GitRule {
        repositories: vec!["acme/shop".into()],
        push: false,
    });
    let g = |m: &str, t: &str| judge(&i, 443, m, t, &h(&[]));
    assert_eq!(
        status(&g(
            "GET",
            "/acme/shop.git/info/refs?service=git-upload-pack"
        )),
        200
    );
    assert_eq!(status(&g("POST", "/acme/shop/git-upload-pack")), 200);
    let push = g("GET", "/acme/shop/info/refs?service=git-receive-pack");
    assert!(
        matches!(
            &push,
            Verdict::Refused {
                git: Some(GitService::ReceivePack),
                ..
            }
        ),
        "{push:?}"
    );
    assert!(reason(&push).contains("push"));
    let post = g("POST", "/acme/shop.git/git-receive-pack");
    assert!(
        matches!(
            &post,
            Verdict::Refused {
                status: 403,
                git: None,
                ..
            }
        ),
        "{post:?}"
    );
    let other = g("GET", "/acme/other/info/refs?service=git-upload-pack");
    assert!(reason(&other).contains("acme/other is not in"), "{other:?}");
    assert_eq!(
        status(&g("GET", "/Acme/shop/info/refs?service=git-upload-pack")),
        403
    );
    let web = g("GET", "/acme/shop");
    assert!(reason(&web).contains("not git smart HTTP"), "{web:?}");
    i.git.as_mut().unwrap().push = true;
    assert_eq!(
        status(&judge(
            &i,
            443,
            "POST",
            "/acme/shop/git-receive-pack",
            &h(&[])
        )),
        200
    );
}

#[test]
fn basic_injection_encodes_the_username_and_value() {
    let c = Credential::Basic {
        username: "x-access-token".into(),
        secret: "S".into(),
    };
    assert_eq!(
        injected(&c, "v"),
        (
            "authorization".into(),
            "Basic eC1hY2Nlc3MtdG9rZW46dg==".into()
        )
    );
    assert_eq!(
        injected(&Credential::Bearer { secret: "S".into() }, "v").1,
        "Bearer v"
    );
}

// ---- Attacks from inside a member (docs/security.md, invariant 12). ----

#[test]
fn attack_paths_an_upstream_could_normalise_past_the_glob_are_refused() {
    let i = icpt();
    for t in [
        "/files/%252e%252e/admin",  // decoded twice: `..`
        "/files/%252fadmin",        // decoded twice: `/`
        "/files/..;/admin",         // `..` to a server that drops `;` parameters
        "/files/.;x/admin",         // `.` likewise
        "/files/%c0%ae%c0%ae/x",    // overlong UTF-8 `..`
        "/files/%e0%80%ae/x",       // overlong, three bytes
        "/files/..\\admin",         // `\` taken for `/`
        "/files/%255c../admin",     // `\` encoded twice
        "/files/%2500",             // NUL encoded twice
        "/files/a%0d%0aX-Injected", // CR LF
        "/files//a",                // empty segment, collapsed by some
    ] {
        let v = judge(&i, 443, "GET", t, &h(&[]));
        assert_eq!(status(&v), 400, "{t}: {v:?}");
    }
    // What a person's API needs still passes: an escaped space, a `%25` that is no trick.
    for t in ["/files/a%20b", "/files/100%25", "/files/a;v=1", "/files/"] {
        assert_eq!(status(&judge(&i, 443, "GET", t, &h(&[]))), 200, "{t}");
    }
}

#[test]
fn attack_a_second_host_header_is_refused() {
    let i = icpt();
    let v = judge(
        &i,
        443,
        "GET",
        "/files/a",
        &h(&[("host", "api.example.com"), ("host", "evil.example")]),
    );
    assert_eq!(status(&v), 403, "{v:?}");
    assert!(reason(&v).contains("more than one Host"), "{v:?}");
}

#[test]
fn attack_trace_would_echo_the_credential_and_is_refused_whatever_the_rules() {
    let mut i = icpt();
    i.http.clear(); // no rules: every request, but not this one
    for m in ["TRACE", "trace", "TRACK"] {
        let v = judge(&i, 443, m, "/", &h(&[]));
        assert_eq!(status(&v), 405, "{m}: {v:?}");
    }
    assert_eq!(status(&judge(&i, 443, "GET", "/", &h(&[]))), 200);
}

#[test]
fn attack_smuggling_framing_is_refused() {
    let mut i = icpt();
    i.http.clear();
    let both = h(&[("transfer-encoding", "chunked"), ("content-length", "4")]);
    assert_eq!(status(&judge(&i, 443, "POST", "/", &both)), 400);
    let two = h(&[
        ("transfer-encoding", "chunked"),
        ("transfer-encoding", "identity"),
    ]);
    assert_eq!(status(&judge(&i, 443, "POST", "/", &two)), 400);
    let one = h(&[("transfer-encoding", "chunked")]);
    assert_eq!(status(&judge(&i, 443, "POST", "/", &one)), 200);
}

#[test]
fn attack_push_false_holds_even_where_an_http_rule_covers_the_path() {
    let mut i = icpt();
    i.credentials = None;
    i.http = vec![HttpRule {
        methods: vec!["GET".into(), "POST".into()],
        paths: vec!["/acme/**".into()],
    }];
    i.git = Some(GitRule {
        repositories: vec!["acme/shop".into()],
        push: false,
    });
    for (m, t) in [
        ("POST", "/acme/shop.git/git-receive-pack"),
        ("POST", "/acme/shop.git/git-%72eceive-pack"),
        ("POST", "/acme/shop.git/GIT-RECEIVE-PACK"),
        ("POST", "/acme/sub/shop.git/git-receive-pack"),
        ("GET", "/acme/shop.git/info/refs?service=git-receive-pack"),
        (
            "GET",
            "/acme/shop.git/info/refs?service=git-upload-pack&service=git-receive-pack",
        ),
        ("GET", "/acme/shop.git/info/refs?servic%65=git-receive-pack"),
    ] {
        let v = judge(&i, 443, m, t, &h(&[]));
        assert_eq!(status(&v), 403, "{m} {t}: {v:?}");
        assert!(reason(&v).contains("push"), "{m} {t}: {v:?}");
    }
    // Fetch, and the http rule's own paths, still pass.
    for (m, t) in [
        ("GET", "/acme/shop.git/info/refs?service=git-upload-pack"),
        ("POST", "/acme/shop.git/git-upload-pack"),
        ("POST", "/acme/issues"),
    ] {
        assert_eq!(status(&judge(&i, 443, m, t, &h(&[]))), 200, "{m} {t}");
    }
    // With push: a push to another repository is still refused, an http rule or not.
    i.git.as_mut().unwrap().push = true;
    let v = judge(&i, 443, "POST", "/acme/other/git-receive-pack", &h(&[]));
    assert_eq!(status(&v), 403, "{v:?}");
    assert_eq!(
        status(&judge(
            &i,
            443,
            "POST",
            "/acme/shop/git-receive-pack",
            &h(&[])
        )),
        200
    );
}

#[test]
fn attack_planted_credentials_in_odd_places_are_refused_and_never_echoed() {
    let i = icpt();
    let ph = placeholder("KEY");
    let b64 = |s: String| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    for (k, v) in [
        // the placeholder as username, a planted password
        (
            "authorization",
            format!("Basic {}", b64(format!("{ph}:planted-pw"))),
        ),
        // a planted key after the placeholder in one value
        ("x-api-key", format!("{ph}, planted-key")),
        ("authorization", format!("Bearer {ph} planted-key")),
        ("authorization", "token planted-key".into()),
        ("cookie", format!("a={ph}; session=planted-key")),
    ] {
        let got = judge(&i, 443, "GET", "/files/a", &h(&[(k, v.as_str())]));
        assert_eq!(status(&got), 403, "{k}: {v}");
        assert!(!reason(&got).contains("planted"), "{got:?}");
    }
    // The placeholder first, a planted key in a second header of the same name.
    let two = h(&[("x-api-key", ph.as_str()), ("x-api-key", "planted-key")]);
    assert_eq!(status(&judge(&i, 443, "GET", "/files/a", &two)), 403);
    // A planted key in a query parameter behind `;`.
    let q = judge(&i, 443, "GET", "/files/a?x=1;api_key=planted-key", &h(&[]));
    assert_eq!(status(&q), 403, "{q:?}");
    assert!(!reason(&q).contains("planted"));
}

/// Issue 34: a push with a path parameter, as a Java servlet git server reads it.
#[test]
fn attack_a_path_parameter_does_not_hide_a_push_or_a_path() {
    let mut i = icpt();
    i.credentials = None;
    i.http = vec![HttpRule {
        methods: vec!["GET".into(), "POST".into()],
        paths: vec!["/acme/**".into(), "/v1/*".into()],
    }];
    i.git = Some(GitRule {
        repositories: vec!["acme/shop".into()],
        push: false,
    });
    for t in [
        "/acme/shop.git/git-receive-pack;x",
        "/acme/shop.git/git-receive-pack;",
        "/acme/shop.git/git-receive-pack%3Bx",
        "/acme/shop.git/GIT-RECEIVE-PACK;jsessionid=1",
    ] {
        let v = judge(&i, 443, "POST", t, &h(&[]));
        assert_eq!(status(&v), 403, "{t}: {v:?}");
        assert!(reason(&v).contains("push"), "{t}: {v:?}");
    }
    // A parameter in a segment: the rules see both forms, and both must pass.
    assert_eq!(status(&judge(&i, 443, "GET", "/v1/a;b", &h(&[]))), 200);
    let v = judge(&i, 443, "GET", "/v1;x/admin/a", &h(&[]));
    assert_eq!(status(&v), 403, "{v:?}");
    assert_eq!(without_params("/a;x/b;y=1/c"), "/a/b/c");
}

/// Issue 34: a method the rules refuse, named by an override header or parameter.
#[test]
fn attack_method_overrides_are_judged_as_the_method_they_name() {
    let i = icpt(); // GET only
    let ph = placeholder("KEY");
    for (k, v) in [
        ("x-http-method-override", "DELETE"),
        ("X-HTTP-Method", "delete"),
        ("x-method-override", "PUT"),
        ("x_http_method_override", "DELETE"),
        ("X_Method_Override", "PATCH"),
    ] {
        let got = judge(
            &i,
            443,
            "GET",
            "/files/a",
            &h(&[(k, v), ("x-api-key", &ph)]),
        );
        assert_eq!(status(&got), 403, "{k}: {v}: {got:?}");
        assert!(reason(&got).contains(&v.to_ascii_uppercase()), "{got:?}");
    }
    for q in [
        "_method=DELETE",
        "x=1&_method=delete",
        "%5Fmethod=DELETE",
        "_METHOD=PUT",
        "X-HTTP-Method-Override=DELETE",
        "x;_method=DELETE",
    ] {
        let got = judge(&i, 443, "GET", &format!("/files/a?{q}"), &h(&[]));
        assert_eq!(status(&got), 403, "{q}: {got:?}");
    }
    // TRACE by override is refused as TRACE is.
    let got = judge(
        &i,
        443,
        "GET",
        "/files/a",
        &h(&[("x-http-method-override", "TRACE")]),
    );
    assert_eq!(status(&got), 405, "{got:?}");
    // An override the rules allow passes.
    let got = judge(
        &i,
        443,
        "GET",
        "/files/a?_method=get",
        &h(&[("x-http-method-override", "GET")]),
    );
    assert_eq!(status(&got), 200, "{got:?}");
}

/// Issue 34: `x_api_key` is `x-api-key` to WSGI, Rack and PHP.
#[test]
fn attack_credential_headers_are_matched_in_every_spelling_a_server_folds() {
    let i = icpt();
    let ph = placeholder("KEY");
    for k in [
        "x_api_key",
        "X_API_KEY",
        "x-api_key",
        "api_key",
        "private_token",
    ] {
        let got = judge(
            &i,
            443,
            "GET",
            "/files/a",
            &h(&[("x-api-key", &ph), (k, "planted")]),
        );
        assert_eq!(status(&got), 403, "{k}: {got:?}");
        assert!(!reason(&got).contains("planted"), "{got:?}");
    }
    // A placeholder in another spelling passes, and that spelling is removed too.
    match judge(&i, 443, "GET", "/files/a", &h(&[("x_api_key", &ph)])) {
        Verdict::Allowed { remove, .. } => {
            assert!(remove.contains(&"x_api_key".to_string()), "{remove:?}")
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn a_login_replaces_the_placeholder_bearer_and_account_and_refuses_token_requests() {
    let mut i = icpt();
    i.http = vec![];
    i.credentials = Some(Credential::Login {
        login: LoginKind::Codex,
    });
    let ph = LoginKind::Codex.placeholder_bearer();
    let ok = judge(
        &i,
        443,
        "POST",
        "/v1/responses",
        &h(&[
            ("authorization", &format!("Bearer {ph}")),
            ("chatgpt-account-id", "ateam-placeholder-account"),
        ]),
    );
    match ok {
        Verdict::Allowed { remove, inject } => {
            assert!(remove.contains(&"authorization".to_string()));
            assert!(remove.contains(&"chatgpt-account-id".to_string()));
            assert_eq!(inject, i.credentials);
        }
        v => panic!("{v:?}"),
    }
    assert_eq!(
        injected(i.credentials.as_ref().unwrap(), "real"),
        ("authorization".into(), "Bearer real".into())
    );
    // Another token (a real one the member found) is refused, as for keys.
    let other = judge(
        &i,
        443,
        "POST",
        "/v1/responses",
        &h(&[("authorization", "Bearer eyJx.y.z")]),
    );
    assert_eq!(status(&other), 403);
    // Claude's placeholder is not Codex's.
    let claude = LoginKind::Claude.placeholder_bearer();
    let wrong = judge(
        &i,
        443,
        "GET",
        "/v1/models",
        &h(&[("authorization", &format!("Bearer {claude}"))]),
    );
    assert_eq!(status(&wrong), 403);
    // A refresh through the host that gets the real token: refused, whatever it carries.
    for path in ["/oauth/token", "/v1/oauth/token", "/oauth/revoke"] {
        let r = judge(&i, 443, "POST", path, &h(&[]));
        assert_eq!(status(&r), 403, "{path}");
        assert!(reason(&r).contains("ateam alone refreshes"), "{r:?}");
    }
}
