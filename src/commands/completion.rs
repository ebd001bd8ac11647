//! Shell completion scripts and man pages, both generated from the clap definition, so they
//! never fall behind the commands.

use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use super::exit::Exit;
use crate::cli::Cli;

pub fn completion(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    clap_complete::generate(shell, &mut Cli::command(), "ateam", &mut std::io::stdout());
    Ok(Exit::Ok)
}

/// ateam(1) on stdout, or into `dir` with a page per command (`ateam-apply.1`, ...).
pub fn man(dir: Option<&Path>) -> anyhow::Result<Exit> {
    let cmd = Cli::command();
    match dir {
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .context("writing the man page")?,
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            clap_mangen::generate_to(cmd, d)
                .with_context(|| format!("writing man pages into {}", d.display()))?;
        }
    }
    Ok(Exit::Ok)
}
