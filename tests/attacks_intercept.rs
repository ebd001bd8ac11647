//! Attacks on hosts with rules from inside a member (docs/security.md, invariant 12): a member
//! that holds only placeholders tries, with real clients and with bytes of its own inside the
//! intercepted TLS, to push where `push: false` (an http rule covering the path), to steer a
//! request with a second Host header, to have TRACE echo the key, to slip a path past the
//! glob, and to find the real values or a private key in what it can read (`/.ateam`, its
//! mounts). On Docker, rootful Podman and rootless Podman. Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

#[macro_use]
mod common;
use common::Engine;

#[path = "support/tls_upstream.rs"]
mod upstream;
use upstream::Upstream;

#[path = "support/intercept_world.rs"]
#[allow(dead_code)] // each test binary uses its own part
mod world;
use world::{PLACEHOLDER_API, Rules, World};

/// The member's raw client (tests/fixtures/intercept/raw_client.py), written inside.
const RAW_CLIENT: &str = include_str!("fixtures/intercept/raw_client.py");

/// Sends `request` byte for byte inside the member's intercepted TLS to `port`; the answer.
fn raw_inside(w: &World, port: u16, request: &str) -> String {
    let hex: String = request.bytes().map(|b| format!("{b:02x}")).collect();
    w.inside(&format!(
        "cat > /tmp/raw.py <<'PYEOF'\n{RAW_CLIENT}\nPYEOF\nprintf %s {hex} | python3 -c 'import sys,binascii; sys.stdout.buffer.write(binascii.unhexlify(sys.stdin.read()))' | python3 /tmp/raw.py \"${{HTTPS_PROXY#http://}}\" host.ateam.internal:{port} \"$SSL_CERT_FILE\" 2>&1"
    ))
}

