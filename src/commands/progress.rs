//! Apply's progress: a line per member that updates in place on a terminal, plain lines
//! otherwise (CI logs, pipes). Log lines are written around the terminal display (see
//! `crate::logging::draw_around`), so neither garbles the other.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use ateam::execute::{Progress, Step};

pub enum Display {
    Terminal {
        multi: MultiProgress,
        bars: Mutex<BTreeMap<String, ProgressBar>>,
    },
    Plain,
}

impl Display {
    pub fn new() -> Display {
        if std::io::stderr().is_terminal() {
            let multi = MultiProgress::new();
            crate::logging::draw_around(Some(multi.clone()));
            Display::Terminal {
                multi,
                bars: Mutex::new(BTreeMap::new()),
            }
        } else {
            Display::Plain
        }
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        if let Display::Terminal { .. } = self {
            crate::logging::draw_around(None);
        }
    }
}

impl Progress for Display {
    fn step(&self, team: &str, member: &str, step: Step) {
        let who = format!("{team}/{member}");
        match self {
            Display::Plain => eprintln!("{who}: {step}"),
            Display::Terminal { multi, bars } => {
                let mut bars = bars.lock().unwrap_or_else(|e| e.into_inner());
                let bar = bars.entry(who.clone()).or_insert_with(|| {
                    let b = multi.add(ProgressBar::new_spinner());
                    b.set_style(
                        ProgressStyle::with_template("{spinner} {prefix:30} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    b.set_prefix(who.clone());
                    b.enable_steady_tick(std::time::Duration::from_millis(120));
                    b
                });
                if step.is_last() {
                    bar.finish_with_message(step.as_str());
                } else {
                    bar.set_message(step.as_str());
                }
            }
        }
    }
}
