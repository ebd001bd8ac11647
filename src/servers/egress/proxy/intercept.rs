//! The proxy's path for a host with rules (`core::intercept`): the member's CONNECT is
//! answered 200 and its TLS terminated with the host's leaf from `intercept.json`; each
//! HTTP/1.1 request on it is judged (`core::intercept::judge`), given the real credential,
//! and sent on over one TLS connection per member connection to the very address the
//! allowlist judged, verified against the host's roots (and the entry's own CA). Bodies are
//! streamed both ways, never buffered, so server-sent events arrive as they are sent.
//!
//! An intercept applies on the port its entry names, 443 without one; the same name on
//! another port its entry allows (80) is refused rather than tunnelled, and so is plain HTTP
//! to it: rules and credentials apply to TLS only.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::core::egress::{Entry, Host, Target};
use crate::core::intercept::Intercept;
use crate::core::intercept::judge::{self, GitService, Verdict};
use crate::servers::egress::log::{Event, Verdict as Logged};
use crate::servers::egress::{InterceptFile, Leaf};

type Body = BoxBody<Bytes, hyper::Error>;

/// What an intercepted connection needs of the proxy that accepted it, which the proxy
/// passes in (its state, `Accepted::limits`): this module needs nothing else of the proxy's,
/// and the proxy needs only its entry points (`route`, `Cache`, `serve`).
pub(super) trait Proxy: Send + Sync + 'static {
    /// The intercept in force for what a connection's CONNECT asked for, with its TLS
    /// configurations and secret; `None` when that host is no longer intercepted.
    fn intercept_in_force(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Option<(Intercept, Arc<Prepared>)>, String>;
    /// Resolves once `host:port` is no longer allowed as its connection was made.
    fn revoked(&self, host: &str, port: u16, intercepted: bool) -> impl Future<Output = ()> + Send;
    /// Writes one line of the member's egress log.
    fn record(&self, e: Event);
}

/// The proxy's time limits, as an intercepted connection meets them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// For the member's TLS handshake, and for each request head.
    pub(super) head: Duration,
    /// For connecting to the upstream again.
    pub(super) connect: Duration,
}

/// What becomes of a request for `host:port`, given the policy's intercepts.
pub(super) enum Route {
    Tunnel,
    Refuse(String),
    /// Terminate and judge (the intercept, the port).
    Intercept(Box<Intercept>),
}

/// The port an intercept applies on.
fn intercepted_port(e: &Entry) -> u16 {
    e.port.unwrap_or(443)
}

/// Whether an intercept names one host: a name or an address, never a wildcard.
pub(super) fn check(i: &Intercept) -> Result<(), String> {
    match Entry::parse(&i.host)?.target {
        Target::Name(_) | Target::Ip(_) => Ok(()),
        Target::Below(_) => Err(format!("the intercept `{}` is a wildcard", i.host)),
    }
}

/// `tunnel`: a CONNECT (else plain HTTP forwarding).
pub(super) fn route(intercepts: &[Intercept], host: &str, port: u16, tunnel: bool) -> Route {
    let Some(h) = Host::parse(host) else {
        return Route::Tunnel;
    };
    for i in intercepts {
        let Ok(e) = Entry::parse(&i.host) else {
            continue;
        };
        if !(e.matches(&h, port) || (e.port.is_none() && e.matches(&h, 443))) {
            continue;
        }
        let on = intercepted_port(&e);
        if !tunnel {
            return Route::Refuse(format!(
                "{h} has rules: use https: credentials and rules apply to TLS only"
            ));
        }
        if port == on {
            return Route::Intercept(Box::new(i.clone()));
        }
        return Route::Refuse(format!(
            "{h} has rules, which apply on port {on}; a tunnel to port {port} would pass them by"
        ));
    }
    Route::Tunnel
}

/// The name the upstream's certificate must carry (and the SNI the member must send).
fn server_name(i: &Intercept) -> String {
    match Entry::parse(&i.host).map(|e| e.target) {
        Ok(Target::Name(n) | Target::Below(n)) => n,
        Ok(Target::Ip(ip)) => ip.to_string(),
        Err(_) => i.host.clone(),
    }
}

