//! Reading files that a user, another process or an earlier run may have
//! replaced with something else: a FIFO, a directory, a device or a link to
//! one (`/dev/zero`).
//!
//! `std::fs::read` opens such a path and reads until end of file: a FIFO
//! without a writer blocks the open forever, and `/dev/zero` never ends, so
//! the read grows until memory runs out. [`open_regular`] opens without
//! blocking and refuses anything but a regular file, judged on the opened
//! handle so that the path cannot change in between; [`read_regular`]
//! then reads no more than the file's size and a caller's cap.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Opens `path` (following links) for reading and returns the file and its
/// length, or an [`io::ErrorKind::InvalidInput`] error when it is not a
/// regular file.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Opening a FIFO for reading blocks until a writer comes; O_NONBLOCK
    // makes it return at once, and it changes nothing for regular files.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        // Like std's own I/O errors, the message leaves the path to the caller.
        let what =
            if meta.is_dir() { "a directory, not a file" } else { "not a regular file (a FIFO, socket or device)" };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    Ok((file, meta.len()))
}

/// Reads the regular file at `path`, refusing one longer than `max_len`
/// bytes (an [`io::ErrorKind::InvalidData`] error) and never reading past
/// the length it had when opened.
pub fn read_regular(path: &Path, max_len: u64) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    if len > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes, more than the {max_len} accepted"),
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}
