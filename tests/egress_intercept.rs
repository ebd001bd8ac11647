//! Hosts with rules (issue 17), as real clients meet them inside a member of the image
//! scripts/client-image.sh builds: curl, Python's urllib, Node and git reach an intercepted
//! TLS upstream on the host (its own CA, trusted by the proxy through `upstreamCA`) and trust
//! the team's CA without a flag; the upstream sees the real key, the member only its
//! placeholder, and a scan of the member finds the key nowhere; a foreign key, a path or
//! method outside the rules and a `git push` are refused with the reason; an allowed
//! repository clones and another does not; a stream arrives as it is sent; a rotated CA
//! needs no new container. On Docker, rootful Podman and rootless Podman. Ignored by a plain
//! `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::PathBuf;

#[macro_use]
mod common;
use common::{Engine, text};

#[path = "support/tls_upstream.rs"]
mod upstream;
use upstream::Upstream;

#[path = "support/intercept_world.rs"]
mod world;
use world::{PLACEHOLDER_API, Rules, World};

/// Every file below `dir` (not following links) that holds one of `needles`.
fn files_holding(dir: &std::path::Path, needles: &[&str], found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        let p = e.path();
        if t.is_dir() {
            files_holding(&p, needles, found);
        } else if t.is_file()
            && let Ok(b) = std::fs::read(&p)
        {
            let s = String::from_utf8_lossy(&b);
            if needles.iter().any(|n| s.contains(n)) {
                found.push(p);
            }
        }
    }
}

/// The counts `grep -c PATTERN A B` printed (`A:n` then `B:m`).
fn cert_counts(out: &str) -> (usize, usize) {
    let counts: Vec<usize> = out
        .lines()
        .filter_map(|l| l.rsplit_once(':')?.1.trim().parse().ok())
        .collect();
    match counts[..] {
        [a, b] => (a, b),
        _ => panic!("not two counts: {out}"),
    }
}

/// Node 20's fetch ignores the proxy variables: a CONNECT, then TLS over it, as agents' own
/// proxy support does; its trust is Node's own roots plus NODE_EXTRA_CA_CERTS.
fn node_get(port: u16, path: &str, key: &str) -> String {
    format!(
        r#"node -e '
const http=require("http"),tls=require("tls");const p=new URL(process.env.HTTPS_PROXY);
http.request({{host:p.hostname,port:p.port,method:"CONNECT",path:"host.ateam.internal:{port}"}}).on("connect",(res,sock)=>{{
 const t=tls.connect({{socket:sock,servername:"host.ateam.internal"}},()=>t.write("GET {path} HTTP/1.1\r\nHost: host.ateam.internal:{port}\r\nx-api-key: {key}\r\nConnection: close\r\n\r\n"));
 let b="";t.on("data",d=>b+=d);t.on("end",()=>console.log("node",b.split("\r\n")[0],b.slice(b.indexOf("\r\n\r\n")+4).trim()));
 t.on("error",e=>console.log("node tls error",e.code||e.message))}}).end()' 2>&1"#
    )
}

