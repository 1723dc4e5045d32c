//! Where the flight recorder keeps large blobs: on disk, not in host memory.
//!
//! A checkpoint holds every buffer once, weights included: an 8B engine's 16 GB of weights
//! held in host memory doubled what the engine needed. Blobs of `min` bytes or more (the
//! parts of a large buffer are at most 16 MiB each) are written into one file, read back
//! only by a dump, and their range is punched out of it (its disk space returned) when no
//! kept span names them any more. The file has no name: it is made with `O_TMPFILE` in the
//! dump directory (or made and unlinked at once where the filesystem lacks that), so no exit,
//! not even SIGKILL, leaves it behind. A blob that cannot be written (a full disk) stays in
//! memory: nothing is lost, and the engine is not told.

use crate::trace::BlobId;
use rustc_hash::FxHashMap as HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

/// Spilled blobs are placed at multiples of this, so a removed one's range can be punched
/// out whole.
const ALIGN: u64 = 4096;

/// An unnamed file of spilled blobs, gone with its last descriptor.
pub(crate) struct Spill {
    dir: PathBuf,
    min: usize,
    file: Option<File>,
    /// Where the next blob goes.
    end: u64,
    /// Each spilled blob's offset and length.
    at: HashMap<BlobId, (u64, usize)>,
    /// Writes that failed (the blob stayed in memory); the first is logged.
    pub failed: usize,
}

impl Spill {
    /// Spill blobs of `min` bytes or more into an unnamed file in `dir` (made when first
    /// needed).
    pub fn new(dir: PathBuf, min: usize) -> Self {
        Spill {
            dir,
            min,
            file: None,
            end: 0,
            at: HashMap::default(),
            failed: 0,
        }
    }

    /// The spill file, made on first use: `O_TMPFILE`, or a file made and unlinked at once.
    fn file(&mut self) -> std::io::Result<&File> {
        if self.file.is_none() {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::create_dir_all(&self.dir)?;
            let tmp = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_TMPFILE)
                .open(&self.dir);
            let f = match tmp {
                Ok(f) => f,
                Err(_) => {
                    static N: std::sync::atomic::AtomicUsize =
                        std::sync::atomic::AtomicUsize::new(0);
                    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let path = self
                        .dir
                        .join(format!(".gputape-spill-{}-{n}", std::process::id()));
                    let f = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&path)?;
                    std::fs::remove_file(&path)?;
                    f
                }
            };
            self.file = Some(f);
        }
        Ok(self.file.as_ref().expect("made above"))
    }

    /// Write `payload` as blob `id`; `false` if it is too small to spill or the write failed
    /// (the caller keeps it).
    pub fn put(&mut self, id: BlobId, payload: &[u8]) -> bool {
        if payload.len() < self.min {
            return false;
        }
        let off = self.end;
        let written = self.file().and_then(|f| f.write_all_at(payload, off));
        match written {
            Ok(()) => {
                self.at.insert(id, (off, payload.len()));
                self.end = (off + payload.len() as u64).next_multiple_of(ALIGN);
                true
            }
            Err(e) => {
                // Whatever part was written is not named; its range is returned.
                self.punch(off, payload.len());
                self.fail(&e);
                false
            }
        }
    }

    fn fail(&mut self, e: &std::io::Error) {
        if self.failed == 0 {
            tracing::warn!(
                "gputape: flight recorder keeps blobs in memory: cannot spill into {}: {e}",
                self.dir.display()
            );
        }
        self.failed += 1;
    }

    /// Blob `id`'s payload, read back.
    pub fn get(&self, id: BlobId) -> std::io::Result<Vec<u8>> {
        let (Some(f), Some(&(off, len))) = (self.file.as_ref(), self.at.get(&id)) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the blob is not in the spill file",
            ));
        };
        let mut v = vec![0u8; len];
        f.read_exact_at(&mut v, off)?;
        Ok(v)
    }

    /// Blob `id` is no longer named: its range of the file is given back to the disk.
    pub fn remove(&mut self, id: BlobId) {
        if let Some((off, len)) = self.at.remove(&id) {
            self.punch(off, len);
        }
    }

    /// Return `len` bytes at `off` to the filesystem (the file keeps its length).
    fn punch(&self, off: u64, len: usize) {
        let Some(f) = self.file.as_ref() else {
            return;
        };
        let len = (len as u64).next_multiple_of(ALIGN);
        // SAFETY: fallocate on a descriptor this struct owns, with plain integer arguments;
        // it touches no memory of ours. A filesystem without hole punching refuses, and the
        // range simply stays allocated until the file goes.
        unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            );
        }
    }

    /// Where the spill file is, for errors (it has no name of its own).
    pub fn place(&self) -> PathBuf {
        self.dir.join("(unnamed spill file)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_blob_goes_to_disk_and_back_and_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("gputape-spill-{}", std::process::id()));
        let mut s = Spill::new(dir.clone(), 8);
        assert!(!s.put(BlobId([1; 16]), b"small"), "under the threshold");
        assert!(!dir.exists(), "nothing spilled, nothing made");
        assert!(s.put(BlobId([2; 16]), b"large enough"));
        assert!(s.put(BlobId([4; 16]), b"another large one"));
        assert_eq!(s.get(BlobId([2; 16])).unwrap(), b"large enough");
        assert_eq!(s.get(BlobId([4; 16])).unwrap(), b"another large one");
        // The file has no name: the directory holds nothing, even while blobs are spilled.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        s.remove(BlobId([2; 16]));
        assert!(s.get(BlobId([2; 16])).is_err());
        assert_eq!(s.get(BlobId([4; 16])).unwrap(), b"another large one");
        drop(s);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_spill_that_cannot_write_keeps_the_blob_with_its_caller() {
        // A directory under a file cannot be made.
        let file = std::env::temp_dir().join(format!("gputape-spill-file-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let mut s = Spill::new(file.join("spill"), 1);
        assert!(!s.put(BlobId([3; 16]), b"payload"));
        assert_eq!(s.failed, 1);
        std::fs::remove_file(&file).unwrap();
    }
}