/// What one intercepted connection needs, read before the member is answered 200.
pub(super) struct Prepared {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    /// The injected secret's value, if the intercept injects one.
    secret: Option<String>,
    /// For a login that names its account (Codex): the header and the real account id.
    account: Option<(&'static str, String)>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The host's roots, loaded once per proxy.
fn native_roots() -> &'static rustls::RootCertStore {
    static ROOTS: OnceLock<rustls::RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut store = rustls::RootCertStore::empty();
        for c in rustls_native_certs::load_native_certs().certs {
            let _ = store.add(c);
        }
        store
    })
}

/// Builds the TLS configurations for `i` from the intercept file; the error is the 503's
/// reason (never a secret's value).
pub(super) fn prepare(i: &Intercept, file: &InterceptFile) -> Result<Prepared, String> {
    let leaf: &Leaf = file
        .leaves
        .get(&i.host)
        .ok_or_else(|| format!("no certificate for {} in intercept.json", i.host))?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(leaf.chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the certificate for {} is not PEM: {e}", i.host))?;
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes())
        .map_err(|e| format!("the key for {} is not PEM: {e}", i.host))?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate for {} is not usable: {e}", i.host))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut roots = native_roots().clone();
    if let Some(pem) = &i.upstream_ca {
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let c = c.map_err(|e| format!("the upstream CA of {} is not PEM: {e}", i.host))?;
            roots
                .add(c)
                .map_err(|e| format!("the upstream CA of {} is not usable: {e}", i.host))?;
        }
    }
    let mut client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let secret = match &i.credentials {
        None => None,
        Some(c) => Some(file.secrets.get(c.secret()).cloned().ok_or_else(|| {
            format!(
                "the value of secret {} is not in intercept.json",
                c.secret()
            )
        })?),
    };
    let login = i.credentials.as_ref().and_then(|c| c.login());
    let account = match login.and_then(|l| Some((l, l.account_header()?, l.account_secret_name()?)))
    {
        None => None,
        Some((l, header, name)) => Some((
            header,
            file.secrets.get(name).cloned().ok_or_else(|| {
                format!(
                    "the account of the {} login is not in intercept.json",
                    l.name()
                )
            })?,
        )),
    };
    Ok(Prepared {
        server: Arc::new(server),
        client: Arc::new(client),
        secret,
        account,
    })
}

/// The configurations built for each intercepted host, kept while its intercept and the
/// intercept file they came from are the ones in force: a handshake costs a handshake, not
/// a copy of the host's roots and a parse of the leaf's key.
#[derive(Default)]
pub(super) struct Cache(HashMap<String, (Intercept, Arc<InterceptFile>, Arc<Prepared>)>);

impl Cache {
    /// The configurations for `i` under `file`, built if they are not yet.
    pub(super) fn get(
        &mut self,
        i: &Intercept,
        file: &Arc<InterceptFile>,
    ) -> Result<Arc<Prepared>, String> {
        if let Some((ci, cf, p)) = self.0.get(&i.host)
            && ci == i
            && Arc::ptr_eq(cf, file)
        {
            return Ok(p.clone());
        }
        let p = Arc::new(prepare(i, file)?);
        // What an older file built is of no more use.
        self.0.retain(|_, (_, f, _)| Arc::ptr_eq(f, file));
        self.0
            .insert(i.host.clone(), (i.clone(), file.clone(), p.clone()));
        Ok(p)
    }
}

/// One member connection, after its CONNECT was answered 200. Its rules and secret are not
/// kept: each request is judged by the intercept in force when it arrives.
struct Conn {
    /// What the CONNECT asked for.
    host: String,
    port: u16,
    addr: SocketAddr,
    upstream: tokio::sync::Mutex<Upstream>,
    /// How long connecting to the upstream again may take.
    connect_timeout: Duration,
}

struct Upstream {
    /// The connection `decide` made, used for the first request.
    first: Option<TcpStream>,
    sender: Option<hyper::client::conn::http1::SendRequest<Body>>,
    /// The configuration `sender`'s TLS was made with: another one (a new upstream CA) makes
    /// a new connection.
    client: Option<Arc<rustls::ClientConfig>>,
}

