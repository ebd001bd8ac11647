//! Command-line arguments (clap types only; the work is in `commands`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "ateam",
    version,
    about = "Declarative controller for local containers running teams of AI coding agents"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command understands.
#[derive(Debug, Args)]
pub struct Global {
    /// ateam's state folder (last applied manifests, locks, private files).
    #[arg(long, global = true, env = "ATEAM_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Where manifests come from.
#[derive(Debug, Args)]
pub struct Files {
    /// Manifest files or folders (recursive: *.yaml, *.yml); `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check manifests against every rule without touching anything.
    Validate {
        #[command(flatten)]
        files: Files,
        /// Print the resolved model (paths, defaults) as YAML when valid.
        #[arg(long)]
        show: bool,
    },
    /// Print the JSON Schema of the manifests (for editors: yaml-language-server).
    Schema,
}
