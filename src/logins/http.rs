//! The one request ateam makes for a login: a JSON `POST` to its token endpoint over TLS,
//! verified against the machine's roots and the login's own CA. `host.ateam.internal` is
//! this machine's loopback, as for members (a test's stand-in), never resolved.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::core::egress::{HOST_SERVICE, HOST_SERVICE_ADDRS};

/// The whole exchange, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The most of an answer read: a token answer is a few KiB.
const MAX_ANSWER: usize = 256 * 1024;

/// Sends `body` to `url` (https only) and returns the status and the answer's body. The
/// error is a sentence (never a token: the body is not quoted).
pub fn post_json(
    url: &str,
    ca_pem: Option<&str>,
    body: &serde_json::Value,
) -> Result<(u16, Vec<u8>), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("the token URL `{url}` is not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!("the token URL `{url}` is not https://"));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("the token URL `{url}` has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(443);
    let path = uri
        .path_and_query()
        .map_or("/".to_string(), |p| p.as_str().to_string());
    let config = client_config(ca_pem)?;
    let payload = body.to_string();
    // Its own thread and runtime: callers are synchronous, some inside a runtime already.
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"))?;
            rt.block_on(async {
                tokio::time::timeout(TIMEOUT, exchange(&host, port, &path, config, payload))
                    .await
                    .map_err(|_| {
                        format!("{host}:{port} did not answer within {}s", TIMEOUT.as_secs())
                    })?
            })
        })
        .join()
        .map_err(|_| "the refresh's thread panicked".to_string())?
    })
}

fn client_config(ca_pem: Option<&str>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    if let Some(pem) = ca_pem {
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let c = c.map_err(|e| format!("the login's CA is not PEM: {e}"))?;
            roots
                .add(c)
                .map_err(|e| format!("the login's CA is not usable: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn exchange(
    host: &str,
    port: u16,
    path: &str,
    config: Arc<rustls::ClientConfig>,
    payload: String,
) -> Result<(u16, Vec<u8>), String> {
    let addrs: Vec<SocketAddr> = if host == HOST_SERVICE {
        HOST_SERVICE_ADDRS
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect()
    } else {
        tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .collect()
    };
    let mut last = format!("{host} has no address");
    let mut tcp = None;
    for a in addrs {
        match tokio::net::TcpStream::connect(a).await {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {host}:{port} ({a}): {e}"),
        }
    }
    let tcp = tcp.ok_or(last)?;
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host} is not a TLS server name: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with {host}:{port} failed: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP with {host} failed: {e}"))?;
    let driver = tokio::spawn(conn);
    let authority = if port == 443 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    let req = http::Request::post(path)
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("ateam/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("{host} did not answer: {e}"))?;
    let status = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("reading {host}'s answer: {e}"))?
        .to_bytes()
        .to_vec();
    driver.abort();
    Ok((status, body))
}
