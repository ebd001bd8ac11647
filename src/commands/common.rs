//! What the handlers share: the library's `App` for the global options.

use crate::cli::{BackendArg, Global};
use ateam::app::App;
use ateam::model::BackendChoice;

pub fn app(global: &Global) -> App {
    let backend = global.backend.map(|b| match b {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Docker => BackendChoice::Docker,
        BackendArg::Podman => BackendChoice::Podman,
    });
    App::new(global.state_dir.clone(), backend)
}

/// Told when a command waits for the store's lock.
pub fn waiting(holder: &str) {
    eprintln!("waiting for another ateam command to finish ({holder})...");
}
