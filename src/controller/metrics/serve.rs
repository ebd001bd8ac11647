//! The metrics endpoint: hyper on the controller's runtime, GET /metrics only.
//!
//! A scrape reads the status figures through a cache of [`CACHE_FOR`]: one look at the engine
//! at most that often, however hard the endpoint is hit (concurrent scrapes wait for the one
//! look under way), bounded by [`LOOK_TIMEOUT`]. The endpoint runs in its own tasks, beside the
//! reconciles and never inside one; it takes no lock a reconcile takes (status reads the store
//! without the store's lock, as `ateam status` does).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Metrics, Snapshot};
use crate::app::AppError;
use crate::report::StatusDocument;

/// How long one status look serves scrapes.
pub const CACHE_FOR: Duration = Duration::from_secs(5);
/// A look that takes longer is given up (the engine hangs): the scrape says `ateam_status_ok 0`.
pub const LOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 8;
/// A connection must send its request headers this quickly.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// And is closed after this long whatever it does (a scraper reconnects).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// Where the status figures come from: the controller's teams, through `app::status::status`.
pub trait StatusSource: Send + Sync + 'static {
    /// What `ateam status` would report for the controller's teams now.
    fn status(&self) -> impl Future<Output = Result<StatusDocument, AppError>> + Send;
    /// Helper requests by (team, outcome) among the events the state folder keeps.
    fn helper_requests(&self) -> BTreeMap<(String, &'static str), u64> {
        BTreeMap::new()
    }
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error("--metrics {addr}: cannot listen: {source}")]
    /// The address could not be bound (taken, or not this machine's).
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Binds `addr` (before the controller starts, so that a taken port is an error at once).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Everything a connection needs.
struct Shared<S> {
    metrics: Arc<Metrics>,
    source: Arc<S>,
    /// When the figures were last looked at; held during a look (single flight).
    looked: tokio::sync::Mutex<Option<Instant>>,
}

impl<S: StatusSource> Shared<S> {
    /// Looks again if the last look is older than [`CACHE_FOR`].
    async fn refresh(&self) {
        let mut looked = self.looked.lock().await;
        if looked.is_some_and(|t| t.elapsed() < CACHE_FOR) {
            return;
        }
        let start = Instant::now();
        let snapshot = match tokio::time::timeout(LOOK_TIMEOUT, self.source.status()).await {
            Ok(Ok(doc)) => {
                let mut s = Snapshot::of(&doc, start.elapsed());
                s.helper_requests = self.source.helper_requests();
                s
            }
            Ok(Err(e)) => {
                warn!(error = %e, "metrics: the status look failed");
                Snapshot::failed(start.elapsed())
            }
            Err(_) => {
                warn!(
                    timeout_s = LOOK_TIMEOUT.as_secs(),
                    "metrics: the status look timed out"
                );
                Snapshot::failed(start.elapsed())
            }
        };
        self.metrics.set_snapshot(snapshot);
        *looked = Some(Instant::now());
    }

    async fn answer(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let plain = |status: StatusCode, text: &'static str| {
            let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
            *r.status_mut() = status;
            r
        };
        if req.uri().path() != "/metrics" {
            return plain(StatusCode::NOT_FOUND, "the only path is /metrics\n");
        }
        if req.method() != Method::GET {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        }
        self.refresh().await;
        let mut r = Response::new(Full::new(Bytes::from(self.metrics.render())));
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            ),
        );
        r
    }
}

/// Serves GET /metrics on `listener` until `shutdown`; connections still open then are
/// dropped (a scrape is cheap to repeat).
pub async fn serve<S: StatusSource>(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    source: Arc<S>,
    shutdown: CancellationToken,
) {
    let shared = Arc::new(Shared {
        metrics,
        source,
        looked: tokio::sync::Mutex::new(None),
    });
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "metrics: serving /metrics");
    }
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, most likely: wait a little rather than spin.
                warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "metrics: too many connections; closing this one");
            continue;
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(shared.answer(req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                debug!(%peer, error = %e, "metrics: connection ended");
            }
        });
    }
    connections.shutdown().await;
}
