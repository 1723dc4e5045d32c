//! Each recorded call's frames: the Begin before the wrapped backend runs it (by the flight
//! recorder's fast path where it can), the End after, and what a sync settles.

use super::flight;
use super::ring;
use super::state::RecState;
use super::RecordingBackend;
use crate::backend::{DevicePtr, GpuBackend, Site};
use crate::trace::*;
use anyhow::Result;
use std::sync::atomic::Ordering;

/// The most host bytes a copy may carry to take the flight recorder's fast path: a step's
/// tokens, positions and flags; larger uploads (weights) are rare and take the slow path.
const FAST_BLOB_MAX: usize = 64 << 10;

/// A call in flight: its seq and when it began.
pub(super) struct Tok {
    pub(super) seq: u64,
    t0: u64,
    /// The segment it began in: a call that outlives its segment's `stop` writes nothing
    /// into the next one.
    segment: u32,
    /// Logged by the flight recorder's fast path: done unless it fails.
    fast: bool,
}

/// What a fast-path call carries besides its raw key.
#[derive(Clone, Copy, Default)]
pub(super) struct FastExtra<'a> {
    /// Host bytes it uploads: their blob id is put into the template (at most
    /// `FAST_BLOB_MAX` of them; a larger copy takes the slow path).
    pub blob: Option<&'a [u8]>,
    /// A blocking upload's device address: the bytes are noted as a fill of it
    /// (`RecState::note_fill`), as the slow path notes them.
    pub fill: Option<u64>,
    /// It waits for the device: listed among the calls in flight while it does, so that a
    /// hang's deadline names it and a dump taken meanwhile shows it not returned.
    pub waits: bool,
}

fn err_rec(e: &anyhow::Error) -> ErrorRec {
    ErrorRec {
        code: crate::driver_code(e),
        message: format!("{e:#}"),
    }
}

/// How a call's completion touches the host/device ordering, for pending async results.
#[derive(Clone, Copy)]
pub(super) enum SyncScope {
    None,
    Stream(u64),
    Event(u64),
}

impl<B: GpuBackend> RecordingBackend<B> {
    /// Write the Begin frame of a call, if recording. `make` builds the call with access to the
    /// maps (to turn pointers into ids).
    #[inline]
    pub(super) fn begin(
        &self,
        site: Site,
        make: impl FnOnce(&mut RecState) -> Call,
    ) -> Option<Tok> {
        self.begin_with(site, |st, head| {
            let call = make(st);
            st.emit_call(&head, &call);
        })
    }

    /// `begin` for a caller that writes its Begin frame itself (`emit` gets the frame's head:
    /// sequence, thread, site, time).
    #[inline]
    pub(super) fn begin_with(
        &self,
        site: Site,
        emit: impl FnOnce(&mut RecState, BeginRef<'_, ()>),
    ) -> Option<Tok> {
        let mut st = self.lock_recording()?;
        Some(self.begin_locked(&mut st, site, emit))
    }

    /// The recorder's state while it records (`None` when it does not), after a SIGUSR1 the
    /// flight recorder was sent has made its dump.
    #[inline(always)]
    pub(super) fn lock_recording(&self) -> Option<parking_lot::MutexGuard<'_, RecState>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let mut st = self.st.lock();
        if !st.recording {
            return None;
        }
        // A load first: a swap is a locked instruction on every call.
        if st.flight.is_some()
            && flight::SIGNALLED.load(Ordering::Relaxed)
            && flight::SIGNALLED.swap(false, Ordering::Relaxed)
        {
            self.flight_trigger(&mut st, "SIGUSR1");
        }
        Some(st)
    }

