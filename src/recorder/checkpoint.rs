//! The flight recorder's checkpoints, as the recorder takes them: at step boundaries,
//! every `checkpoint_every` steps within the budget and never while a stream captures; on
//! the device (`device_ckpt`) where the backend can, else by draining the streams and
//! reading back what was written.

use super::{
    device_ckpt, snapshot, state, unreachable_blob, RecState, RecordError, RecordingBackend,
};
use crate::backend::GpuBackend;
use crate::trace::*;

impl<B: GpuBackend> RecordingBackend<B> {
    /// Wait until the device checkpoint out, if one is, has read the engine's buffers: a
    /// buffer freed before would be read after its memory went (CUDA's free waits for the
    /// device anyway, so this costs a free nothing more there; a sticky fault or a failed
    /// launch ends the wait at once).
    pub(super) fn gather_read(&self) {
        if let Some(d) = self.device_ckpt.lock().as_ref() {
            d.wait_gather(&self.inner);
        }
    }

    /// A step boundary in flight mode (`marked`: the engine said so, rather than a host sync):
    /// every `checkpoint_every` steps, a checkpoint. One that falls while a stream captures
    /// (an engine whose step hooks run inside its captured forward) is owed, and taken at
    /// the first boundary outside any capture: a checkpoint syncs and reads back, which
    /// would invalidate the engine's capture. One put off by the budget, or by the last
    /// checkpoint still being consumed, is taken at a later boundary where it fits; in a rank
    /// set (a communicator joined) at the next multiple of `checkpoint_every` instead: those
    /// put-offs differ between ranks, and checkpoints on the same steps are what lets their
    /// dumps replay together from one they all hold (`replayer::ranks::aligned`).
    pub(super) fn flight_step(&self, marked: bool) {
        let wait_busy = {
            let mut st = self.st.lock();
            let unread = st.since.unread_bytes;
            let in_rank_set = !st.comms.is_empty();
            let Some(f) = st.flight.as_deref_mut() else {
                return;
            };
            if marked && !f.marked_steps {
                // From the first marker on, only markers count.
                f.marked_steps = true;
                f.steps = 0;
            }
            f.steps += 1;
            f.budget.step_ended(std::time::Instant::now());
            f.checkpoint_owed |= f.steps % f.cfg.checkpoint_every == 0;
            if !f.checkpoint_owed {
                return;
            }
            // A device checkpoint costs the host its launches, not its bytes.
            let unread = if f.device_checkpoints { 0 } else { unread };
            // The budget first: it costs a clock read, where asking each stream whether it
            // captures is a driver call per stream, at every boundary a checkpoint is put off.
            if !f.checkpoint_fits(unread) {
                f.budget_deferrals += 1;
                f.checkpoint_owed &= !in_rank_set;
                return;
            }
            f.cfg.wait_for_checkpoints
        };
        let busy = || self.device_ckpt.lock().as_ref().is_some_and(|d| d.busy());
        if busy() && !(wait_busy && waited_out(busy)) {
            let mut st = self.st.lock();
            let in_rank_set = !st.comms.is_empty();
            if let Some(f) = st.flight.as_deref_mut() {
                f.busy_deferrals += 1;
                f.checkpoint_owed &= !in_rank_set;
            }
            return;
        }
        if self.capturing_stream().is_some() {
            if let Some(f) = self.st.lock().flight.as_deref_mut() {
                f.deferred_checkpoints += 1;
            }
            return;
        }
        if let Some(f) = self.st.lock().flight.as_deref_mut() {
            f.checkpoint_owed = false;
        }
        let t0 = std::time::Instant::now();
        let taken = self.checkpoint();
        if let Some(f) = self.st.lock().flight.as_deref_mut() {
            f.checkpoint_taken(t0.elapsed());
        }
        if let Err(e) = taken {
            self.own_failure(format!("a checkpoint failed: {e}"));
        }
    }

