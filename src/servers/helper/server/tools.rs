//! The team's tools for this server's member: MCP (`app::team_tools`) on its second socket,
//! `/.ateam/mcp.sock`, which is the member's alone (0600, its uid's), so that every call
//! on it is that member's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;

use super::Config;
use crate::app::team_tools::TeamTools;
use crate::board::Actor;
use crate::core::layout;
use crate::files::Owner;

/// Sessions at once: an agent keeps one open for its run; a few more for its subagents.
const MAX_SESSIONS: usize = 8;
/// Longest line a member may send (a message is 8 KiB, a task 16 KiB, a request 64 KiB):
/// longer ones are dropped unread, and the connection stays.
const MAX_LINE: usize = 256 * 1024;

/// Binds the socket and serves it on a thread of its own, with its own runtime.
pub(super) fn listen(cfg: &Arc<Config>) -> std::io::Result<()> {
    let path = layout::mcp_socket_path(&cfg.state_dir, &cfg.team, &cfg.member);
    let (listener, _) = crate::files::bind_private_socket(&path, Some(cfg.socket_owner))?;
    listener.set_nonblocking(true)?;
    let store_owner = {
        let m = std::fs::metadata(&cfg.state_dir)?;
        Owner {
            uid: std::os::unix::fs::MetadataExt::uid(&m),
            gid: std::os::unix::fs::MetadataExt::gid(&m),
        }
    };
    // The board's files are read and written on blocking threads: few, so that a member's
    // calls never hold more of the host than these.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build()?;
    let pace = Arc::new(crate::app::team_tools::Pace::default());
    let cfg = cfg.clone();
    std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = tokio::net::UnixListener::from_std(listener) else {
                return;
            };
            let busy = Arc::new(AtomicUsize::new(0));
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                };
                if busy.fetch_add(1, Ordering::SeqCst) >= MAX_SESSIONS {
                    busy.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let tools = TeamTools::new(
                    &cfg.state_dir,
                    &cfg.team,
                    Actor::Member(cfg.member.clone()),
                    store_owner,
                    pace.clone(),
                );
                let busy = busy.clone();
                tokio::spawn(async move {
                    let (r, w) = conn.into_split();
                    let transport = AsyncRwTransport::new(r, w).with_max_line_length(MAX_LINE);
                    if let Ok(running) = tools.serve(transport).await {
                        let _ = running.waiting().await;
                    }
                    busy.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    });
    Ok(())
}
