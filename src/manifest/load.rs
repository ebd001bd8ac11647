//! Finding and reading manifest files: files, folders (recursive, sorted), and `-` for stdin.
//!
//! Manifests may come from anyone (a cloned repository, a pipe), so reading them must not hang
//! or exhaust memory whatever they are: only regular files are read, and opening never blocks.

use std::fs::{File, FileType, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use tracing::debug;

use super::Problem;

/// The largest manifest file (or standard input) that is read: far above any real team's
/// manifests (the example team is 2 KiB), and small enough that parsing and checking one takes
/// milliseconds and little memory. Files are read to at most one byte past it, so an endless
/// stream is cut off rather than read.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// One manifest file's text, and the folder its relative paths are taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// As the user named it; `<stdin>` for `-`.
    pub path: PathBuf,
    /// Absolute folder that relative paths in it resolve against.
    pub dir: PathBuf,
    /// Its whole text, at most `MAX_FILE_BYTES`.
    pub text: String,
    /// The `-f` path (file or folder, absolute) it was found through; `None` for standard
    /// input and for a helper's request. What apply and the controller read from there is the
    /// person's intent, so no member may be granted to write it (`validate`).
    pub given: Option<PathBuf>,
}

/// Why one manifest file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A FIFO, socket or device: reading one may block forever or never end.
    #[error("not a regular file ({0}); manifests are read only from regular files")]
    NotRegular(&'static str),
    /// Larger than `MAX_FILE_BYTES`; read no further.
    #[error("larger than {} MiB, the limit for one manifest file", MAX_FILE_BYTES >> 20)]
    TooLarge,
    /// Where the text stops being UTF-8: 1-based line and column (in characters), and the
    /// offset of the bad byte in the file.
    #[error(
        "not UTF-8: byte {byte:#04x} at byte offset {offset} does not start or continue a character; save the file as UTF-8"
    )]
    NotUtf8 {
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// Offset of the bad byte from the start of the file.
        offset: usize,
        /// The bad byte.
        byte: u8,
    },
    /// It starts with a UTF-16 byte-order mark: said apart from `NotUtf8`, so the fix is plain.
    #[error(
        "not UTF-8: this is UTF-16 (it starts with a UTF-16 byte-order mark); save the file as UTF-8"
    )]
    Utf16,
    /// A symlink whose target lies outside the folder it was found in (the folder given with
    /// `-f`, or the folder holding a file given with `-f`): it is not read, so that no error
    /// shows a line of a file the manifests' author could not read themselves.
    #[error(
        "a symlink to {target:?}, outside {root}: not read (name its target itself with -f if you mean it)"
    )]
    LinkLeaves {
        /// Where the symlink points, resolved.
        target: PathBuf,
        /// The folder it was found in, described with its path.
        root: String,
    },
    /// Opening or reading failed (permissions, a vanished file...).
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
    let mut seen = std::collections::HashSet::new();
    for arg in args {
        if arg.as_os_str() == "-" {
            if stdin_read {
                continue;
            }
            stdin_read = true;
            match read_capped(stdin) {
                Ok(text) => {
                    debug!(path = "<stdin>", bytes = text.len(), "manifest read");
                    sources.push(Source {
                        path: "<stdin>".into(),
                        dir: cwd.clone(),
                        text,
                        given: None,
                    })
                }
                Err(e) => problems.push(file_problem(Path::new("<stdin>"), e)),
            }
            continue;
        }
        let given = absolute(&cwd, arg);
        let Some((files, root, within)) = files_of(arg, &given, &mut problems) else {
            continue;
        };
        for file in files {
            let real = match stays_inside(&file, &root, within) {
                Ok(real) => real,
                Err(e) => {
                    problems.push(file_problem(&file, e));
                    continue;
                }
            };
            // The same file named twice (`-f team.yaml -f team.yaml`, or a folder and a file
            // in it) is one set of objects, not two that collide: read it once.
            if let Ok(meta) = std::fs::metadata(&file)
                && !seen.insert((meta.dev(), meta.ino()))
            {
                debug!(path = %file.display(), "manifest named again; read once");
                continue;
            }
            match read_file(&real) {
                Ok(text) => {
                    debug!(path = %file.display(), bytes = text.len(), "manifest read");
                    let abs = cwd.join(&file);
                    let dir = abs
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| cwd.clone());
                    sources.push(Source {
                        path: file,
                        dir,
                        text,
                        given: Some(given.clone()),
                    });
                }
                Err(e) => problems.push(file_problem(&file, e)),
            }
        }
    }
    (sources, problems)
}

