//! The recorder's thread of device checkpoints: it waits for the device's "done" in host
//! memory (no driver call, so no capture of the engine's is disturbed), names what the
//! gather copied, and writes the checkpoint into its span.

use super::{say_times, Job, Seg, Slot, Watch, RING_AT};
use crate::recorder::ckpt_kernel::{ENTRY_WORDS, FULL, SAME};
use crate::trace::{codec, BlobId, BufferId, Frame};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Weak};

/// The worker: for each checkpoint sent, wait for the device to say it is done (a word in
/// host memory: no driver call, so no capture of the engine's is disturbed), then consume
/// it into the flight store.
pub(super) fn run(
    jobs: mpsc::Receiver<Job>,
    watch: Arc<Watch>,
    st: Weak<parking_lot::Mutex<crate::recorder::state::RecState>>,
) {
    while let Ok(job) = jobs.recv() {
        // Short naps: a short step's checkpoint is done in tens of microseconds, and the next
        // waits for this one to be consumed. Only while a checkpoint is out.
        let mut nap = std::time::Duration::from_micros(5);
        loop {
            if watch.gone.load(Ordering::Acquire) || st.strong_count() == 0 {
                return;
            }
            if job.host.word(0).load(Ordering::Acquire) == job.no {
                break;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(std::time::Duration::from_micros(100));
        }
        let Some(st) = st.upgrade() else { return };
        consume(&job, &watch, &st);
        // The job holds the table and ring: let go of them before the next checkpoint may
        // replace the table.
        drop(job);
        drop(st);
        watch.busy.store(false, Ordering::Release);
    }
}

/// A new chunk's blob: its id and encoded frame.
struct Taken {
    entry: usize,
    id: BlobId,
    payload: Vec<u8>,
}

/// A done checkpoint into the store: copied chunks named, the chunk map updated, each live
/// buffer's Address and Initial frames written into the checkpoint's span.
fn consume(job: &Job, watch: &Watch, st: &parking_lot::Mutex<crate::recorder::state::RecState>) {
    let t0 = std::time::Instant::now();
    let (taken, copied) = name_taken(job);
    // A filled buffer's whole is made of its copies' parts (a part cannot itself be
    // chunked), which only the store knows.
    let flat: HashMap<BlobId, Vec<BlobId>> = {
        let st = st.lock();
        let f = st.flight.as_deref();
        job.fills
            .iter()
            .flat_map(|(_, segs)| segs.iter())
            .filter_map(|s| match s {
                Seg::Known(b) => Some((*b, f?.parts_of(b)?.to_vec())),
                Seg::Gap(_) => None,
            })
            .collect()
    };
    let mut u = Update {
        ok: true,
        ..Update::default()
    };
    u.apply(job, watch, taken, &flat);
    let (pins, unpins, wholes, data, mut ok) = (u.pins, u.unpins, u.wholes, u.data, u.ok);
    let named = t0.elapsed();
    // The checkpoint's frames, encoded before the lock is taken: the engine's calls wait
    // for that lock.
    let mut frames: Vec<Vec<u8>> = Vec::new();
    if ok {
        for &(buf, addr, size, site) in &job.bufs {
            for f in [
                Frame::Address { buf, addr },
                Frame::Initial {
                    buf,
                    bytes: size,
                    data: data[&buf],
                    site,
                },
            ] {
                let mut p = Vec::new();
                if codec::append(&f, &mut p).is_err() {
                    ok = false;
                }
                frames.push(p);
            }
        }
    }
    let mut st = st.lock();
    let locked_at = std::time::Instant::now();
    let Some(f) = st.flight.as_deref_mut() else {
        return;
    };
    for (id, payload) in pins {
        f.pin(id, move || payload);
    }
    for (id, len, parts) in &wholes {
        f.pin_chunked(*id, *len, parts);
    }
    for id in unpins {
        f.unpin(id);
    }
    f.checkpoint_read_bytes += copied;
    f.checkpoint_frames(job.span_no, frames, ok);
    if !ok {
        f.incomplete_checkpoints += 1;
    }
    drop(st);
    if say_times() {
        eprintln!(
            "gputape: device checkpoint {} consumed: {} entries, {copied} bytes named in {named:?}, held the lock {:?}, all {:?}",
            job.no,
            job.entries.len(),
            locked_at.elapsed(),
            t0.elapsed()
        );
    }
}

/// The chunks the gather copied into the ring, named (hashed) and encoded as blob frames.
/// Done outside any lock: hashing is the checkpoint's real work.
fn name_taken(job: &Job) -> (Vec<Taken>, u64) {
    let out = |i: usize| job.table.word(i * ENTRY_WORDS + 6).load(Ordering::Relaxed);
    let mut taken: Vec<Taken> = Vec::new();
    let mut copied = 0u64;
    for i in 0..job.entries.len() {
        let at = out(i);
        if at >= FULL {
            continue;
        }
        let len = job.table.word(i * ENTRY_WORDS + 1).load(Ordering::Relaxed);
        if at + len > job.cap {
            continue;
        }
        let bytes = job.host.bytes(RING_AT + at as usize, len as usize);
        copied += len;
        let id = BlobId::of(bytes);
        // Not compressed: a chunk of zeros (most of a KV pool) is one blob for all of them,
        // and zstd on every chunk took longer than the steps between checkpoints.
        let mut payload = Vec::new();
        codec::append_blob(id, len, false, bytes, &mut payload);
        taken.push(Taken {
            entry: i,
            id,
            payload,
        });
    }
    (taken, copied)
}

/// What a checkpoint changes in the store, worked out under the chunk map's lock and applied
/// under the recorder's: blobs to pin (with their frames, or already stored), to let go, and
/// wholes made of parts; each live buffer's blob. `ok` is false when a buffer is not whole.
#[derive(Default)]
struct Update {
    pins: Vec<(BlobId, Option<Vec<u8>>)>,
    unpins: Vec<BlobId>,
    wholes: Vec<(BlobId, u64, Vec<BlobId>)>,
    data: HashMap<BufferId, BlobId>,
    ok: bool,
}

impl Update {
    /// The chunk map brought up to date with what the gather saw: each entry's hash and
    /// blob, each filled buffer's whole from its copies and gaps, each live buffer's blob.
    fn apply(
        &mut self,
        job: &Job,
        watch: &Watch,
        taken: Vec<Taken>,
        flat: &HashMap<BlobId, Vec<BlobId>>,
    ) {
        let out = |i: usize| job.table.word(i * ENTRY_WORDS + 6).load(Ordering::Relaxed);
        let hash = |i: usize| {
            [
                job.table.word(i * ENTRY_WORDS + 4).load(Ordering::Relaxed),
                job.table.word(i * ENTRY_WORDS + 5).load(Ordering::Relaxed),
            ]
        };
        let Update {
            pins,
            unpins,
            wholes,
            data,
            ok,
        } = self;
        let mut map = watch.chunks.lock();
        for g in &job.gone {
            unpins.extend(g.chunks.iter().filter_map(|c| c.blob));
            unpins.extend(g.whole);
        }
        let mut changed: HashSet<BufferId> = HashSet::default();
        // By entry: an entry skipped below (its buffer gone) cannot shift the others'.
        let mut taken: HashMap<usize, Taken> = taken.into_iter().map(|x| (x.entry, x)).collect();
        let mut gaps: HashMap<usize, BlobId> = HashMap::default();
        for (i, &(buf, slot)) in job.entries.iter().enumerate() {
            let Some(b) = map.get_mut(&buf) else { continue };
            let ci = match slot {
                Slot::Chunk(ci) => ci,
                Slot::Gap => {
                    if let Some(x) = taken.remove(&i) {
                        gaps.insert(i, x.id);
                        // Held by the whole it is a part of, once that is pinned.
                        pins.push((x.id, Some(x.payload)));
                        unpins.push(x.id);
                    }
                    continue;
                }
            };
            b.hashed = true;
            let Some(c) = b.chunks.get_mut(ci as usize) else {
                continue;
            };
            let at = out(i);
            c.hash = hash(i);
            if at == SAME {
                continue;
            }
            changed.insert(buf);
            unpins.extend(c.blob.take());
            let Some(x) = taken.remove(&i) else {
                // Not taken (the ring was full): the rolling takes it again from here.
                b.hint = b.hint.min(ci as usize);
                continue;
            };
            c.blob = Some(x.id);
            pins.push((x.id, Some(x.payload)));
        }
        for (buf, segs) in &job.fills {
            let Some(b) = map.get_mut(buf) else { continue };
            let parts: Option<Vec<BlobId>> = segs
                .iter()
                .map(|s| match s {
                    Seg::Known(k) => Some(flat.get(k).cloned().unwrap_or_else(|| vec![*k])),
                    Seg::Gap(i) => gaps.get(i).map(|g| vec![*g]),
                })
                .collect::<Option<Vec<_>>>()
                .map(|v| v.concat());
            // A gap the ring had no room for: the buffer is read at a later checkpoint.
            let Some(parts) = parts else { continue };
            let w = match parts.as_slice() {
                [one] => {
                    pins.push((*one, None));
                    *one
                }
                _ => {
                    let w = BlobId::chunked(b.size, &parts);
                    wholes.push((w, b.size, parts));
                    w
                }
            };
            b.whole = Some(w);
        }
        for &(buf, _, size, _) in &job.bufs {
            let Some(b) = map.get_mut(&buf) else { continue };
            debug_assert_eq!(b.size, size);
            if changed.contains(&buf) {
                unpins.extend(b.whole.take());
            }
            if let Some(w) = b.whole {
                data.insert(buf, w);
                continue;
            }
            let parts: Option<Vec<BlobId>> = b.chunks.iter().map(|c| c.blob).collect();
            let Some(parts) = parts else {
                *ok = false;
                continue;
            };
            let id = match parts.as_slice() {
                [one] => *one,
                _ => {
                    let w = BlobId::chunked(size, &parts);
                    b.whole = Some(w);
                    wholes.push((w, size, parts));
                    w
                }
            };
            data.insert(buf, id);
        }
    }
}