    /// A stream that is capturing a graph now, if any: one whose capture began through this
    /// recorder and has not ended, or any stream the wrapped backend says captures (a capture
    /// begun around the recorder). While one is, the recorder syncs, reads back and
    /// allocates nothing of its own.
    pub(crate) fn capturing_stream(&self) -> Option<u64> {
        let streams: Vec<u64> = {
            let st = self.st.lock();
            if let Some(s) = st.capturing.iter().next() {
                return Some(*s);
            }
            st.streams.keys().copied().collect()
        };
        streams
            .into_iter()
            .find(|s| *s != 0 && self.inner.stream_is_capturing(*s))
    }

    /// Something the recorder does for itself failed (a checkpoint, a dump): the engine must
    /// be able to see it, so it is said once on stderr (an engine may have no `tracing`
    /// subscriber), counted in `flight_held`, and written into the next dump's reason.
    pub(crate) fn own_failure(&self, what: String) {
        self.st.lock().own_failure(what);
    }

    /// A checkpoint of device state into the flight store: every stream drained, then each
    /// live buffer written since the last checkpoint read back (the others keep their blob),
    /// and a new span of calls begun.
    fn checkpoint(&self) -> Result<(), RecordError> {
        if let Some(d) = self.device_ckpt.lock().as_mut() {
            return self.checkpoint_on_device(d);
        }
        self.drain()?;
        let mut st = self.st.lock();
        // What the span's calls wrote, read off their frames now rather than on every call.
        if !st.begin_checkpoint() {
            return Ok(());
        }
        let taken = self.checkpoint_into(&mut st);
        if let Some(f) = st.flight.as_deref_mut() {
            f.end_checkpoint(taken.is_ok());
        }
        if taken.is_err() {
            // Nothing of this checkpoint can be trusted by the next: read everything again.
            st.since.checkpointed.clear();
            st.since.unread_bytes = st
                .bufs
                .values()
                .filter(|b| b.alias_of.is_none())
                .map(|b| b.size)
                .sum();
        }
        taken
    }

    /// A checkpoint on the device (`device_ckpt.rs`): the new span begins now, pending until
    /// the recorder's thread has consumed what the device copied.
    fn checkpoint_on_device(&self, d: &mut device_ckpt::DeviceCkpt) -> Result<(), RecordError> {
        let t0 = std::time::Instant::now();
        let mut st = self.st.lock();
        let locked = t0.elapsed();
        let mut streams: Vec<u64> = st.streams.keys().copied().collect();
        streams.push(0);
        streams.sort();
        streams.dedup();
        let filled = std::mem::take(&mut st.since.filled);
        if !st.begin_checkpoint() {
            return Ok(());
        }
        // Resources first, in the span's checkpoint, as a host checkpoint writes them.
        self.emit_resources(&mut st);
        let Some(f) = st.flight.as_deref_mut() else {
            return Ok(());
        };
        f.in_checkpoint = false;
        f.checkpoint_pending();
        let span_no = f.span_no();
        let written = std::mem::take(&mut st.since.dirty);
        let mut pending: Vec<u64> = std::mem::take(&mut st.since.span_streams)
            .into_iter()
            .filter_map(|s| match s {
                StreamRef::Legacy => Some(0),
                StreamRef::Id(id) => st.streams.iter().find(|(_, i)| **i == id).map(|(r, _)| *r),
            })
            .collect();
        // The legacy stream last: the gather goes on the first.
        pending.sort_by_key(|s| (*s == 0, *s));
        st.since.unread_bytes = 0;
        let begun = t0.elapsed();
        let taken = d.take(&self.inner, &mut st, &streams, &pending, &written, &filled);
        if device_ckpt::say_times() {
            eprintln!(
                "gputape: device checkpoint: lock {:?}, span {:?}, take {:?}; {} written, {} filled, {} streams pending",
                locked,
                begun - locked,
                t0.elapsed() - begun,
                written.len(),
                filled.len(),
                pending.len()
            );
        }
        if let Some(f) = st.flight.as_deref_mut() {
            if taken.is_err() {
                f.checkpoint_frames(span_no, Vec::new(), false);
            }
        }
        taken.map_err(RecordError::DeviceCheckpoint)
    }

