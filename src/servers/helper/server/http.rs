//! Just enough HTTP/1.1 for a helper server: one request read within its limits (head, body,
//! time), one answer written with its refusal in the status line. Apart from the server's
//! loop so that the limits a hostile member meets are tested without a socket.
//!
//! The head ends at its first `\r\n\r\n`, as the egress proxy's does, and is parsed by
//! `httparse`, as the proxy's is: a head it refuses (a folded header, a request line with
//! extra spaces or no version, a space before a header's colon) is answered 400.

use std::io::{Read, Write};
use std::time::Instant;

const MAX_HEAD: usize = 8 * 1024;
const MAX_BODY: usize = 64 * 1024;

/// What `read_request` says of a connection closed before its first byte: the liveness
/// check of `status`, apply and the controller (`servers::answers`).
pub(super) const CLOSED_EMPTY: &str = "the connection closed without a request";

/// One HTTP request as far as this server cares.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET`, `POST`...
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The request's body.
    pub body: Vec<u8>,
}

/// Reads one request from `r`, within the limits; the status to answer with if it cannot.
pub fn read_request(r: &mut impl Read, deadline: Instant) -> Result<HttpRequest, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err((431, format!("the request head is over {MAX_HEAD} bytes")));
        }
        if Instant::now() > deadline {
            return Err((408, "the request did not arrive in time".into()));
        }
        match r.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Err((400, CLOSED_EMPTY.into())),
            Ok(0) => return Err((400, "the connection closed before a whole request".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err((408, "the request did not arrive in time".into())),
        }
    };
    let head = &buf[..head_end];
    // As many places as the head could hold header lines (`a:\n`, 3 bytes): its size bounds
    // how many headers a request may have, as it did.
    let mut headers = vec![httparse::EMPTY_HEADER; head.len() / 3 + 1];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_end = match parsed.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Err((400, "not an HTTP request: no request line".into()));
        }
        Err(e) => return Err((400, format!("not an HTTP request: {e}"))),
    };
    let method = parsed.method.unwrap_or_default().to_string();
    let path = parsed.path.unwrap_or_default().to_string();
    let mut length = 0usize;
    for h in parsed.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = String::from_utf8_lossy(h.value)
                .trim()
                .parse()
                .map_err(|_| (400, "a bad Content-Length".to_string()))?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err((411, "send the body with a Content-Length".into()));
        }
    }
    if length > MAX_BODY {
        return Err((413, format!("a request body is at most {MAX_BODY} bytes")));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        if Instant::now() > deadline {
            return Err((408, "the request did not arrive in time".into()));
        }
        match r.read(&mut chunk) {
            Ok(0) => return Err((400, "the body is shorter than its Content-Length".into())),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err((408, "the request did not arrive in time".into())),
        }
    }
    body.truncate(length);
    Ok(HttpRequest { method, path, body })
}