/// What one intercepted CONNECT was given: the host and port it asked for, the intercept
/// that matched, the upstream connection, the TLS configurations, and its place among the
/// handshakes (given back once the member's handshake ended).
pub(super) struct Accepted {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) i: Intercept,
    pub(super) upstream: (SocketAddr, TcpStream),
    pub(super) prepared: Arc<Prepared>,
    pub(super) permit: tokio::sync::OwnedSemaphorePermit,
    pub(super) limits: Limits,
}

/// Serves the member's TLS connection until it closes, or until its host is no longer
/// intercepted (revoked by an apply): then it is closed, even while idle.
pub(super) async fn serve<S, P: Proxy>(member: S, a: Accepted, state: Arc<P>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Accepted {
        host,
        port,
        i,
        upstream: (addr, tcp),
        prepared,
        permit,
        limits,
    } = a;
    let name = server_name(&i);
    let refuse = |status: u16, reason: String| {
        state.record(event(
            &name,
            port,
            "CONNECT",
            None,
            Some(addr),
            status,
            Some(reason),
        ));
    };
    let start = match tokio::time::timeout(
        limits.head,
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), member),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return refuse(400, format!("no TLS from the member: {e}")),
        Err(_) => return refuse(408, "no TLS from the member in time".into()),
    };
    if let Some(sni) = start.client_hello().server_name()
        && !sni.trim_end_matches('.').eq_ignore_ascii_case(&name)
    {
        return refuse(403, format!("the TLS server name {sni} is not {name}"));
    }
    let tls =
        match tokio::time::timeout(limits.head, start.into_stream(prepared.server.clone())).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return refuse(400, format!("TLS with the member failed: {e}")),
            Err(_) => return refuse(408, "the member's TLS handshake did not end in time".into()),
        };
    drop((permit, prepared));
    let conn = Arc::new(Conn {
        host,
        port,
        addr,
        upstream: tokio::sync::Mutex::new(Upstream {
            first: Some(tcp),
            sender: None,
            client: None,
        }),
        connect_timeout: limits.connect,
    });
    let svc = {
        let (conn, state) = (conn.clone(), state.clone());
        hyper::service::service_fn(move |req| {
            let conn = conn.clone();
            let state = state.clone();
            async move { Ok::<_, Infallible>(one(&conn, &*state, req).await) }
        })
    };
    let mut tls = tls;
    let served = {
        let serving = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.head)
            // Exact, unlike the buffer's bound (about 400 KiB), which holds only while a head
            // is incomplete: one that arrived whole in one read (a loaded machine) passed it.
            .max_header_size(MAX_HEAD_BYTES)
            .serve_connection(TokioIo::new(&mut tls), svc);
        tokio::select! {
            served = serving => served,
            () = state.revoked(&conn.host, port, true) => {
                refuse(403, format!("{name}:{port} is no longer allowed with these rules: its open connection is closed"));
                return;
            }
        }
    };
    if served.is_err() {
        linger(&mut tls).await;
    }
}

/// How long, and how much, a connection hyper gave up on (a head too large, a malformed
/// request) is still read before it is closed.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

