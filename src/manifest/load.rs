//! Finding and reading manifest files: files, folders (recursive, sorted), and `-` for stdin.
//!
//! Manifests may come from anyone (a cloned repository, a pipe), so reading them must not hang
//! or exhaust memory whatever they are: only regular files are read, and opening never blocks.

use std::fs::{File, FileType, Metadata};
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::Problem;

/// The largest manifest file (or standard input) that is read: far above any real team's
/// manifests (the example team is 2 KiB), and small enough that parsing and checking one takes
/// milliseconds and little memory. Files are read to at most one byte past it, so an endless
/// stream is cut off rather than read.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// One manifest file's text, and the folder its relative paths are taken from.
#[derive(Debug, Clone)]
pub struct Source {
    /// As the user named it; `<stdin>` for `-`.
    pub path: PathBuf,
    /// Absolute folder that relative paths in it resolve against.
    pub dir: PathBuf,
    pub text: String,
}

/// Why one manifest file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A FIFO, socket or device: reading one may block forever or never end.
    #[error("not a regular file ({0}); manifests are read only from regular files")]
    NotRegular(&'static str),
    #[error("larger than {} MiB, the limit for one manifest file", MAX_FILE_BYTES >> 20)]
    TooLarge,
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
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
            match read_capped(stdin) {
                Ok(text) => sources.push(Source {
                    path: "<stdin>".into(),
                    dir: cwd.clone(),
                    text,
                }),
                Err(e) => problems.push(file_problem(Path::new("<stdin>"), e)),
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
            match read_file(&file) {
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
                Err(e) => problems.push(file_problem(&file, e)),
            }
        }
    }
    (sources, problems)
}

/// Reads one manifest file, following a symlink to it. It is checked to be a regular file
/// before opening (for a clear error), opened without blocking (opening a FIFO for reading
/// would wait for a writer), and checked again on the opened descriptor, so that swapping the
/// file for a FIFO or device between the check and the open gains nothing.
fn read_file(path: &Path) -> Result<String, ReadError> {
    let meta = std::fs::metadata(path)?;
    regular(&meta)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(std::io::Error::from)?;
    let mut file = File::from(fd);
    regular(&file.metadata()?)?;
    read_capped(&mut file)
}

/// Reads at most `MAX_FILE_BYTES`, refusing more (the file may have grown since its size was
/// looked at, and a stream has no size).
fn read_capped(r: &mut dyn Read) -> Result<String, ReadError> {
    let mut bytes = Vec::new();
    r.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()).into())
}

fn regular(meta: &Metadata) -> Result<(), ReadError> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(ReadError::NotRegular(kind_of(meta.file_type())))
    }
}

/// What a non-regular file is, in words.
fn kind_of(t: FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a folder"
    } else {
        "an unusual kind of file"
    }
}

/// Adds the `*.yaml` and `*.yml` files below `dir` to `out`. Symlinks to folders are not
/// followed (a link to an enclosing folder would make the walk endless, and a folder's contents
/// should not depend on where its links point); symlinks to files are, and `read_file` then
/// checks what they point at. Non-regular files with a manifest's name are kept, so that they
/// are reported rather than silently skipped.
fn collect(dir: &Path, out: &mut Vec<PathBuf>, problems: &mut Vec<Problem>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return problems.push(file_problem(dir, e.into())),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(t) = entry.file_type() else { continue };
        if t.is_dir() {
            collect(&path, out, problems);
        } else if t.is_symlink() && path.is_dir() {
            // Not followed; see above.
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

fn file_problem(path: &Path, e: ReadError) -> Problem {
    Problem {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        object: None,
        field: None,
        message: e.to_string(),
    }
}