    /// The frames of a checkpoint already begun: resources, then every live buffer.
    fn checkpoint_into(&self, st: &mut RecState) -> Result<(), RecordError> {
        self.emit_resources(st);
        self.snapshot_buffers(st, true)
    }

    /// Initial frames (address and contents) for every live buffer, in creation order. A
    /// `checkpoint` of the flight recorder keeps the blob of a buffer unwritten since the
    /// last one instead of reading it again.
    pub(super) fn snapshot_buffers(
        &self,
        st: &mut RecState,
        checkpoint: bool,
    ) -> Result<(), RecordError> {
        let live = st.live_buffers();
        // Unwritten since the last checkpoint: the same blob, named again; every other buffer
        // is read, all of them through one pipeline.
        let kept: Vec<Option<BlobId>> = live
            .iter()
            .map(|(buf, ..)| {
                checkpoint.then_some(())?;
                let id = st.since.checkpointed.get(buf).copied()?;
                (!st.since.dirty.contains(buf)).then_some(id)
            })
            .collect();
        let jobs: Vec<snapshot::Job> = live
            .iter()
            .zip(&kept)
            .filter(|(_, k)| k.is_none())
            .map(|(&(buf, addr, size, _), _)| snapshot::Job { buf, addr, size })
            .collect();
        if let (true, Some(f)) = (checkpoint, st.flight.as_deref_mut()) {
            f.checkpoint_read_bytes += jobs.iter().map(|j| j.size).sum::<u64>();
        }
        let mut read = snapshot::read_buffers(&self.inner, st, &jobs)?.into_iter();
        let mut seen = rustc_hash::FxHashMap::default();
        for ((buf, p, size, site), kept) in live.into_iter().zip(kept) {
            let data = match (kept, st.flight.as_deref_mut()) {
                (Some(id), Some(f)) => {
                    f.note_blob(id, || unreachable_blob(id));
                    id
                }
                _ => read.next().expect("one read per buffer not kept"),
            };
            seen.insert(buf, data);
            let site = st.site(site);
            st.emit(&Frame::Address { buf, addr: p });
            st.emit(&Frame::Initial {
                buf,
                bytes: size,
                data,
                site,
            });
        }
        st.since.checkpointed = seen;
        st.since.dirty.clear();
        st.since.unread_bytes = 0;
        Ok(())
    }

    /// Wait for every stream this recorder knows (the legacy one too), so a snapshot of device
    /// memory sees finished results.
    pub(super) fn drain(&self) -> Result<(), RecordError> {
        let streams: Vec<u64> = {
            let st = self.st.lock();
            let mut v: Vec<u64> = st.streams.keys().copied().collect();
            v.sort();
            v
        };
        // A device stuck on the engine's work stops this wait too: the hang watcher must see
        // it, as it sees the engine's own calls.
        let tracked = {
            let mut st = self.st.lock();
            if st.flight.is_some() {
                let (seq, thread) = (st.seq.saturating_sub(1), st.thread());
                st.open_calls.push(state::OpenCall {
                    seq,
                    thread,
                    since: std::time::Instant::now(),
                    own: Some("the flight recorder's checkpoint, waiting for the streams"),
                });
            }
            st.flight.is_some()
        };
        let drained = std::iter::once(0).chain(streams).try_for_each(|s| {
            self.inner
                .synchronize(s)
                .map_err(|source| RecordError::Drain { stream: s, source })
        });
        if tracked {
            let mut st = self.st.lock();
            if let Some(i) = st.open_calls.iter().rposition(|c| c.own.is_some()) {
                st.open_calls.remove(i);
            }
        }
        drained
    }
}

/// Nap until `busy` says the checkpoint before has been consumed: whether it was, within
/// `WAIT_BUSY` (a worker that never finishes, on a dead context, puts the checkpoint off
/// instead of stopping the engine for good).
fn waited_out(busy: impl Fn() -> bool) -> bool {
    const WAIT_BUSY: std::time::Duration = std::time::Duration::from_secs(30);
    let t0 = std::time::Instant::now();
    while busy() {
        if t0.elapsed() > WAIT_BUSY {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    true
}
