//! Finding and reading manifest files: files, folders (recursive, sorted), and `-` for stdin.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::Problem;

/// One manifest file's text, and the folder its relative paths are taken from.
#[derive(Debug, Clone)]
pub struct Source {
    /// As the user named it; `<stdin>` for `-`.
    pub path: PathBuf,
    /// Absolute folder that relative paths in it resolve against.
    pub dir: PathBuf,
    pub text: String,
}

/// Reads every manifest that `args` name. Problems (unreadable files) are returned beside the
/// sources so that they are reported with everything else.
pub fn read_sources(args: &[PathBuf], stdin: &mut dyn Read) -> (Vec<Source>, Vec<Problem>) {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    let mut stdin_read = false;
    for arg in args {
        if arg.as_os_str() == "-" {
            if stdin_read {
                continue;
            }
            stdin_read = true;
            let mut text = String::new();
            match stdin.read_to_string(&mut text) {
                Ok(_) => sources.push(Source {
                    path: "<stdin>".into(),
                    dir: cwd.clone(),
                    text,
                }),
                Err(e) => problems.push(file_problem(Path::new("<stdin>"), &e.to_string())),
            }
            continue;
        }
        let mut files = Vec::new();
        if arg.is_dir() {
            collect(arg, &mut files, &mut problems);
            files.sort();
        } else {
            files.push(arg.clone());
        }
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => {
                    let abs = cwd.join(&file);
                    let dir = abs
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| cwd.clone());
                    sources.push(Source {
                        path: file,
                        dir,
                        text,
                    });
                }
                Err(e) => problems.push(file_problem(&file, &e.to_string())),
            }
        }
    }
    (sources, problems)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>, problems: &mut Vec<Problem>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return problems.push(file_problem(dir, &e.to_string())),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out, problems);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

fn file_problem(path: &Path, message: &str) -> Problem {
    Problem {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        object: None,
        field: None,
        message: format!("cannot read: {message}"),
    }
}