/// Reads and drops what the member still sends after its refusal (431, 400) was written, for
/// a bounded time and size, then closes: closing with unread bytes makes the kernel reset the
/// connection, and a reset can reach the member before the refusal it should read (as web
/// servers' lingering close).
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = s.flush().await;
    let _ = tokio::time::timeout(LINGER, async {
        let mut buf = vec![0u8; 16 * 1024];
        let mut read = 0;
        while read < LINGER_BYTES {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
    let _ = s.shutdown().await;
}

fn event(
    host: &str,
    port: u16,
    method: &str,
    path: Option<&str>,
    addr: Option<SocketAddr>,
    status: u16,
    reason: Option<String>,
) -> Event {
    Event {
        ts: Event::now(),
        verdict: match status {
            0..400 => Logged::Allowed,
            500.. => Logged::Failed,
            _ => Logged::Refused,
        },
        method: method.to_string(),
        host: host.to_string(),
        port,
        path: path.map(str::to_string),
        addr: addr.map(|a| a.to_string()),
        status,
        reason,
        count: None,
        learned: false,
    }
}

/// The most a request's head (its line and headers) may take: real clients stay far below
/// (Node's own server takes 16 KiB); past it the answer is 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// One request: judged by the intercept in force now (a revoked host closes the
/// connection; a changed secret or rule applies from this request on), then answered here
/// or sent on.
async fn one<P: Proxy>(c: &Conn, state: &P, mut req: Request<Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    // Origin-form only: an absolute URI or an authority is not what a glob judged.
    let target = match (req.uri().authority(), req.uri().path_and_query()) {
        (None, Some(pq)) => pq.as_str().to_string(),
        _ => req.uri().to_string(),
    };
    let (i, prepared) = match state.intercept_in_force(&c.host, c.port) {
        Ok(Some(x)) => x,
        Ok(None) | Err(_) => {
            let why = format!(
                "{}:{} is no longer allowed with these rules: connect again",
                c.host, c.port
            );
            state.record(event(
                &c.host,
                c.port,
                &method,
                Some(&path),
                Some(c.addr),
                403,
                Some(why.clone()),
            ));
            let mut r = refusal(403, &why, None);
            r.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
            return r;
        }
    };
    let name = server_name(&i);
    let log = |status: u16, reason: Option<String>| {
        state.record(event(
            &name,
            c.port,
            &method,
            Some(&path),
            Some(c.addr),
            status,
            reason,
        ));
    };
    let (remove, inject) = match judge::judge(&i, c.port, &method, &target, req.headers()) {
        Verdict::Allowed { remove, inject } => (remove, inject),
        Verdict::Refused {
            status,
            reason,
            git,
        } => {
            log(status, Some(reason.clone()));
            return refusal(status, &reason, git);
        }
    };
    let h = req.headers_mut();
    strip_hop(h, &remove, &name, c.port);
    let injected = match inject_credential(h, inject.as_ref(), &prepared) {
        Ok(said) => said,
        Err(why) => {
            log(503, Some(why.clone()));
            return refusal(503, &why, None);
        }
    };
    // Trailers arrive after the body, too late to be judged before the head went on: none is
    // sent (hyper would send those the `Trailer` header names, planted credentials too).
    let req = req.map(|b| {
        b.map_frame(|f| {
            if f.is_trailers() {
                Frame::data(Bytes::new())
            } else {
                f
            }
        })
        .boxed()
    });
    match send(c, &name, &prepared.client, req).await {
        Ok(resp) => {
            log(resp.status().as_u16(), injected);
            resp.map(BodyExt::boxed)
        }
        Err(why) => {
            log(502, Some(why.clone()));
            refusal(502, &why, None)
        }
    }
}

/// Takes off what is of this hop (the judge's `remove`, what `Connection` names, the
/// hop-by-hop headers) and names the host when the client did not.
fn strip_hop(h: &mut http::HeaderMap, remove: &[String], name: &str, port: u16) {
    // Headers `Connection` names are of this hop too.
    let nominated: Vec<String> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    for n in remove
        .iter()
        .chain(&nominated)
        .map(String::as_str)
        .chain(HOP_BY_HOP)
    {
        h.remove(n);
    }
    if !h.contains_key(http::header::HOST) {
        let host = match port {
            443 => name.to_string(),
            p => format!("{name}:{p}"),
        };
        if let Ok(v) = host.parse() {
            h.insert(http::header::HOST, v);
        }
    }
}

/// Puts the credential the judge chose into the request (marked sensitive), with its
/// account header; what the log says of it. `Err`: the secret's value is not a header value.
fn inject_credential(
    h: &mut http::HeaderMap,
    inject: Option<&crate::core::intercept::Credential>,
    prepared: &Prepared,
) -> Result<Option<String>, String> {
    let (Some(cred), Some(value)) = (inject, &prepared.secret) else {
        return Ok(None);
    };
    let (hname, v) = judge::injected(cred, value);
    match (
        http::HeaderName::from_bytes(hname.as_bytes()),
        http::HeaderValue::from_str(&v),
    ) {
        (Ok(n), Ok(mut v)) => {
            v.set_sensitive(true);
            h.insert(n, v);
        }
        _ => {
            return Err(format!(
                "the value of secret {} is not a header value",
                cred.secret()
            ));
        }
    }
    if let Some((header, id)) = &prepared.account
        && let Ok(v) = http::HeaderValue::from_str(id)
    {
        h.insert(*header, v);
    }
    Ok(Some(match cred.login() {
        Some(l) => format!("injected the {} login", l.name()),
        None => format!("injected secret {}", cred.secret()),
    }))
}

/// Headers of one hop, never sent on; `trailer` and `te` announce trailers, which are not.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "upgrade",
    "trailer",
    "te",
];

/// Sends on the upstream connection, making it (again) when there is none, it closed, or it
/// was made with another TLS configuration than the one in force.
async fn send(
    c: &Conn,
    name: &str,
    client: &Arc<rustls::ClientConfig>,
    req: Request<Body>,
) -> Result<Response<Incoming>, String> {
    let mut up = c.upstream.lock().await;
    let usable = up.sender.as_mut().is_some_and(|s| !s.is_closed())
        && up.client.as_ref().is_some_and(|k| Arc::ptr_eq(k, client));
    if !usable {
        up.sender = None;
        let tcp = match up.first.take() {
            Some(t) => t,
            None => tokio::time::timeout(c.connect_timeout, TcpStream::connect(c.addr))
                .await
                .map_err(|_| format!("connecting to {} timed out", c.addr))?
                .map_err(|e| format!("cannot connect to {}: {e}", c.addr))?,
        };
        let _ = tcp.set_nodelay(true);
        let sn = ServerName::try_from(name.to_string())
            .map_err(|e| format!("{name} is not a TLS server name: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(client.clone())
            .connect(sn, tcp)
            .await
            .map_err(|e| format!("TLS with {name} ({}) failed: {e}", c.addr))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP with {name} failed: {e}"))?;
        tokio::spawn(conn);
        up.sender = Some(sender);
        up.client = Some(client.clone());
    }
    let sender = up.sender.as_mut().expect("made above");
    sender
        .ready()
        .await
        .map_err(|e| format!("the connection to {name} closed: {e}"))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| format!("{name} did not answer: {e}"))
}

/// The proxy's own answer to a request: for git's advertisement, one git prints (`fatal:
/// remote error: ateam egress: ...`); otherwise the status with the reason in its line and
/// body.
fn refusal(status: u16, reason: &str, git: Option<GitService>) -> Response<Body> {
    let phrase: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let full = |b: String| Full::new(Bytes::from(b)).map_err(|n| match n {}).boxed();
    let mut r = match git {
        Some(s) => {
            let line = format!("ERR ateam egress: {phrase}\n");
            let pkt = format!("{:04x}{line}", line.len() + 4);
            let mut r = Response::new(full(pkt));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_str(&format!("application/x-{}-advertisement", s.name()))
                    .expect("a fixed header"),
            );
            r
        }
        None => {
            let mut r = Response::new(full(format!("ateam egress: {phrase}\n")));
            *r.status_mut() =
                http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::FORBIDDEN);
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            if let Ok(p) =
                hyper::ext::ReasonPhrase::try_from(format!("ateam egress: {phrase}").into_bytes())
            {
                r.extensions_mut().insert(p);
            }
            r
        }
    };
    r.headers_mut()
        .insert("x-ateam-egress", http::HeaderValue::from_static("refused"));
    r
}