/// Writes the answer. A refusal's reason phrase carries its rule and words too: busybox
/// `wget` shows the status line of an error, not its body.
pub(super) fn respond(w: &mut impl Write, status: u16, body: &serde_json::Value) {
    let plain = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let reason = match (body["rule"].as_str(), body["refused"].as_str()) {
        (Some(rule), Some(why)) => phrase(&format!("{plain} ({rule}): {why}")),
        (None, Some(why)) => phrase(&format!("{plain}: {why}")),
        _ => plain.to_string(),
    };
    let mut text = serde_json::to_string_pretty(body).expect("a value serializes");
    text.push('\n');
    let _ = write!(
        w,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// A reason phrase: one line of printable text, at most 400 bytes.
fn phrase(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > 400 {
        let mut cut = 400;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn read(bytes: &[u8]) -> Result<HttpRequest, (u16, String)> {
        read_request(
            &mut std::io::Cursor::new(bytes.to_vec()),
            Instant::now() + Duration::from_secs(5),
        )
    }

    #[test]
    fn reads_what_busybox_wget_sends() {
        let r = read(b"POST /helpers HTTP/1.1\r\nHost: 127.0.0.1:3129\r\nUser-Agent: Wget\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 13\r\n\r\n{\"name\":\"k\"}\n")
            .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/helpers");
        assert_eq!(r.body, b"{\"name\":\"k\"}\n");
    }

    #[test]
    fn hostile_requests_are_cut_short() {
        // A body over the limit is refused from its length, before it is read.
        let e = read(b"POST /helpers HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n").unwrap_err();
        assert_eq!(e.0, 413);
        // An endless head.
        let mut endless = b"POST /helpers HTTP/1.1\r\nX: ".to_vec();
        endless.extend(std::iter::repeat_n(b'a', 100_000));
        assert_eq!(read(&endless).unwrap_err().0, 431);
        // No length: chunked bodies are not read.
        let e = read(
            b"POST /helpers HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .unwrap_err();
        assert_eq!(e.0, 411);
        // A body shorter than it said, or a connection closed early.
        assert_eq!(
            read(b"POST /helpers HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(read(b"POST /hel").unwrap_err().0, 400);
        assert_eq!(
            read(b"POST /helpers HTTP/1.1\r\nContent-Length: x\r\n\r\n")
                .unwrap_err()
                .0,
            400
        );
    }

    /// What the hand-written reader this replaced did, kept: the head ends at its first
    /// `\r\n\r\n`, its size and the body's are bounded, and the headers that matter are
    /// found whatever their case.
    #[test]
    fn what_the_old_reader_refused_is_refused_alike() {
        // Bare LFs alone never end a head: the request is not whole when the client closes,
        // however httparse would have read it.
        assert_eq!(
            read(b"POST /helpers HTTP/1.1\nContent-Length: 2\n\n{}").unwrap_err(),
            (
                400,
                "the connection closed before a whole request".to_string()
            )
        );
        // One header too long, its head ended: too large all the same.
        let mut long = b"POST /helpers HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 20_000));
        long.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\n{}");
        assert_eq!(
            read(&long).unwrap_err(),
            (431, format!("the request head is over {MAX_HEAD} bytes"))
        );
        // Header names in any case.
        let e = read(b"POST /helpers HTTP/1.1\r\nTRANSFER-ENCODING: chunked\r\n\r\n").unwrap_err();
        assert_eq!(e.0, 411);
        let r = read(b"POST /helpers HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!(r.body, b"{}");
        // The last Content-Length counts, and its value may be padded.
        let r =
            read(b"POST /helpers HTTP/1.1\r\nContent-Length: 9\r\nContent-Length:  2 \r\n\r\n{}")
                .unwrap();
        assert_eq!(r.body, b"{}");
        // As many headers as fit in the head.
        let mut many = b"GET /helpers HTTP/1.1\r\n".to_vec();
        for _ in 0..1000 {
            many.extend_from_slice(b"a:\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(read(&many).unwrap().path, "/helpers");
    }

    /// Heads the old reader read loosely (skipping a folded line, taking an empty path from
    /// a request line with two spaces, reading a request line without a version, trimming a
    /// header's name) are refused as httparse refuses them, as the egress proxy does: 400,
    /// before the request is judged.
    #[test]
    fn a_head_httparse_refuses_is_a_bad_request() {
        for head in [
            &b"POST /helpers HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}"[..],
            b"POST  /helpers HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            b"POST /helpers\r\nContent-Length: 2\r\n\r\n{}",
            b"POST /helpers HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n",
            b"\r\n\r\n",
        ] {
            let (status, why) = read(head).unwrap_err();
            assert_eq!(status, 400, "{}", String::from_utf8_lossy(head));
            assert!(why.starts_with("not an HTTP request"), "{why}");
        }
    }

    /// A reader that gives one byte at a time, slowly: a request that does not arrive in
    /// time is given up, however much of it trickles in.
    struct Trickle(usize);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(20));
            self.0 += 1;
            buf[0] = b'a';
            Ok(1)
        }
    }

    #[test]
    fn a_slow_client_is_given_up() {
        let started = Instant::now();
        let e =
            read_request(&mut Trickle(0), Instant::now() + Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.0, 408);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_refusal_says_its_rule_in_the_status_line() {
        let mut out = Vec::new();
        respond(
            &mut out,
            422,
            &json!({"refused": "reads `/etc`,\nwhich...", "rule": "narrower-than-requester"}),
        );
        let text = String::from_utf8(out).unwrap();
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "HTTP/1.1 422 Unprocessable Content (narrower-than-requester): reads `/etc`, which..."
        );
        assert!(text.contains("\"rule\": \"narrower-than-requester\""));
    }
}