fn a_member_cannot_get_or_widen_what_a_host_with_rules_gives(engine: Engine) {
    let w = World::new(engine, "ateam-attack-icpt-", "aicpt");
    upstream::git_repo(&w.root().join("git"), "acme", "shop", "the shop\n");
    let api = Upstream::start(w.root().join("git"));
    let git = Upstream::start(w.root().join("git"));
    // The git host's http rule covers the repository's paths, push is false: the push must
    // still be refused.
    w.write(
        &api,
        &git,
        &Rules {
            helper_requests: false,
            api_paths: r#""/v1/**""#,
            git_http: Some(r#"{methods: [GET, POST], paths: ["/acme/**"]}"#),
        },
    );
    w.ok(&["apply", "-f", w.manifest().to_str().unwrap()]);
    let gbase = format!("https://host.ateam.internal:{}", git.port);

    // git push where an http rule covers the repository's paths: refused, by git's message.
    let got = w.inside(&format!(
        "cd /tmp && git clone -q {gbase}/acme/shop.git s 2>&1 && cd s && git -c user.name=m -c user.email=m@x commit -q --allow-empty -m x && git push origin main 2>&1; echo pushed=$?"
    ));
    assert!(
        got.contains("remote error: ateam egress")
            && got.contains("push")
            && !got.contains("pushed=0"),
        "{engine:?}: a push with push: false got through an http rule: {got}"
    );
    assert!(
        !git.seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.path.contains("receive-pack")),
        "{engine:?}: a push reached the git host"
    );

    // Bytes of the member's own inside the TLS: (what, request, the answer's status line).
    let host = format!(
        "Host: host.ateam.internal:{}\r\nx-api-key: {PLACEHOLDER_API}\r\n",
        api.port
    );
    let cases = [
        (
            "a second Host",
            format!("GET /v1/a HTTP/1.1\r\n{host}Host: evil.example\r\n\r\n"),
            "HTTP/1.1 403",
        ),
        (
            "TRACE",
            format!("TRACE /v1/a HTTP/1.1\r\n{host}\r\n"),
            "HTTP/1.1 405",
        ),
        (
            "`..;`",
            format!("GET /v1/..;/admin HTTP/1.1\r\n{host}\r\n"),
            "HTTP/1.1 400",
        ),
        (
            "encoded twice",
            format!("GET /v1/%252e%252e/admin HTTP/1.1\r\n{host}\r\n"),
            "HTTP/1.1 400",
        ),
        (
            "obs-fold",
            format!(
                "GET /v1/a HTTP/1.1\r\n{host}x-api-key: {PLACEHOLDER_API}\r\n planted-fold\r\n\r\n"
            ),
            "HTTP/1.1 400",
        ),
        (
            "a push with a path parameter",
            format!(
                "POST /acme/shop.git/git-receive-pack;x HTTP/1.1\r\nHost: host.ateam.internal:{}\r\nContent-Length: 0\r\n\r\n",
                git.port
            ),
            "HTTP/1.1 403",
        ),
        (
            "a method override",
            format!(
                "POST /v1/a HTTP/1.1\r\n{host}X-HTTP-Method-Override: DELETE\r\nContent-Length: 0\r\n\r\n"
            ),
            "HTTP/1.1 403",
        ),
        (
            "a method override with underscores",
            format!(
                "POST /v1/a HTTP/1.1\r\n{host}x_method_override: DELETE\r\nContent-Length: 0\r\n\r\n"
            ),
            "HTTP/1.1 403",
        ),
        (
            "_method",
            format!("POST /v1/a?_method=DELETE HTTP/1.1\r\n{host}Content-Length: 0\r\n\r\n"),
            "HTTP/1.1 403",
        ),
        (
            "x_api_key",
            format!("GET /v1/a HTTP/1.1\r\n{host}x_api_key: planted-underscore\r\n\r\n"),
            "HTTP/1.1 403",
        ),
        (
            "a planted key after the placeholder",
            format!(
                "GET /v1/a HTTP/1.1\r\nHost: host.ateam.internal:{}\r\nx-api-key: {PLACEHOLDER_API}, planted-key\r\n\r\n",
                api.port
            ),
            "HTTP/1.1 403",
        ),
    ];
    for (what, req, want) in &cases {
        let port = if what.contains("push") {
            git.port
        } else {
            api.port
        };
        let got = raw_inside(&w, port, req);
        assert!(got.starts_with(want), "{engine:?}: {what}: {got}");
        w.clean(&got, what);
    }
    // Trailers naming credential headers: the request goes on, its trailers do not.
    let got = raw_inside(
        &w,
        api.port,
        &format!(
            "POST /v1/trailed HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\nTrailer: x-api-key, cookie\r\n\r\n3\r\nabc\r\n0\r\nx-api-key: planted-t1\r\ncookie: planted-t2\r\n\r\n"
        ),
    );
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "{engine:?}: trailers: {got}"
    );
    // The control: the same client, a plain request, gets through with the key.
    let got = raw_inside(&w, api.port, &format!("GET /v1/ok HTTP/1.1\r\n{host}\r\n"));
    assert!(
        got.starts_with("HTTP/1.1 200") && got.contains("saw [x-api-key]"),
        "{engine:?}: {got}"
    );
    let seen: Vec<String> = api
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| format!("{} {} {:?}", s.method, s.path, s.headers))
        .collect();
    assert!(
        seen.len() == 2
            && !seen.iter().any(|s| s.contains("admin")
                || s.contains("TRACE")
                || s.contains("evil")
                || s.contains("planted")),
        "{engine:?}: a refused request reached the upstream: {seen:?}"
    );

    assert_eq!(
        api.values_of("x-api-key"),
        vec![w.api_key.clone(), w.api_key.clone()],
        "{engine:?}: the upstream saw another key than the real one"
    );

    // What the member can read: no intercept.json, policy, CA or leaf key, no real value.
    let scan = w.inside(&format!(
        "ls -a /.ateam; grep -c -e egress/ -e intercept /proc/self/mountinfo; find / \\( -path /proc -o -path /sys \\) -prune -o \\( -name intercept.json -o -name ca.key -o -name policy.json \\) -print 2>/dev/null; grep -rIl -s -e '{k}' -e '{t}' -e 'PRIVATE KEY' /.ateam /proc/self/mountinfo; echo scanned",
        k = w.api_key,
        t = w.git_token
    ));
    assert!(
        scan.contains("\n0\nscanned")
            && !scan.contains("intercept.json")
            && !scan.contains("ca.key"),
        "{engine:?}: the member can see what is not its own: {scan}"
    );

    // ateam's outputs after the refusals: neither the key nor a planted value.
    for args in [
        vec!["status", w.team.as_str(), "-o", "json"],
        vec!["logs", "c", "--team", w.team.as_str(), "--egress"],
    ] {
        let out = w.ok(&args);
        assert!(!out.contains("planted"), "{engine:?}: {args:?}: {out}");
    }
}

