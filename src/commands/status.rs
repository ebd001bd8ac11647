//! `ateam status [TEAM] [-w]`: one look at the machine (`app::status`, which `top` and the
//! metrics read too) as a table, JSON or YAML; with `--exit-code`, the drift verdict of `diff`.

use std::time::SystemTime;

use anyhow::bail;

use crate::cli::{Global, OptionalFiles, Output};
use ateam::app::App;
use ateam::core::selector::Selector;
use ateam::model::Model;
use ateam::report::{StatusDocument, render_controller, render_refusals, render_status};

use super::common::app;
use super::exit::Exit;
use super::output::print_document;

/// What `status` is asked for.
pub struct Args<'a> {
    pub team: Option<&'a str>,
    pub files: &'a OptionalFiles,
    pub output: Output,
    pub exit_code: bool,
    pub selector: Option<&'a Selector>,
    /// Print again whenever something changes (`status -w`), until interrupted.
    pub watch: bool,
}

/// With `exit_code`: 0 in sync, 1 drift (`Plan::drifted`, as diff). Otherwise 0. Errors as
/// `exit::classify` (an unknown team is a usage error).
pub async fn run(global: &Global, args: Args<'_>) -> anyhow::Result<Exit> {
    let ctx = app(global);
    if args.watch {
        return watch(&ctx, &args).await;
    }
    let (desired, doc) = look(&ctx, &args).await?;
    print(&ctx, &args, &desired, &doc, false)?;
    Ok(Exit::verdict(args.exit_code && doc.drifted))
}

/// The teams asked for and their status.
async fn look(ctx: &App, args: &Args<'_>) -> anyhow::Result<(Model, StatusDocument)> {
    // The engine lists while the teams are read.
    let early = ctx.begin_look();
    let mut desired = if args.files.files.is_empty() {
        ctx.applied(args.team)?
    } else {
        ctx.load(&args.files.files)?
    };
    if let Some(t) = args.team {
        desired.teams.retain(|x| x.name == t);
        if desired.teams.is_empty() {
            bail!("team `{t}` is not in these manifests");
        }
    }
    let doc = ateam::app::status::status_from(ctx, &desired, args.selector, early).await?;
    Ok((desired, doc))
}

/// `status -w`: looks every `WATCH_EVERY` and prints when what it shows changed (times and
/// usage figures, which move at every look, are not a change). A failed look is printed
/// once and the watch goes on: an engine restarting is something to watch, not the end.
async fn watch(ctx: &App, args: &Args<'_>) -> anyhow::Result<Exit> {
    const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
    let mut last: Option<String> = None;
    loop {
        let shown = match look(ctx, args).await {
            Ok((desired, doc)) => {
                let key = doc.fingerprint();
                if last.as_deref() != Some(key.as_str()) {
                    print(ctx, args, &desired, &doc, last.is_some())?;
                }
                key
            }
            Err(e) => {
                let key = format!("error: {e:#}");
                if last.as_deref() != Some(key.as_str()) {
                    eprintln!("{key}");
                }
                key
            }
        };
        last = Some(shown);
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// One document: text, or JSON/YAML (`again`: a watch's next one, on one line as JSON, after
/// `---` as YAML, so a reader can take one per line or per document).
fn print(
    ctx: &App,
    args: &Args<'_>,
    desired: &Model,
    doc: &StatusDocument,
    again: bool,
) -> anyhow::Result<()> {
    let now = SystemTime::now();
    match args.output {
        Output::Text if again => outln!(""),
        Output::Yaml if again => outln!("---"),
        Output::Text | Output::Json | Output::Yaml => {}
    }
    if args.watch && args.output == Output::Json {
        outln!("{}", serde_json::to_string(doc)?);
        return Ok(());
    }
    if doc.teams.is_empty() && desired.teams.is_empty() {
        // For machines, an empty result is still a document.
        match args.output {
            Output::Text => {
                outln!(
                    "no teams applied (state folder {})",
                    ctx.host.state_dir.display()
                );
                // A running controller's word on teams it leaves deleted, its manifest errors.
                if doc.controller.as_ref().is_some_and(|c| c.running) {
                    out!("{}", render_controller(doc.controller.as_ref()));
                }
            }
            Output::Json | Output::Yaml => print_document(doc, args.output == Output::Yaml)?,
        }
        return Ok(());
    }
    match args.output {
        Output::Text => {
            out!("{}", render_status(&doc.teams, now));
            out!("{}", render_refusals(&doc.teams));
            out!("{}", render_controller(doc.controller.as_ref()));
        }
        Output::Json | Output::Yaml => print_document(doc, args.output == Output::Yaml)?,
    }
    Ok(())
}
