//! A TLS upstream on the host's loopback for the intercepted-egress tests: its own CA (as a
//! private endpoint would have; the member's proxy trusts it through `upstreamCA`), a
//! certificate for `host.ateam.internal`, and what every request carried, kept for the test
//! to look at. `/v1/...` answers a line naming the credential headers it saw (not their
//! values); `/sse` streams
//! three events 400 ms apart; everything else is `git http-backend` over the repositories in
//! `git_root` (push enabled: only the proxy may refuse it).

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

pub struct Upstream {
    pub port: u16,
    /// The upstream's own CA (PEM): what `upstreamCA` names.
    pub ca_pem: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

type Body = BoxBody<Bytes, Infallible>;

impl Upstream {
    pub fn start(git_root: PathBuf) -> Upstream {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "test upstream CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["host.ateam.internal".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(serve(listener, acceptor, kept, git_root));
        });
        Upstream {
            port,
            ca_pem: ca_cert.pem(),
            seen,
        }
    }

    /// Every value the upstream saw of header `name`, in order.
    pub fn values_of(&self, name: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .flat_map(|s| s.headers.iter())
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

async fn serve(
    listener: std::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    seen: Arc<Mutex<Vec<Seen>>>,
    git_root: PathBuf,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, seen, git_root) = (acceptor.clone(), seen.clone(), git_root.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service =
                hyper::service::service_fn(move |req| answer(req, seen.clone(), git_root.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

async fn answer(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    git_root: PathBuf,
) -> Result<Response<Body>, Infallible> {
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        headers: headers.clone(),
    });
    if path == "/sse" {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tokio::spawn(async move {
            for event in ["one", "two", "three"] {
                let frame = Frame::data(Bytes::from(format!("data: {event}\n\n")));
                if tx.send(Ok(frame)).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        });
        let body = StreamBody::new(tokio_stream_from(rx)).boxed();
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap());
    }
    if path.starts_with("/v1/") {
        // Names only: what a member reads back must not hold the key it was kept from.
        let auth: Vec<String> = headers
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "x-api-key" | "authorization"))
            .map(|(k, _)| k.clone())
            .collect();
        let body = format!("upstream {method} {path} saw [{}]\n", auth.join(" "));
        return Ok(Response::new(full(body)));
    }
    Ok(git_cgi(req, &git_root, &method, &path).await)
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// `git http-backend` as a CGI, the way a git host's web server runs it.
async fn git_cgi(
    req: Request<Incoming>,
    root: &PathBuf,
    method: &str,
    path: &str,
) -> Response<Body> {
    let query = req.uri().query().unwrap_or("").to_string();
    let ctype = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let encoding = req
        .headers()
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", &query)
        .env("CONTENT_TYPE", &ctype)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", "tester")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    if let Some(e) = encoding {
        cmd.env("HTTP_CONTENT_ENCODING", e);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.unwrap().stdout;
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, skip)) = split else {
        return Response::builder()
            .status(500)
            .body(full("no CGI head"))
            .unwrap();
    };
    let mut resp = Response::builder();
    for line in String::from_utf8_lossy(&out[..at]).lines() {
        if let Some((k, v)) = line.split_once(':') {
            let v = v.trim();
            if k.eq_ignore_ascii_case("status") {
                let code: u16 = v.split(' ').next().unwrap_or("500").parse().unwrap_or(500);
                resp = resp.status(code);
            } else {
                resp = resp.header(k.trim(), v);
            }
        }
    }
    resp.body(full(out[at + skip..].to_vec())).unwrap()
}

/// A bare repository `<root>/<owner>/<name>.git` with one commit, push enabled.
pub fn git_repo(root: &std::path::Path, owner: &str, name: &str, content: &str) {
    let git = |args: &[&str], cwd: &std::path::Path| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let work = root.join(format!(".src-{owner}-{name}"));
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q", "-b", "main"], &work);
    std::fs::write(work.join("README"), content).unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-q", "-m", "one"], &work);
    std::fs::create_dir_all(root.join(owner)).unwrap();
    let bare = root.join(owner).join(format!("{name}.git"));
    git(
        &["clone", "-q", "--bare", ".", bare.to_str().unwrap()],
        &work,
    );
    git(&["config", "http.receivepack", "true"], &bare);
}
