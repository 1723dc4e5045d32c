//! Where the flight recorder keeps large blobs: on disk, not in host memory.
//!
//! A checkpoint holds every buffer once, weights included: an 8B engine's 16 GB of weights
//! held in host memory doubled what the engine needed. Blobs of `min` bytes or more (the
//! parts of a large buffer are at most 16 MiB each) are written to one file each in a
//! directory of their own, read back only by a dump, and deleted when no kept span names them
//! any more. A blob that cannot be written (a full disk) stays in memory: nothing is lost,
//! and the engine is not told. The directory goes when the recorder does; a process killed
//! outright leaves it behind (`.gputape-spill-<pid>-<n>` beside the dumps).

use crate::trace::BlobId;
use std::path::PathBuf;

/// A directory of spilled blobs, removed with it.
pub(crate) struct Spill {
    dir: PathBuf,
    min: usize,
    created: bool,
    /// Writes that failed (the blob stayed in memory); the first is logged.
    pub failed: usize,
}

impl Spill {
    /// Spill blobs of `min` bytes or more into `dir` (made when first needed).
    pub fn new(dir: PathBuf, min: usize) -> Self {
        Spill {
            dir,
            min,
            created: false,
            failed: 0,
        }
    }

    fn path(&self, id: BlobId) -> PathBuf {
        let mut name = String::with_capacity(38);
        for b in id.0 {
            name.push_str(&format!("{b:02x}"));
        }
        name.push_str(".blob");
        self.dir.join(name)
    }

    /// Write `payload` as blob `id`'s file; `false` if it is too small to spill or the write
    /// failed (the caller keeps it).
    pub fn put(&mut self, id: BlobId, payload: &[u8]) -> bool {
        if payload.len() < self.min {
            return false;
        }
        if !self.created {
            if let Err(e) = std::fs::create_dir_all(&self.dir) {
                self.fail(&e);
                return false;
            }
            self.created = true;
        }
        match std::fs::write(self.path(id), payload) {
            Ok(()) => true,
            Err(e) => {
                // A part written may be left; it is not named, and goes with the directory.
                let _ = std::fs::remove_file(self.path(id));
                self.fail(&e);
                false
            }
        }
    }

    fn fail(&mut self, e: &std::io::Error) {
        if self.failed == 0 {
            tracing::warn!(
                "gputape: flight recorder keeps blobs in memory: cannot spill to {}: {e}",
                self.dir.display()
            );
        }
        self.failed += 1;
    }

    /// Blob `id`'s payload, read back.
    pub fn get(&self, id: BlobId) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.path(id))
    }

    /// Blob `id` is no longer named: its file goes.
    pub fn remove(&self, id: BlobId) {
        let _ = std::fs::remove_file(self.path(id));
    }

    /// The file blob `id` is in, for errors.
    pub fn file(&self, id: BlobId) -> PathBuf {
        self.path(id)
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_blob_goes_to_disk_and_back_and_its_directory_goes_with_the_spill() {
        let dir = std::env::temp_dir().join(format!("gputape-spill-{}", std::process::id()));
        let mut s = Spill::new(dir.clone(), 8);
        assert!(!s.put(BlobId([1; 16]), b"small"), "under the threshold");
        assert!(!dir.exists(), "nothing spilled, nothing made");
        assert!(s.put(BlobId([2; 16]), b"large enough"));
        assert_eq!(s.get(BlobId([2; 16])).unwrap(), b"large enough");
        s.remove(BlobId([2; 16]));
        assert!(s.get(BlobId([2; 16])).is_err());
        drop(s);
        assert!(!dir.exists());
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