/// The member's keep-alive client (tests/fixtures/intercept/session_client.py).
const SESSION_CLIENT: &str = include_str!("fixtures/intercept/session_client.py");

/// Issue 34: a connection opened before an apply narrowed the rules keeps no rule of its
/// CONNECT: its next request is judged by the rules in force.
fn an_open_connection_is_judged_by_the_rules_in_force(engine: Engine) {
    let w = World::new(engine, "ateam-attack-icpt-open-", "aicpo");
    let api = Upstream::start(w.root().join("git"));
    let git = Upstream::start(w.root().join("git"));
    let rules = |paths| Rules {
        helper_requests: false,
        api_paths: paths,
        git_http: None,
    };
    w.write(&api, &git, &rules(r#""/v1/**""#));
    w.ok(&["apply", "-f", w.manifest().to_str().unwrap()]);
    let host = format!(
        "Host: host.ateam.internal:{}\r\nx-api-key: {PLACEHOLDER_API}\r\n",
        api.port
    );
    let steps = serde_json::json!([
        {"send": format!("GET /v1/one HTTP/1.1\r\n{host}\r\n")},
        {"wait": "/tmp/narrowed"},
        {"send": format!("GET /v1/two HTTP/1.1\r\n{host}\r\n")},
    ]);
    let got = std::thread::scope(|s| {
        let session = s.spawn(|| {
            w.inside(&format!(
                "cat > /tmp/s.py <<'PYEOF'\n{SESSION_CLIENT}\nPYEOF\ncat > /tmp/steps.json <<'JSONEOF'\n{steps}\nJSONEOF\npython3 /tmp/s.py \"${{HTTPS_PROXY#http://}}\" host.ateam.internal:{} \"$SSL_CERT_FILE\" /tmp/steps.json 2>&1",
                api.port
            ))
        });
        assert!(
            common::eventually(std::time::Duration::from_secs(60), || {
                api.seen.lock().unwrap().iter().any(|s| s.path == "/v1/one")
            }),
            "{engine:?}: the first request never arrived"
        );
        w.write(&api, &git, &rules(r#""/v2/**""#));
        w.ok(&["apply", "-f", w.manifest().to_str().unwrap()]);
        w.inside("touch /tmp/narrowed");
        session.join().unwrap()
    });
    let answers: Vec<&str> = got.split("-----").collect();
    assert!(answers[0].contains(" 200 "), "{engine:?}: {got}");
    assert!(
        answers.len() > 1
            && answers[1].contains("403 ateam egress")
            && answers[1].contains("/v1/two"),
        "{engine:?}: the open connection kept its old rules: {got}"
    );
    assert!(
        !api.seen.lock().unwrap().iter().any(|s| s.path == "/v1/two"),
        "{engine:?}: a request outside the rules in force reached the upstream"
    );
    w.clean(&got, "the session's answers");
}

on_every_engine!(docker: a_member_cannot_get_or_widen_what_a_host_with_rules_gives, an_open_connection_is_judged_by_the_rules_in_force);
on_every_engine!(podman: a_member_cannot_get_or_widen_what_a_host_with_rules_gives, an_open_connection_is_judged_by_the_rules_in_force);
on_every_engine!(rootless_podman: a_member_cannot_get_or_widen_what_a_host_with_rules_gives, an_open_connection_is_judged_by_the_rules_in_force);
