//! The segment file's safety: created private (mode 0600, whatever the umask), opened without
//! following links, used only when it belongs to this user, and stale files of this user's dead
//! jobs removed.

use crate::CommError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Permission bits of every segment: read and write for its owner only.
pub(super) const MODE: u32 = 0o600;

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The name of user `uid` from /etc/passwd, if it has one.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// The error for a segment file that another user owns.
pub(super) fn not_ours(path: &Path, owner: u32) -> CommError {
    let who = |uid: u32| match user_name(uid) {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    };
    CommError::NotOwner {
        path: path.display().to_string(),
        owner: who(owner),
        user: who(euid()),
    }
}

/// Checks an open segment file: a regular file of this user, private to it.
fn check(file: &File, path: &Path) -> Result<(), CommError> {
    let shown = path.display();
    let meta = file
        .metadata()
        .map_err(|e| CommError::io(format!("reading the owner of shm segment {shown}"), e))?;
    if meta.uid() != euid() {
        return Err(not_ours(path, meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if !meta.file_type().is_file() || mode & 0o077 != 0 {
        return Err(CommError::Config {
            field: "shm segment",
            expected: format!("{shown}: a regular file with mode {MODE:04o}"),
            actual: format!(
                "{} with mode {mode:04o}",
                if meta.file_type().is_file() {
                    "a regular file"
                } else {
                    "not a regular file"
                }
            ),
        });
    }
    Ok(())
}

/// Opens an existing segment for reading and writing after checking it; `None` when there is
/// none (yet). A symbolic link is refused, never followed.
pub(super) fn open_checked(path: &Path) -> Result<Option<File>, CommError> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            // A file we may not open is most likely another user's: say whose.
            if let Ok(meta) = std::fs::symlink_metadata(path)
                && meta.uid() != euid()
            {
                return Err(not_ours(path, meta.uid()));
            }
            return Err(CommError::io(
                format!("opening shm segment {}", path.display()),
                e,
            ));
        }
    };
    check(&file, path)?;
    Ok(Some(file))
}

/// Creates a new segment file with mode 0600 (set explicitly, so the umask does not matter);
/// fails if the name exists.
pub(super) fn create_private(path: &Path) -> Result<File, CommError> {
    let shown = path.display();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| CommError::io(format!("creating shm segment {shown}"), e))?;
    file.set_permissions(std::fs::Permissions::from_mode(MODE))
        .map_err(|e| CommError::io(format!("setting mode 0600 on shm segment {shown}"), e))?;
    Ok(file)
}

/// The little-endian u64 at byte `offset` of `file`, if the file is that long.
pub(super) fn read_word(file: &File, offset: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    file.read_exact_at(&mut b, offset).ok()?;
    Some(u64::from_ne_bytes(b))
}

/// Removes the files in `dir` whose name starts with `prefix`, that belong to this user, and that
/// `stale` judges left behind by a dead job. Returns the names removed. Errors are ignored: this
/// is housekeeping, and a file that cannot be judged is kept.
pub(super) fn sweep(dir: &Path, prefix: &str, stale: impl Fn(&File) -> bool) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
        else {
            continue;
        };
        let ours = file
            .metadata()
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == euid());
        if ours && stale(&file) && std::fs::remove_file(&path).is_ok() {
            removed.push(name);
        }
    }
    removed
}
