//! Which buffers a sync's hashes may read (`RecordingBackend::hash_at_syncs`): a buffer
//! whose bytes at the sync are not what the calls before it left (written by work on a
//! stream not synchronised since, by a call still running, or by a call begun after the
//! sync) is left out, or its hash would differ at replay for no fault of the program. Kept
//! apart from `RecState`'s handle maps: it is read only at syncs, and off unless hashes are
//! asked for.

use crate::trace::{BufferId, StreamRef};
use rustc_hash::FxHashMap as HashMap;

/// The write bookkeeping behind sync hashes; empty and untouched while `on` is false.
#[derive(Default)]
pub(crate) struct SyncWrites {
    /// Hashes at syncs are on: calls' writes are tracked as they are recorded.
    pub on: bool,
    /// Buffers with device work writing them on a stream not synchronised since (by stream).
    unsettled: HashMap<BufferId, Vec<StreamRef>>,
    /// What calls still running (another thread's, say) write, by seq.
    running: HashMap<u64, Vec<BufferId>>,
    /// The latest call that wrote each buffer: one begun after a sync (on another thread)
    /// may have written before the sync's hashes are taken.
    last: HashMap<BufferId, u64>,
}

impl SyncWrites {
    /// Buffers written by call `seq`, whose device work runs on `stream` (`None`: done when
    /// the call returns).
    pub fn wrote(&mut self, seq: u64, stream: Option<StreamRef>, bufs: &[BufferId]) {
        if !self.on {
            return;
        }
        if let Some(s) = stream {
            for b in bufs {
                let v = self.unsettled.entry(*b).or_default();
                if !v.contains(&s) {
                    v.push(s);
                }
            }
        }
        for b in bufs {
            self.last.insert(*b, seq);
        }
        self.running.insert(seq, bufs.to_vec());
    }

    /// Call `seq` returned: what it wrote synchronously has landed.
    pub fn returned(&mut self, seq: u64) {
        self.running.remove(&seq);
    }

    /// Stream `s` was synchronised: its writes have landed.
    pub fn settled(&mut self, s: StreamRef) {
        self.unsettled.retain(|_, v| {
            v.retain(|x| *x != s);
            !v.is_empty()
        });
    }

    /// Whether buffer `b`'s bytes at the sync `at` are not what the calls before `at` left.
    pub fn unsettled(&self, b: BufferId, at: u64) -> bool {
        self.unsettled.contains_key(&b)
            || self.last.get(&b).is_some_and(|w| *w > at)
            || self.running.values().any(|v| v.contains(&b))
    }

    /// A new segment: calls of the last one still running belong to it.
    pub fn clear(&mut self) {
        self.running.clear();
        self.last.clear();
        self.unsettled.clear();
    }
}