    /// `begin_with` for a hot call, with the flight recorder's fast path: `key` puts the
    /// call's raw inputs into a `RawKey` (`false`: this call cannot take the fast path), and a
    /// call seen before with the same inputs is logged as it was, without building or
    /// encoding it. Anything else, and every call of a full recording, goes through `emit`.
    #[inline]
    pub(super) fn begin_fast(
        &self,
        site: Site,
        kind: u64,
        key: impl FnOnce(&mut RecState, &mut ring::RawKey) -> bool,
        emit: impl FnOnce(&mut RecState, BeginRef<'_, ()>),
    ) -> Option<Tok> {
        self.begin_fast_inner(site, kind, key, FastExtra::default(), emit)
    }

    /// `begin_fast` for a copy or a sync (`extra`). Host bytes uploaded (at most
    /// `FAST_BLOB_MAX` of them): the raw key says where and how much, and the bytes' blob id
    /// is put into the template, so an engine's per-step upload of new tokens is kept without
    /// encoding its call. A larger copy takes the slow path: its raw key does not say which
    /// bytes it carried (before, one learned from a first copy logged every later copy to the
    /// same place with the first one's bytes, and a dump replayed stale data).
    #[inline]
    pub(super) fn begin_fast_with(
        &self,
        site: Site,
        kind: u64,
        key: impl FnOnce(&mut RecState, &mut ring::RawKey) -> bool,
        extra: FastExtra<'_>,
        emit: impl FnOnce(&mut RecState, BeginRef<'_, ()>),
    ) -> Option<Tok> {
        if extra.blob.is_some_and(|b| b.len() > FAST_BLOB_MAX) {
            let mut st = self.lock_recording()?;
            return Some(self.begin_locked(&mut st, site, emit));
        }
        self.begin_fast_inner(site, kind, key, extra, emit)
    }

    #[inline]
    fn begin_fast_inner(
        &self,
        site: Site,
        kind: u64,
        key: impl FnOnce(&mut RecState, &mut ring::RawKey) -> bool,
        extra: FastExtra<'_>,
        emit: impl FnOnce(&mut RecState, BeginRef<'_, ()>),
    ) -> Option<Tok> {
        let mut st = self.lock_recording()?;
        // While a stream captures, every call takes the slow path, so the capture's frames
        // exist to be kept with its graph (`FlightStore::capture_open`).
        if st.flight.is_none()
            || st.sync_writes.on
            || !st.capturing.is_empty()
            || st.tool_thread.is_some()
        {
            return Some(self.begin_locked(&mut st, site, emit));
        }
        let thread = st.thread();
        let mut k = ring::RawKey::new(kind, site as *const _ as usize, thread);
        if !key(&mut st, &mut k) {
            return Some(self.begin_locked(&mut st, site, emit));
        }
        let (seq, gen) = (st.seq, st.gen);
        let t0 = self.clock.raw();
        let t_ns = self.clock.delta_as_nanos(self.epoch, t0);
        // The bytes are kept whichever path the call takes (the slow one names them too).
        let id = extra.blob.map(|b| st.blob(b));
        let f = st.flight.as_deref_mut().expect("checked");
        let hit = match &id {
            None => f.fast_call(&k, gen, seq, t_ns),
            Some(id) => f.fast_blob_call(&k, gen, seq, t_ns, id),
        };
        if hit {
            if let (Some(dst), Some(id), Some(b)) = (extra.fill, id, extra.blob) {
                let to = st.addr(dst);
                st.note_fill(&to, id, b.len() as u64);
            }
            if extra.waits {
                st.open_calls.push(super::state::OpenCall {
                    seq,
                    thread,
                    since: std::time::Instant::now(),
                    own: None,
                });
            }
            flight::set_open(&self.st, seq);
            st.seq += 1;
            return Some(Tok {
                seq,
                t0,
                segment: st.segment,
                fast: true,
            });
        }
        let tok = self.begin_locked(&mut st, site, emit);
        if let Some(f) = st.flight.as_deref_mut() {
            match &id {
                None => f.learn(&k, gen, seq),
                Some(id) => f.learn_blob(&k, gen, seq, id),
            }
        }
        Some(tok)
    }

    /// The Begin frame of a call, under the recorder's lock.
    #[inline]
    pub(super) fn begin_locked(
        &self,
        st: &mut RecState,
        site: Site,
        emit: impl FnOnce(&mut RecState, BeginRef<'_, ()>),
    ) -> Tok {
        let seq = st.seq;
        st.seq += 1;
        st.in_flight += 1;
        let site = st.site(site);
        let thread = st.thread();
        if st.flight.is_some() {
            st.open_calls.push(super::state::OpenCall {
                seq,
                thread,
                since: std::time::Instant::now(),
                own: None,
            });
        }
        let t0 = self.clock.raw();
        let t_ns = self.clock.delta_as_nanos(self.epoch, t0);
        emit(
            st,
            BeginRef {
                seq,
                thread,
                site,
                t_ns,
                call: &(),
            },
        );
        Tok {
            seq,
            t0,
            segment: st.segment,
            fast: false,
        }
    }

    /// Finish a call: update the maps from its result (always, recording or not) and write the
    /// End frame (when recording). Errors and host syncs flush the trace.
    #[inline]
    pub(super) fn finish<T>(
        &self,
        tok: Option<Tok>,
        r: &Result<T>,
        scope: SyncScope,
        ok: impl FnOnce(&mut RecState, &T) -> Value,
    ) {
        if tok.as_ref().is_some_and(|t| t.fast) {
            // Logged as returning `Ok(())` already; a fast call's map updates are made at
            // its start. A sync still settles what it made visible, below.
            flight::clear_open();
            if r.is_ok() && matches!(scope, SyncScope::None) {
                return;
            }
        }
        let mut st = self.st.lock();
        let ret = match r {
            Ok(v) => Ok(ok(&mut st, v)),
            Err(e) => Err(err_rec(e)),
        };
        let Some(tok) = tok else { return };
        // (Fast calls that wait are listed too.)
        if !st.open_calls.is_empty() {
            if let Some(i) = st.open_calls.iter().rposition(|c| c.seq == tok.seq) {
                st.open_calls.remove(i);
            }
        }
        if tok.segment != st.segment {
            return;
        }
        if !tok.fast {
            st.in_flight = st.in_flight.saturating_sub(1);
        }
        if st.sync_writes.on {
            st.sync_writes.returned(tok.seq);
        }
        let dur_ns = self.clock.delta_as_nanos(tok.t0, self.clock.raw());
        let failed = ret.is_err();
        // A fast call's `Ok(())` is implied by its log entry; any other result (a readback's
        // bytes, an error) is kept whole.
        if !(tok.fast && matches!(ret, Ok(Value::Unit))) {
            st.emit_end(tok.seq, dur_ns, &ret);
        }
        if let (true, Err(e)) = (st.flight.is_some(), &ret) {
            let reason = format!("call #{} failed: {}", tok.seq, e.message);
            self.flight_trigger(&mut st, &reason);
        }
        if !failed {
            self.settle(&mut st, scope, tok.seq);
            // Hashing reads buffers back: never while a stream captures.
            if !matches!(scope, SyncScope::None)
                && self.hash_syncs.load(Ordering::Relaxed)
                && st.capturing.is_empty()
            {
                self.hash_buffers(&mut st, tok.seq);
            }
        }
        if failed || !matches!(scope, SyncScope::None) {
            st.flush();
        }
        // A flight recorder whose engine marks no steps counts host syncs as step ends.
        let sync_step = !failed
            && !matches!(scope, SyncScope::None)
            && st
                .flight
                .as_deref()
                .is_some_and(|f| f.cfg.steps_from_syncs && !f.marked_steps);
        drop(st);
        if sync_step {
            self.flight_step(false);
        }
    }

    /// A finish for calls whose result needs no map update: touches the lock only when
    /// recording.
    #[inline]
    pub(super) fn finish_plain<T>(
        &self,
        tok: Option<Tok>,
        r: &Result<T>,
        ok: impl FnOnce(&T) -> Value,
    ) {
        if tok.is_some() {
            self.finish(tok, r, SyncScope::None, |_, v| ok(v));
        }
    }

    /// Hash every live device buffer (not host aliases) after sync `seq`, but those another
    /// stream or another thread may still be writing: their bytes now are not the ones a
    /// replay, issuing the calls in order, sees here.
    pub(super) fn hash_buffers(&self, st: &mut RecState, seq: u64) {
        let mut live: Vec<(BufferId, u64, u64)> = st
            .bufs
            .iter()
            .filter(|(_, b)| b.alias_of.is_none() && !st.sync_writes.unsettled(b.id, seq))
            .map(|(p, b)| (b.id, *p, b.size))
            .collect();
        live.sort();
        let mut bytes = Vec::new();
        let mut hashes = Vec::with_capacity(live.len());
        for (id, p, size) in live {
            bytes.clear();
            bytes.resize(size as usize, 0);
            if self.inner.copy_d2h(DevicePtr(p), &mut bytes).is_ok() {
                hashes.push((id, BlobId::of(&bytes)));
            }
        }
        st.emit(&Frame::SyncHashes { seq, hashes });
    }

    /// At a host sync: async device-to-host results on the synced stream become visible (record
    /// them), and retained sources must still hold what they held at their call.
    pub(super) fn settle(&self, st: &mut RecState, scope: SyncScope, at_sync: u64) {
        let stream = match scope {
            SyncScope::None => return,
            SyncScope::Stream(s) => s,
            SyncScope::Event(e) => match st.event_stream.get(&e) {
                Some(s) => *s,
                None => return,
            },
        };
        // An event sync waits only for the work before the event's record, not for all of
        // its stream: it settles nothing.
        if let (true, SyncScope::Stream(_)) = (st.sync_writes.on, scope) {
            let s = st.stream(stream);
            st.sync_writes.settled(s);
        }
        let mut keep = Vec::new();
        for p in std::mem::take(&mut st.pending) {
            if p.stream != stream {
                keep.push(p);
                continue;
            }
            // SAFETY: the trait's contract for copy_d2h_async and copy_h2d_async_retained:
            // the host buffer stays valid and untouched by the caller until the next
            // synchronisation of its stream, which is this call.
            let bytes = unsafe { std::slice::from_raw_parts(p.ptr as *const u8, p.len) };
            match p.hash {
                None => {
                    let data = st.readback(bytes);
                    st.emit(&Frame::D2HResult {
                        seq: p.seq,
                        data,
                        at_sync,
                    });
                }
                Some(h) => {
                    if st.blob_id(bytes) != h {
                        st.emit(&Frame::Finding(Finding::RetainedSourceChanged {
                            seq: p.seq,
                            at_sync,
                        }));
                    }
                }
            }
        }
        st.pending = keep;
    }
}
