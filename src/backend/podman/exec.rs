//! Podman: what runs in a container and what comes out of it: a command, the logs, the
//! terminal's size, a path's stat and a file's content.

use std::time::Duration;

use base64::Engine as _;
use containers_api::conn::TtyChunk;
use containers_api::conn::hyper::StatusCode;
use futures_util::StreamExt;
use podman_api::opts::{ContainerLogsOpts, ExecCreateOpts, ExecStartOpts};
use serde_json::Value;

use super::errors::{container_err, engine_err, status_of};
use super::{ENGINE, LIBPOD, PodmanBackend};
use crate::backend::{BackendError, ExecOutput, LogOptions, PathStat, Result};

pub(super) async fn exec(b: &PodmanBackend, id: &str, cmd: &[String]) -> Result<ExecOutput> {
    let opts = ExecCreateOpts::builder()
        .command(cmd.iter().cloned())
        .attach_stdout(true)
        .attach_stderr(true)
        .build();
    let exec = b
        .podman
        .containers()
        .get(id)
        .create_exec(&opts)
        .await
        .map_err(|e| container_err("exec", id, &e))?;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    // Without a TTY the libpod stream is multiplexed (8-byte frame headers); podman-api's
    // Multiplexer splits it.
    if let Some(mut stream) = exec
        .start(&ExecStartOpts::builder().build())
        .await
        .map_err(|e| container_err("exec start", id, &e))?
    {
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(TtyChunk::StdOut(b)) => stdout.extend(b),
                Ok(TtyChunk::StdErr(b)) => stderr.extend(b),
                Ok(TtyChunk::StdIn(_)) => {}
                Err(e) => {
                    return Err(BackendError::Engine {
                        engine: ENGINE.into(),
                        op: "exec".into(),
                        message: e.to_string(),
                    });
                }
            }
        }
    }
    // The stream ends when the process does; the exit code is recorded right after, so
    // wait briefly for the session to say it is no longer running.
    let mut code = None;
    for _ in 0..50 {
        let v = exec
            .inspect()
            .await
            .map_err(|e| engine_err("exec inspect", &e))?;
        if !v.get("Running").and_then(Value::as_bool).unwrap_or(false) {
            code = v.get("ExitCode").and_then(Value::as_i64);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let code = code.ok_or_else(|| BackendError::Engine {
        engine: ENGINE.into(),
        op: "exec".into(),
        message: "the command's exit code never appeared".into(),
    })?;
    Ok(ExecOutput {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

pub(super) async fn logs(
    b: &PodmanBackend,
    id: &str,
    o: LogOptions,
    sink: &mut crate::backend::LogSink<'_>,
) -> Result<()> {
    let mut opts = ContainerLogsOpts::builder()
        .stdout(true)
        .stderr(true)
        .follow(o.follow)
        .tail(o.tail.to_string())
        .timestamps(o.timestamps);
    if let Some(since) = o.since {
        opts = opts.since(since.to_string());
    }
    let opts = opts.build();
    let container = b.podman.containers().get(id);
    let mut stream = container.logs(&opts);
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => sink(&Vec::from(c)),
            Err(e) => return Err(container_err("logs", id, &e)),
        }
    }
    Ok(())
}

pub(super) async fn resize_terminal(
    b: &PodmanBackend,
    id: &str,
    rows: u16,
    cols: u16,
) -> Result<()> {
    b.podman
        .containers()
        .get(id)
        .resize(usize::from(cols), usize::from(rows))
        .await
        .map_err(|e| container_err("resize", id, &e))
}

pub(super) async fn stat(b: &PodmanBackend, id: &str, path: &str) -> Result<Option<PathStat>> {
    let ep = containers_api::url::construct_ep(
        format!("{LIBPOD}/containers/{id}/archive"),
        Some(containers_api::url::encoded_pair("path", path)),
    );
    let response = match b.raw.head(ep).await {
        Ok(r) => r,
        // No body to tell a missing path from a missing container: the caller's probe
        // exists, so it is the path.
        Err(e) if status_of(&e) == Some(StatusCode::NOT_FOUND) => return Ok(None),
        Err(e) => return Err(container_err("stat path", id, &e)),
    };
    let bad = |message: String| BackendError::Engine {
        engine: ENGINE.into(),
        op: "stat path".into(),
        message,
    };
    let header = response
        .headers()
        .get("X-Docker-Container-Path-Stat")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| bad(format!("no path stat for {path}")))?;
    let json = base64::engine::general_purpose::STANDARD
        .decode(header)
        .map_err(|e| bad(format!("unreadable path stat for {path}: {e}")))?;
    serde_json::from_slice(&json)
        .map(Some)
        .map_err(|e| bad(format!("unreadable path stat for {path}: {e}")))
}

pub(super) async fn read_file(
    b: &PodmanBackend,
    id: &str,
    path: &str,
    max: u64,
) -> Result<Option<Vec<u8>>> {
    let containers = b.podman.containers();
    let c = containers.get(id);
    let mut stream = std::pin::pin!(c.copy_from(path));
    let mut tar = Vec::new();
    // The archive's header and padding come on top of the file.
    let limit = max.saturating_add(64 * 1024) as usize;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => tar.extend_from_slice(&b),
            Err(e) if status_of(&e) == Some(StatusCode::NOT_FOUND) => return Ok(None),
            Err(e) => return Err(container_err("read file", id, &e)),
        }
        if tar.len() > limit {
            return Ok(None);
        }
    }
    Ok(crate::backend::file_in_archive(&tar, max))
}