/// The member's stream with what it sent after its CONNECT head (already read) in front.
pub(super) struct Prefixed<S> {
    pub(super) head: Vec<u8>,
    pub(super) inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.head.is_empty() {
            let n = self.head.len().min(buf.remaining());
            buf.put_slice(&self.head[..n]);
            self.head.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn icpt(host: &str) -> Intercept {
        Intercept {
            host: host.into(),
            credentials: None,
            http: vec![],
            git: None,
            upstream_ca: None,
        }
    }

    #[test]
    fn an_intercept_applies_on_its_port_and_no_tunnel_passes_it_by() {
        let is = [icpt("api.example.com"), icpt("host.ateam.internal:8080")];
        assert!(matches!(
            route(&is, "API.example.com", 443, true),
            Route::Intercept(_)
        ));
        assert!(matches!(
            route(&is, "api.example.com", 80, true),
            Route::Refuse(_)
        ));
        assert!(
            matches!(route(&is, "api.example.com", 80, false), Route::Refuse(r) if r.contains("use https"))
        );
        assert!(matches!(
            route(&is, "host.ateam.internal", 8080, true),
            Route::Intercept(_)
        ));
        assert!(matches!(
            route(&is, "other.example.com", 443, true),
            Route::Tunnel
        ));
        assert!(matches!(
            route(&is, "host.ateam.internal", 9090, true),
            Route::Tunnel
        ));
    }
}
