//! `ateam controller`: signals in, the library's loop, an exit code out.

use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::exit::Exit;
use crate::cli::{Files, Global};
use ateam::controller::backoff::CrashLoopConfig;
use ateam::controller::daemon::{self, Options};
use ateam::controller::metrics::listen_addr;

pub struct Opts {
    pub prune: bool,
    pub resync: Duration,
    pub once: bool,
    pub crash_backoff: Duration,
    pub crash_reset: Duration,
    pub concurrency: Option<usize>,
    pub metrics: Option<String>,
    pub metrics_allow_remote: bool,
}

pub fn run(global: &Global, files: &Files, o: Opts) -> anyhow::Result<Exit> {
    let metrics = match &o.metrics {
        Some(raw) => match listen_addr(raw, o.metrics_allow_remote) {
            Ok(a) => Some(a),
            // A usage error, as clap's own: the message, the usage line, exit 2.
            Err(e) => {
                use clap::CommandFactory;
                let mut cmd = crate::cli::Cli::command();
                // Built, so that the usage line says `ateam controller`.
                cmd.build();
                cmd.find_subcommand_mut("controller")
                    .expect("the controller subcommand exists")
                    .error(
                        clap::error::ErrorKind::ValueValidation,
                        format!("--metrics: {e}"),
                    )
                    .exit()
            }
        },
        None => None,
    };
    let app = super::common::app(global);
    let crash = CrashLoopConfig::new(
        o.crash_backoff,
        Duration::from_secs(300).max(o.crash_backoff),
        o.crash_reset,
    )
    .context("--crash-backoff")?;
    let opts = Options {
        paths: files.files.clone(),
        prune: o.prune,
        resync: o.resync.max(Duration::from_secs(1)),
        crash,
        concurrency: o.concurrency,
        metrics,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let converged = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let signals = shutdown.clone();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        // First signal: finish what runs, start nothing new. Second: stop at once.
        let watcher = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                if signals.is_cancelled() {
                    eprintln!("second signal: stopping at once");
                    std::process::exit(130);
                }
                tracing::info!("signal: finishing running reconciles, then stopping");
                signals.cancel();
            }
        });
        let result = daemon::run(app, opts, o.once, shutdown).await;
        watcher.abort();
        anyhow::Ok(result?)
    })?;
    Ok(Exit::verdict(!converged))
}
