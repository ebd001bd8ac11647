//! A member's request as the proxy reads it: its head read within a bound of time and size,
//! parsed into what is judged (a CONNECT's `host:port`, or a plain request's absolute URL
//! with the head to send on), and the proxy's own answer when it refuses. Apart from the
//! connection's handling (`connection`) because reading and parsing is a job of its own,
//! tested alone.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::HEAD_TIMEOUT;
use super::intercept::Proxy as _;
use super::state::State;
use crate::servers::egress::log::{Event, Verdict};

/// Longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;

/// A request as far as the proxy needs it.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) host: String,
    pub(super) port: u16,
    /// For plain HTTP: the head to send upstream (origin-form, our own Host and Connection).
    pub(super) forward: Option<Vec<u8>>,
}

/// Why a request is answered by the proxy itself.
pub(super) struct Refused {
    pub(super) status: u16,
    pub(super) reason: String,
    /// For a failed connect: the address and the error alone, to be put in a sentence.
    pub(super) detail: String,
}

pub(super) fn refuse(status: u16, reason: impl Into<String>) -> Refused {
    let reason = reason.into();
    Refused {
        status,
        detail: reason.clone(),
        reason,
    }
}

/// The request's head, read within `HEAD_TIMEOUT` into `buf`, and its length; none when
/// the connection is answered already: a probe, a client gone, too slow (408), or a head
/// that does not parse (refused and logged).
pub(super) async fn read_request(
    conn: &mut UnixStream,
    buf: &mut Vec<u8>,
    state: &State,
) -> Option<(usize, Request)> {
    let head_len = match tokio::time::timeout(HEAD_TIMEOUT, read_head(conn, buf)).await {
        Ok(Ok(Some(n))) => n,
        // A probe (liveness check) or a client that went away: nothing to record.
        Ok(Ok(None)) | Ok(Err(_)) => return None,
        Err(_) => {
            let why = format!("no request within {}s", HEAD_TIMEOUT.as_secs());
            let _ = answer(conn, &refuse(408, why)).await;
            return None;
        }
    };
    match parse(&buf[..head_len]) {
        Ok(r) => Some((head_len, r)),
        Err(r) => {
            let _ = answer(conn, &r).await;
            state.record(Event {
                ts: Event::now(),
                verdict: Verdict::Refused,
                method: String::from_utf8_lossy(buf.split(|b| *b == b' ').next().unwrap_or(b""))
                    .chars()
                    .take(16)
                    .collect(),
                host: String::new(),
                port: 0,
                path: None,
                addr: None,
                status: r.status,
                reason: Some(r.reason),
                count: None,
                learned: false,
            });
            None
        }
    }
}

/// Reads until the end of the head (`\r\n\r\n`); `None` when the peer sent nothing at all.
async fn read_head(conn: &mut UnixStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(from + i + 4));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

/// `host:port` or `[v6]:port`.
fn split_authority(a: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port?,
            None => return None,
        };
        return Some((format!("[{h}]"), port));
    }
    match a.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((a.to_string(), default_port?)),
    }
}

fn parse(head: &[u8]) -> Result<Request, Refused> {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(refuse(400, "not an HTTP request")),
    }
    let method = r.method.unwrap_or_default().to_string();
    let target = r.path.unwrap_or_default();
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None)
            .ok_or_else(|| refuse(400, format!("CONNECT needs host:port, not `{target}`")))?;
        return Ok(Request {
            method,
            host,
            port,
            forward: None,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(if target.starts_with("https://") {
            refuse(
                501,
                "https through this proxy needs CONNECT (the client sent the URL in the clear)",
            )
        } else {
            refuse(
                400,
                format!("a proxy request needs an absolute http:// URL or CONNECT, not `{target}`"),
            )
        });
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = split_authority(authority, Some(80))
        .ok_or_else(|| refuse(400, format!("bad host in `{target}`")))?;
    let mut out = format!(
        "{method} {path} HTTP/1.{}\r\nHost: {authority}\r\n",
        r.version.unwrap_or(1)
    )
    .into_bytes();
    for h in r.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "host" | "connection" | "keep-alive" | "proxy-connection" | "proxy-authorization"
        ) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    // One request per connection: the next one is judged again, on its own connection.
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request {
        method,
        host,
        port,
        forward: Some(out),
    })
}

/// The proxy's own answer: the reason in the status line (clients such as busybox `wget`
/// print only that) and in the body.
pub(super) async fn answer(conn: &mut UnixStream, r: &Refused) -> std::io::Result<()> {
    let phrase: String = r
        .reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let body = format!("ateam egress: {phrase}\n");
    let head = format!(
        "HTTP/1.1 {} ateam egress: {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\nX-Ateam-Egress: refused\r\n\r\n",
        r.status,
        body.len()
    );
    conn.write_all(format!("{head}{body}").as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_into_what_is_judged() {
        let r = parse(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!(
            (r.method.as_str(), r.host.as_str(), r.port),
            ("CONNECT", "api.example.com", 443)
        );
        assert!(r.forward.is_none());
        let r = parse(b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n").ok().unwrap();
        assert_eq!((r.host.as_str(), r.port), ("[::1]", 8080));
        let r = parse(
            b"GET http://user@Example.com:8080/a?b HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .ok()
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("Example.com", 8080));
        let fwd = String::from_utf8(r.forward.unwrap()).unwrap();
        assert_eq!(
            fwd,
            "GET /a?b HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse(b"GET http://example.com HTTP/1.0\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!(r.port, 80);
        for (bad, status) in [
            (&b"GET https://example.com/ HTTP/1.1\r\n\r\n"[..], 501),
            (b"GET /local HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT example.com HTTP/1.1\r\n\r\n", 400),
            (b"\x16\x03\x01garbage\r\n\r\n", 400),
        ] {
            assert_eq!(parse(bad).err().map(|r| r.status), Some(status), "{bad:?}");
        }
    }
}
