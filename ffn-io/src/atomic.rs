//! Outputs that are either complete or absent: every file ffn-io writes is produced under a
//! temporary name in its own folder, synced, and renamed over the destination only when complete
//! (then the folder is synced, so that the rename survives a power cut). A failure or a kill at any
//! point leaves the previous file, if any, untouched; the temporary file is removed on failure.
//!
//! [`replace_file`] is the general form (the caller writes the temporary file however it likes,
//! e.g. through the HDF5 library); [`write_atomic`] writes a byte buffer.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::IoError;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary path beside `path`: `.NAME.tmp-PID-N`, hidden, in the same folder (so that
/// the final rename stays on one file system), unique within this process.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// The folder holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Makes the complete file `tmp` the file `path`: fsync of `tmp`, rename, fsync of the folder.
fn commit(tmp: &Path, path: &Path) -> Result<(), IoError> {
    fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| IoError::os(tmp, e))?;
    fs::rename(tmp, path).map_err(|e| IoError::os(path, e))?;
    let dir = parent_dir(path);
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| IoError::os(&dir, e))
}

/// Produces `path` through a temporary file: `write` is given the temporary path (which does not
/// exist yet) and must leave the complete file there; then it is synced and renamed over `path`.
/// When `write` or the commit fails, the temporary file is removed and `path` is untouched.
///
/// # Errors
/// The folder of `path` does not exist, `write`'s error, or the sync / rename failed.
pub fn replace_file<E: From<IoError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let dir = parent_dir(path);
    fs::metadata(&dir).map_err(|e| IoError::os(&dir, e))?;
    let tmp = temp_path(path);
    let result = write(&tmp).and_then(|()| Ok(commit(&tmp, path)?));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// [`replace_file`] for a folder (a Zarr array is a folder of chunk files): `write` fills the
/// temporary folder path (which does not exist yet); when it succeeds, an existing `path` is moved
/// aside, the new folder renamed into place, and the old one removed. A failure of `write` removes
/// the temporary folder and leaves `path` untouched.
///
/// # Errors
/// The parent folder does not exist, `write`'s error, or a rename failed.
pub fn replace_dir<E: From<IoError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let dir = parent_dir(path);
    fs::metadata(&dir).map_err(|e| IoError::os(&dir, e))?;
    let tmp = temp_path(path);
    if let Err(e) = write(&tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let old = path.exists().then(|| temp_path(path));
    if let Some(old) = &old {
        fs::rename(path, old).map_err(|e| IoError::os(path, e))?;
    }
    if let Err(e) = fs::rename(&tmp, path) {
        if let Some(old) = &old {
            let _ = fs::rename(old, path);
        }
        let _ = fs::remove_dir_all(&tmp);
        return Err(IoError::os(path, e).into());
    }
    if let Some(old) = &old {
        let _ = fs::remove_dir_all(old);
    }
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| IoError::os(&dir, e))?;
    Ok(())
}

/// Writes `bytes` to `path` atomically (see [`replace_file`]).
///
/// # Errors
/// The folder does not exist, or writing, syncing or renaming failed (disk full, permissions...).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    replace_file(path, |tmp| write_new(tmp, bytes))
}

/// Creates `tmp` (which must not exist) holding `bytes`.
fn write_new(tmp: &Path, bytes: &[u8]) -> Result<(), IoError> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| IoError::os(tmp, e))
}

/// Makes writes beyond the process's file-size limit (`ulimit -f`, RLIMIT_FSIZE) fail with an
/// error (EFBIG) instead of killing the process with SIGXFSZ, so that the failed output is
/// cleaned up and reported like any full disk.
///
/// # Errors
/// The operating system refused the change.
pub fn fail_writes_past_file_size_limit() -> io::Result<()> {
    // SAFETY: ignoring SIGXFSZ has no preconditions.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect()
    }

    #[test]
    fn writes_and_replaces_leaving_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_the_temporary_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_atomic(&path, b"old").unwrap();
        let err = replace_file(&path, |tmp| {
            fs::write(tmp, b"half").unwrap();
            Err(IoError::os(tmp, io::Error::other("disk full")))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_folder_is_replaced_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zarr");
        let fill = |text: &'static [u8]| {
            move |tmp: &Path| -> Result<(), IoError> {
                fs::create_dir(tmp).map_err(|e| IoError::os(tmp, e))?;
                fs::write(tmp.join("c"), text).map_err(|e| IoError::os(tmp, e))
            }
        };
        replace_dir(&path, fill(b"one")).unwrap();
        replace_dir(&path, fill(b"two")).unwrap();
        assert_eq!(fs::read(path.join("c")).unwrap(), b"two");
        let err = replace_dir(&path, |tmp| {
            fill(b"half")(tmp)?;
            Err(IoError::os(tmp, io::Error::other("disk full")))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(fs::read(path.join("c")).unwrap(), b"two");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope").join("out.txt");
        let err = write_atomic(&path, b"x").unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }
}
