//! Docker: what runs in a container and what comes out of it: a command, the logs, the
//! terminal's size, a path's stat and a file's content.

use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::LogsOptions;
use futures_util::stream::StreamExt;

use super::errors::status_of;
use super::{DockerBackend, ENGINE};
use crate::backend::{BackendError, ExecOutput, LogOptions, PathStat, Result};

pub(super) async fn exec(b: &DockerBackend, id: &str, cmd: &[String]) -> Result<ExecOutput> {
    let config = CreateExecOptions {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(cmd.to_vec()),
        ..Default::default()
    };
    let exec = b
        .docker
        .create_exec(id, config)
        .await
        .map_err(|e| b.container_err("create exec", id, e))?;
    let started = b
        .docker
        .start_exec(&exec.id, Some(StartExecOptions::default()))
        .await
        .map_err(|e| b.engine_err("start exec", e))?;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(chunk) = output.next().await {
            match chunk.map_err(|e| b.engine_err("exec output", e))? {
                bollard::container::LogOutput::StdErr { message } => {
                    stderr.extend_from_slice(&message)
                }
                other @ (bollard::container::LogOutput::StdOut { .. }
                | bollard::container::LogOutput::StdIn { .. }
                | bollard::container::LogOutput::Console { .. }) => {
                    stdout.extend_from_slice(&other.into_bytes())
                }
            }
        }
    }
    // The output can end a moment before the engine records the exit code.
    let mut code = None;
    for _ in 0..100 {
        let info = b
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| b.engine_err("inspect exec", e))?;
        if info.running != Some(true)
            && let Some(c) = info.exit_code
        {
            code = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let code = code.ok_or_else(|| BackendError::Engine {
        engine: ENGINE.into(),
        op: "exec".into(),
        message: format!("`{}` ended its output but no exit code came", cmd.join(" ")),
    })?;
    Ok(ExecOutput {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

pub(super) async fn logs(
    b: &DockerBackend,
    id: &str,
    o: LogOptions,
    sink: &mut crate::backend::LogSink<'_>,
) -> Result<()> {
    let opts = LogsOptions {
        stdout: true,
        stderr: true,
        follow: o.follow,
        tail: o.tail.to_string(),
        since: o.since.map_or(0, |s| i32::try_from(s).unwrap_or(i32::MAX)),
        timestamps: o.timestamps,
        ..Default::default()
    };
    let mut stream = b.docker.logs(id, Some(opts));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| b.container_err("logs", id, e))?;
        sink(&chunk.into_bytes());
    }
    Ok(())
}

pub(super) async fn resize_terminal(
    b: &DockerBackend,
    id: &str,
    rows: u16,
    cols: u16,
) -> Result<()> {
    let opts = bollard::query_parameters::ResizeContainerTTYOptions {
        h: i32::from(rows),
        w: i32::from(cols),
    };
    b.docker
        .resize_container_tty(id, opts)
        .await
        .map_err(|e| b.container_err("resize container", id, e))
}

pub(super) async fn stat(b: &DockerBackend, id: &str, path: &str) -> Result<Option<PathStat>> {
    let opts = bollard::query_parameters::ContainerArchiveInfoOptions {
        path: path.to_string(),
    };
    match b.docker.get_container_archive_info(id, Some(opts)).await {
        Ok(s) => Ok(Some(PathStat {
            mode: s.file_mode,
            link_target: s.link_target,
        })),
        // A HEAD answer has no body: a missing path and a missing container both say 404
        // alone. The caller's probe exists, so it is the path.
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(b.container_err("stat path", id, e)),
    }
}

pub(super) async fn read_file(
    b: &DockerBackend,
    id: &str,
    path: &str,
    max: u64,
) -> Result<Option<Vec<u8>>> {
    let opts = bollard::query_parameters::DownloadFromContainerOptions {
        path: path.to_string(),
    };
    let mut stream = b.docker.download_from_container(id, Some(opts));
    let mut tar = Vec::new();
    // The archive's header and padding come on top of the file.
    let limit = max.saturating_add(64 * 1024) as usize;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => tar.extend_from_slice(&b),
            Err(e) if status_of(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(b.container_err("read file", id, e)),
        }
        if tar.len() > limit {
            return Ok(None);
        }
    }
    Ok(crate::backend::file_in_archive(&tar, max))
}