/// The files `arg` (absolute: `given`) names, and the real folder their symlinks must stay
/// in: a link named with -f may point anywhere inside the folder holding it; what a walk
/// finds, anywhere inside the folder walked. `None` when `arg` itself is refused.
fn files_of(
    arg: &Path,
    given: &Path,
    problems: &mut Vec<Problem>,
) -> Option<(Vec<PathBuf>, PathBuf, &'static str)> {
    const HOLDING: &str = "the folder holding it";
    let holder = given.parent().unwrap_or(Path::new("/"));
    let checked = std::fs::canonicalize(holder)
        .map_err(ReadError::from)
        .and_then(|root| stays_inside(given, &root, HOLDING).map(|_| root));
    let holder = match checked {
        Ok(root) => root,
        Err(e) => {
            problems.push(file_problem(arg, e));
            return None;
        }
    };
    if !arg.is_dir() {
        return Some((vec![arg.to_path_buf()], holder, HOLDING));
    }
    let mut files = Vec::new();
    collect(arg, &mut files, problems);
    files.sort();
    match std::fs::canonicalize(given) {
        Ok(root) => Some((files, root, "the folder given with -f")),
        Err(e) => {
            problems.push(file_problem(arg, e.into()));
            None
        }
    }
}

/// The path a `-f` argument protects (absolute, by name); `None` for `-` (standard input).
pub fn given_path(arg: &Path) -> Option<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    (arg.as_os_str() != "-").then(|| absolute(&cwd, arg))
}

/// `path` made absolute and its `.` and `..` resolved by name (not following symlinks).
fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    super::paths::by_name(&cwd.join(path))
}

/// A symlink at `path` must lead inside `root` (a real path); anything else is read as found.
/// The target is named in the refusal, never read. The path to open: `path`, or the link's
/// real target (opened without following a link, so a swap after this check is refused).
fn stays_inside(path: &Path, root: &Path, what: &str) -> Result<PathBuf, ReadError> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return Ok(path.to_path_buf());
    }
    let target = std::fs::canonicalize(path)?;
    if target.starts_with(root) {
        Ok(target)
    } else {
        Err(ReadError::LinkLeaves {
            target,
            root: format!("{what} ({})", root.display()),
        })
    }
}

/// Reads one manifest file (not a symlink: `stays_inside` resolved it). It is checked to be a
/// regular file before opening (for a clear error), opened without blocking (opening a FIFO
/// for reading would wait for a writer) nor following a symlink, and checked again on the
/// opened descriptor, so that swapping the file for a FIFO, device or link between the check
/// and the open gains nothing.
fn read_file(path: &Path) -> Result<String, ReadError> {
    let meta = std::fs::metadata(path)?;
    regular(&meta)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
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
    decode(bytes)
}

/// The UTF-8 byte-order mark, which some editors put at the start of a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The text of a manifest: UTF-8, without a leading byte-order mark (YAML allows one, and
/// left in it would become part of the first key).
fn decode(mut bytes: Vec<u8>) -> Result<String, ReadError> {
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Err(ReadError::Utf16);
    }
    let skipped = if bytes.starts_with(BOM) {
        bytes.drain(..BOM.len());
        BOM.len()
    } else {
        0
    };
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let before = String::from_utf8_lossy(&bytes[..valid]);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        ReadError::NotUtf8 {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            offset: skipped + valid,
            byte: bytes[valid],
        }
    })
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
    let (line, column) = match e {
        ReadError::NotUtf8 { line, column, .. } => (line, column),
        ReadError::Utf16 => (1, 1),
        ReadError::NotRegular(_)
        | ReadError::TooLarge
        | ReadError::LinkLeaves { .. }
        | ReadError::Io(_) => (0, 0),
    };
    Problem {
        file: path.to_path_buf(),
        line,
        column,
        object: None,
        field: None,
        message: e.to_string(),
        source_line: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_is_dropped() {
        assert_eq!(decode(b"\xEF\xBB\xBFa: 1\n".to_vec()).unwrap(), "a: 1\n");
        assert_eq!(decode(b"a: \xEF\xBB\xBF".to_vec()).unwrap(), "a: \u{feff}");
    }

    #[test]
    fn bad_utf8_is_located_in_characters() {
        match decode(b"\xEF\xBB\xBFa: 1\n\xC3\xA9\xC3\xA9: \xFF\n".to_vec()) {
            Err(ReadError::NotUtf8 {
                line,
                column,
                offset,
                byte,
            }) => assert_eq!((line, column, offset, byte), (2, 5, 14, 0xff)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(b"\xFE\xFF\0a".to_vec()),
            Err(ReadError::Utf16)
        ));
    }

    #[test]
    fn reading_stops_past_the_cap() {
        let mut endless = std::io::repeat(b'#');
        assert!(matches!(
            read_capped(&mut endless),
            Err(ReadError::TooLarge)
        ));
        let mut exact = std::io::repeat(b'#').take(MAX_FILE_BYTES);
        assert_eq!(
            read_capped(&mut exact).unwrap().len() as u64,
            MAX_FILE_BYTES
        );
    }
}
