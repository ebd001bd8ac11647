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
            "a planted key after the placeholder",
            format!(
                "GET /v1/a HTTP/1.1\r\nHost: host.ateam.internal:{}\r\nx-api-key: {PLACEHOLDER_API}, planted-key\r\n\r\n",
                api.port
            ),
            "HTTP/1.1 403",
        ),
    ];
    for (what, req, want) in &cases {
        let got = raw_inside(&w, api.port, req);
        assert!(got.starts_with(want), "{engine:?}: {what}: {got}");
        w.clean(&got, what);
    }
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
        seen.len() == 1
            && !seen.iter().any(|s| s.contains("admin")
                || s.contains("TRACE")
                || s.contains("evil")
                || s.contains("planted")),
        "{engine:?}: a refused request reached the upstream: {seen:?}"
    );

    assert_eq!(
        api.values_of("x-api-key"),
        vec![w.api_key.clone()],
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

on_every_engine!(docker: a_member_cannot_get_or_widen_what_a_host_with_rules_gives);
on_every_engine!(podman: a_member_cannot_get_or_widen_what_a_host_with_rules_gives);
on_every_engine!(rootless_podman: a_member_cannot_get_or_widen_what_a_host_with_rules_gives);