fn clients_use_injected_credentials_under_rules(engine: Engine) {
    let w = World::new(engine, "ateam-intercept-", "icpt");
    upstream::git_repo(&w.root().join("git"), "acme", "shop", "the shop\n");
    upstream::git_repo(&w.root().join("git"), "acme", "other", "not yours\n");
    let api = Upstream::start(w.root().join("git"));
    let git = Upstream::start(w.root().join("git"));
    w.write(
        &api,
        &git,
        &Rules {
            helper_requests: true,
            api_paths: r#""/v1/**", "/sse""#,
            git_http: None,
        },
    );
    w.ok(&["apply", "-f", w.manifest().to_str().unwrap()]);
    let base = format!("https://host.ateam.internal:{}", api.port);
    let gbase = format!("https://host.ateam.internal:{}", git.port);

    // The member holds placeholders, and trusts the team's CA through the usual variables.
    let env = w.inside("echo \"key=$ANTHROPIC_API_KEY token=$GIT_TOKEN ssl=$SSL_CERT_FILE node=$NODE_EXTRA_CA_CERTS\"; ls /.ateam");
    assert!(
        env.contains(&format!(
            "key={PLACEHOLDER_API} token=ateam-placeholder-GIT_TOKEN"
        )) && env.contains("ssl=/.ateam/ca-bundle.pem node=/.ateam/ca.pem"),
        "{engine:?}: {env}"
    );
    w.clean(&env, "the member's environment");
    // The one bundle holds the image's roots and the team's CA.
    let roots =
        "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt /.ateam/ca-bundle.pem";
    let (image, bundle) = cert_counts(&w.inside(roots));
    assert!(
        image > 50 && bundle == image + 1,
        "{engine:?}: image roots {image}, bundle {bundle}"
    );

    // curl, no flag: the proxy's variables and CURL_CA_BUNDLE; the key put in by the proxy.
    let got = w.inside(&format!(
        "curl -sS --max-time 20 -H \"x-api-key: $ANTHROPIC_API_KEY\" {base}/v1/messages; curl -sS --max-time 20 {base}/v1/models"
    ));
    assert_eq!(
        got.matches("saw [x-api-key]").count(),
        2,
        "{engine:?}: curl: {got}"
    );
    // Python's urllib, with SSL_CERT_FILE.
    let got = w.inside(&format!(
        "python3 -c 'import urllib.request as u, os\nr=u.Request(\"{base}/v1/complete\", data=b\"{{}}\", headers={{\"x-api-key\": os.environ[\"ANTHROPIC_API_KEY\"]}})\nprint(\"python\", u.urlopen(r, timeout=20).read().decode())' 2>&1"
    ));
    assert!(
        got.contains("python upstream POST /v1/complete saw [x-api-key]"),
        "{engine:?}: python: {got}"
    );
    let got = w.inside(&node_get(api.port, "/v1/node", PLACEHOLDER_API));
    assert!(
        got.contains("node HTTP/1.1 200 OK upstream GET /v1/node saw [x-api-key]"),
        "{engine:?}: node: {got}"
    );
    let keys = api.values_of("x-api-key");
    assert!(
        keys.len() >= 4 && keys.iter().all(|k| *k == w.api_key),
        "{engine:?}: the upstream did not see the real key every time: {keys:?}"
    );

    // A foreign key, in the header or the query; a path and a method outside the rules.
    let got = w.inside(&format!(
        "for a in '-H x-api-key:sk-ant-planted {base}/v1/a' '{base}/v1/b?key=sk-planted' '{base}/admin' '-X DELETE {base}/v1/c'; do curl -sS --max-time 20 -o /dev/null -w '%{{http_code}} ' $a; done"
    ));
    assert!(got.starts_with("403 403 403 403 "), "{engine:?}: {got}");
    let got = w.inside(&format!(
        "curl -sS --max-time 20 -H 'x-api-key: sk-ant-planted' {base}/v1/a"
    ));
    assert!(
        got.contains("credential") && !got.contains("saw ["),
        "{engine:?}: a foreign key was not refused with its reason: {got}"
    );
    let seen: Vec<String> = api
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(
        !seen
            .iter()
            .any(|p| p.ends_with(" /admin") || p.ends_with(" /v1/a") || p.starts_with("DELETE")),
        "{engine:?}: a refused request reached the upstream: {seen:?}"
    );

    // A stream arrives as it is sent: the first event long before the last.
    let got = w.inside(&format!(
        "python3 -c 'import urllib.request as u, time\nt=time.monotonic(); r=u.urlopen(\"{base}/sse\", timeout=20)\nfor l in r:\n  l=l.strip()\n  if l: print(\"event\", l.decode(), round(time.monotonic()-t, 2))' 2>&1"
    ));
    let times: Vec<f64> = got
        .lines()
        .filter(|l| l.starts_with("event data:"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(
        times.len() == 3 && times[0] < 0.6 && times[2] - times[0] > 0.6,
        "{engine:?}: the stream was buffered: {got}"
    );

    // git: clone of the allowed repository with no credential in the member; push refused
    // by git's own message; another repository refused.
    let got = w.inside(&format!(
        "cd /tmp && git clone -q {gbase}/acme/shop.git s 2>&1 && cat s/README && cd s && git -c user.name=m -c user.email=m@x commit -q --allow-empty -m x && git push -q origin main 2>&1; cd /tmp && git clone -q {gbase}/acme/other.git o 2>&1"
    ));
    assert!(got.contains("the shop"), "{engine:?}: git clone: {got}");
    assert!(
        got.contains("remote error: ateam egress") && got.contains("push"),
        "{engine:?}: git push was not refused with git's message: {got}"
    );
    assert!(
        got.contains("acme/other") && !got.contains("not yours"),
        "{engine:?}: another repository was not refused: {got}"
    );
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("x-access-token:{}", w.git_token),
    );
    assert!(
        git.values_of("authorization")
            .iter()
            .any(|v| *v == format!("Basic {basic}")),
        "{engine:?}: the git host never saw the real token"
    );
    assert!(
        !git.seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.path.contains("receive-pack")),
        "{engine:?}: a push reached the git host"
    );

    // Nothing of the member holds a real value: its processes' environments, every file it
    // can read, its container's configuration; nor does a private key of the CA.
    let scan = w.inside(&format!(
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -e '{k}' -e '{t}'; grep -rIl -s -D skip --exclude-dir=proc --exclude-dir=sys -e '{k}' -e '{t}' -e 'BEGIN PRIVATE KEY' / ; echo scanned",
        k = w.api_key,
        t = w.git_token
    ));
    assert!(
        scan.starts_with("0\nscanned"),
        "{engine:?}: the member holds a real credential or a key: {scan}"
    );
    let id = w.container_id();
    assert!(!id.is_empty(), "{engine:?}: no container");
    let inspect = common::engine_command(engine, false)
        .args(["inspect", &id])
        .output()
        .unwrap();
    w.clean(&text(&inspect.stdout), "the container's configuration");

    // ateam's own outputs: status, export, the egress log; and its log names the rules.
    let status = w.ok(&["status", &w.team, "-o", "json"]);
    assert!(status.contains("ANTHROPIC_API_KEY"), "{engine:?}: {status}");
    w.ok(&["export", "--team", &w.team]);
    let log = w.ok(&["logs", "c", "--team", &w.team, "--egress"]);
    assert!(
        log.contains("/admin") || log.contains("DELETE"),
        "{engine:?}: {log}"
    );

    // Nothing ateam keeps holds a real value but the proxies' own files: not the applied
    // team, records, policies, the egress and proxy logs.
    let mut holders = Vec::new();
    files_holding(
        &w.root().join("state"),
        &[&w.api_key, &w.git_token],
        &mut holders,
    );
    assert!(
        holders.iter().all(|p| p.ends_with("egress/intercept.json")),
        "{engine:?}: real values in {holders:?}"
    );
    assert!(
        !holders.is_empty(),
        "{engine:?}: the scan found not even the proxy's file"
    );

    // A new CA, the same container: clients trust it at once.
    let before = w.inside("cat /.ateam/ca.pem");
    w.ok(&["rotate-ca", "--team", &w.team]);
    let after = w.inside(&format!(
        "cat /.ateam/ca.pem; curl -sS --max-time 20 {base}/v1/rotated"
    ));
    assert_ne!(before, after, "{engine:?}: the CA did not change");
    assert!(
        after.contains("saw [x-api-key]"),
        "{engine:?}: curl after rotation: {after}"
    );
    assert_eq!(
        w.container_id(),
        id,
        "{engine:?}: rotation replaced the container"
    );

    // A new value of the key, applied: the running proxy injects it, the container stays.
    let new_key = format!("{}-next", w.api_key);
    let out = common::ateam_command_env(
        engine,
        &w.root().join("state"),
        &[("ANTHROPIC_API_KEY", &new_key), ("GIT_TOKEN", &w.git_token)],
    )
    .args(["apply", "-f", w.manifest().to_str().unwrap()])
    .current_dir(w.root())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let got = w.inside(&format!("curl -sS --max-time 20 {base}/v1/new-key"));
    assert!(got.contains("saw [x-api-key]"), "{engine:?}: {got}");
    assert_eq!(
        api.values_of("x-api-key").last(),
        Some(&new_key),
        "{engine:?}: the proxy kept the old value"
    );
    assert_eq!(
        w.container_id(),
        id,
        "{engine:?}: a new key replaced the container"
    );

    // A helper the member asks for, with the same host and credential: it too holds only the
    // placeholder, and its own proxy injects the value its requester's holds.
    let req = serde_json::json!({
        "name": "h",
        "command": ["sleep", "100000"],
        "read": [w.root().join("work")],
        "network": {"allow": [{
            "host": format!("host.ateam.internal:{}", api.port),
            "upstreamCA": api.ca_pem,
            "credentials": {"header": "x-api-key", "secret": "ANTHROPIC_API_KEY"},
            "http": [{"methods": ["GET", "POST"], "paths": ["/v1/**", "/sse"]}],
        }]},
    });
    let file = w.root().join("work/req.json");
    std::fs::write(&file, req.to_string()).unwrap();
    let got = w.inside(&format!(
        "curl -sS --max-time 120 --data-binary @{} \"$ATEAM_HELPERS_URL\"",
        file.display()
    ));
    assert!(
        got.contains("\"h\""),
        "{engine:?}: the helper request: {got}"
    );
    let script =
        format!("echo \"key=$ANTHROPIC_API_KEY\"; curl -sS --max-time 20 {base}/v1/helper");
    let out = w.ateam(&["exec", "h", "--team", &w.team, "--", "sh", "-c", &script]);
    let got = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        got.contains(&format!("key={PLACEHOLDER_API}")) && got.contains("saw [x-api-key]"),
        "{engine:?}: the helper: {got}"
    );
    w.clean(&got, "the helper's output");
    // Its roots were kept by the image's id at the member's start: the same bundle.
    let out = w.ateam(&["exec", "h", "--team", &w.team, "--", "sh", "-c", roots]);
    assert_eq!(
        cert_counts(&text(&out.stdout)),
        (image, bundle),
        "{engine:?}: the helper's bundle: {}",
        text(&out.stderr)
    );
    assert_eq!(
        api.values_of("x-api-key").last(),
        Some(&new_key),
        "{engine:?}: the helper's proxy did not inject its requester's value"
    );
}

on_every_engine!(docker: clients_use_injected_credentials_under_rules);
on_every_engine!(podman: clients_use_injected_credentials_under_rules);
on_every_engine!(rootless_podman: clients_use_injected_credentials_under_rules);
