//! The flight recorder's call log: what lets it hold minutes of an engine in a few hundred MB
//! and stay out of the engine's way.
//!
//! A decode step makes the same few hundred calls every step: the same kernels on the same
//! buffers from the same call sites. So a call is kept once, as a *template* (its Begin record
//! without seq and time), and each time it is made again the log holds only the template's
//! slot, the time since the previous call and, folded into the tag, that it returned
//! `Ok(())`: four or five bytes where a trace file spends two framed records. Seqs are implied
//! (one more than the previous call's) unless a gap says otherwise.
//!
//! The fast path (`Templates::fast`) goes further: the recorder hashes the call's raw inputs
//! (site, thread, kernel handle, launch shape, stream, argument words) and finds the template
//! without turning pointers into buffer ids or encoding anything. Raw inputs mean the same
//! call only while the recorder's handle maps are unchanged, so every change to them (an
//! allocation, a free, a new stream) moves a generation counter that empties the raw cache.
//! A typed launch whose raw inputs differ from a learned one in scalar values only becomes a
//! delta there too: where each scalar lies in the template's call is found once, at learning.
//!
//! This is an in-memory format of this process, never written: a dump expands it back into
//! ordinary Begin and End records. Decoding is still checked, and stops at the first record
//! it cannot read rather than trusting its own bytes.

use crate::trace::codec::{append_begin_split, launch_val_spans, split_begin};
use crate::trace::BufferId;
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;
mod key;
mod log;

pub(crate) use key::RawKey;
use key::{PassHasher, RAW_WORDS};
pub(crate) use log::{Log, Record};
use std::hash::Hasher;

/// What a kept call may have written, worked out once per template for incremental
/// checkpoints.
#[derive(Clone, Debug, Default)]
pub(crate) struct Writes {
    /// The buffers it may have written.
    pub bufs: SmallVec<[BufferId; 4]>,
    /// A graph launch whose capture is not kept, or a raw launch whose kernel has no
    /// layout: anything.
    pub all: bool,
    /// The stream its device work went on, where that work may still be running when the
    /// call returns: a device checkpoint orders itself after such streams only.
    pub stream: Option<crate::trace::StreamRef>,
    /// No delta of this call writes anything a checkpoint must learn from it: a blocking
    /// host-to-device copy (what it writes is noted as made, `note_fill`: a step's token
    /// ids) or a step marker (its number). Such deltas are not read at a checkpoint.
    pub deltas_write_nothing: bool,
}

struct Template {
    /// The Begin record's thread and site fields, then its call, as encoded.
    content: Box<[u8]>,
    head_len: usize,
    /// The newest span that named it: it goes when no kept span does.
    last_span: u64,
    writes: Option<Writes>,
    /// The template the call after this one was last made from: the guess for a new call's
    /// base, as engines repeat their calls in the same order.
    next: u32,
}

/// How a new call was kept.
pub(crate) enum Interned<'a> {
    Slot(u32),
    /// As template `base` with `bytes` at offset `at` of its call: a call that differs from
    /// the one made at the same point of the last step in at most `DELTA_MAX` bytes (a
    /// position, a length; a buffer id too, so its writes are read again).
    Delta {
        base: u32,
        at: usize,
        bytes: &'a [u8],
    },
}

/// The most bytes a delta may replace.
const DELTA_MAX: usize = 16;

/// Where `new` differs from `old` of the same length, if within `DELTA_MAX` bytes: the first
/// differing offset and the bytes from there to the last difference.
fn small_diff<'a>(old: &[u8], new: &'a [u8]) -> Option<(usize, &'a [u8])> {
    if old.len() != new.len() {
        return None;
    }
    let first = old.iter().zip(new).position(|(a, b)| a != b)?;
    let last = old.len()
        - 1
        - old
            .iter()
            .rev()
            .zip(new.iter().rev())
            .position(|(a, b)| a != b)?;
    (last + 1 - first <= DELTA_MAX).then(|| (first, &new[first..=last]))
}

/// A learned raw key, and the template that calls with these raw inputs are kept as. One
/// cache line: the fast path reads the guessed entry at every hot call, after the backend's
/// own work (a CUDA launch) has evicted it; its fields spread over three lines and a key
/// behind a pointer of its own missed three times a call. The key's words are in
/// `Templates::keys`, in the order entries were learned, as an engine's calls come.
#[repr(align(64))]
struct RawEntry {
    /// Where the key's words start in `Templates::keys`, and how many.
    key_at: u32,
    key_len: u8,
    slot: u32,
    /// Calls with these raw inputs were kept as a delta of `slot`, not as a template of their
    /// own: an engine's layers repeat one launch on other weights, so the call after layer
    /// 0's becomes a delta of it. Learned as such, the fast path keeps them too; without it,
    /// every layer but the first took the slow path on every step.
    patch: Option<Patch>,
    /// A launch learned but for its scalars: those words are not compared, and a call whose
    /// values differ becomes a delta.
    shape: Option<Box<Shape>>,
    /// A copy of host bytes: where its call holds the bytes' blob id, which is all that
    /// differs between the steps of an engine that uploads new tokens to the same place.
    blob_at: Option<u16>,
    /// The entry the call after this one was found by last time: tried first, before any
    /// hashing, as engines repeat their calls in the same order.
    next: u32,
    /// The entry the call two after this one was found by last time. An engine's layers
    /// make some calls on the same scratch buffers (a residual add, an activation): one
    /// entry for every layer, followed by the next layer's call, so its `next` is wrong at
    /// all layers but one; the call before it names the layer, and its `next2` is right.
    next2: u32,
    /// `next` was seen to change: the guess comes from the entry before's `next2`.
    forks: bool,
    /// The newest span the fast path kept a call of this entry in, marked into its
    /// template's `last_span` when it moves: once a span, not at every call (a write to the
    /// template's line each call missed the cache on CUDA).
    ///
    /// For an entry with a patch, with what its call (the template with the patch) may
    /// write, worked out once (`Templates::entry_writes`): its deltas are then logged as
    /// writing nothing new (they differ from it in scalars at most), and a checkpoint asks
    /// the entries instead of reading every delta of the span: a decode step's later layers
    /// are such deltas, thirty thousand between two checkpoints, whose reading cost the
    /// engine's thread a millisecond at each (run 94).
    span: u64,
}

// One line, as `RawEntry`'s doc says.
const _: () = assert!(std::mem::size_of::<RawEntry>() == 64);

/// A delta learned with its raw key: `bytes[..n]` at offset `at` of the template's call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Patch {
    at: u16,
    n: u8,
    bytes: [u8; DELTA_MAX],
}

impl Patch {
    /// `bytes` at `at`, if they fit a delta.
    pub fn new(at: usize, bytes: &[u8]) -> Option<Patch> {
        let mut p = Patch {
            at: u16::try_from(at).ok()?,
            n: u8::try_from(bytes.len()).ok()?,
            bytes: [0; DELTA_MAX],
        };
        p.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(p)
    }

    fn range(&self) -> std::ops::Range<usize> {
        usize::from(self.at)..usize::from(self.at) + usize::from(self.n)
    }
}

/// Where a launch's scalar values lie in its template's call.
struct Shape {
    scalars: u32,
    /// (value word index, offset in the call, length) per scalar argument.
    vals: SmallVec<[(u8, u16, u8); 4]>,
}

/// No entry (`RawEntry::next`, `Templates::last_hit`).
const NONE: u32 = u32::MAX;

/// Two keys' words are equal. Folded rather than compared with `==`, which calls `memcmp`:
/// these are a few dozen words, compared on every hot call.
#[inline(always)]
fn same_words(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How the fast path kept a call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fast {
    Slot(u32),
    /// Template `base` with `bytes[..n]` at offset `at` of its call; `scalar`: only scalar
    /// arguments differ from the template's (a learned patch may name other buffers, so
    /// what it writes is read again).
    Delta {
        base: u32,
        at: usize,
        bytes: [u8; DELTA_MAX],
        n: usize,
        scalar: bool,
    },
}

/// The most raw keys kept: an engine whose arguments change every call would otherwise grow
/// the cache without bound (it is emptied when full, and when the generation moves).
const RAW_MAX: usize = 1 << 16;

/// Maps keyed by a `RawKey`'s hash, which is mixed already.
type ByHash<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<PassHasher>>;

/// The calls a flight recorder keeps, each once, by slot.
pub(crate) struct Templates {
    slab: Vec<Option<Template>>,
    free: Vec<u32>,
    /// Content hash -> the slots with that hash (compared byte for byte).
    by_content: HashMap<u64, SmallVec<[u32; 1]>>,
    /// Raw keys learned since the maps last changed, exact and shape entries alike.
    entries: Vec<RawEntry>,
    /// Exact raw key hash -> its entry.
    raw: ByHash<u32>,
    /// Launches by their raw inputs less their scalars -> their shape entry.
    shape: ByHash<u32>,
    /// Every entry's key words, in the order they were learned (`RawEntry::key_at`).
    keys: Vec<u64>,
    /// What patched entries' calls may write, by entry, worked out at the first checkpoint
    /// that asks (`entry_writes_in`); let go when entries are dropped or move.
    entry_writes: HashMap<u32, Writes>,
    /// The entry the last fast call was found by (`NONE`: none): its `next` is the guess.
    last_hit: u32,
    /// The entry the fast call before that was found by: its `next2` is the guess when
    /// `last_hit`'s successor forks.
    prev_hit: u32,
    /// Fast calls whose guess failed and whose key was hashed and looked up.
    pub(super) lookups: u64,
    /// The recorder's map generation the raw cache was filled under.
    raw_gen: u64,
    /// Bytes of template content held.
    content_bytes: usize,
    /// Patched entries the fast path used, dropped with the raw cache (the maps changed)
    /// before a checkpoint asked them what they wrote: (template, patch) -> the newest span
    /// they were used in. `entry_writes_in` asks them too, then lets them go.
    retired: HashMap<(u32, Patch), u64>,
}

fn content_hash(head: &[u8], call: &[u8]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(head);
    h.write(call);
    h.finish()
}

impl Templates {
    /// Keep a call whose Begin record's parts are `head` and `call`, made after a call of
    /// template `prev`: as a template it already is, as a small change to the template the
    /// call after `prev` was last made from, or as a new template.
    pub fn intern_or_delta<'a>(
        &mut self,
        head: &[u8],
        call: &'a [u8],
        span: u64,
        prev: Option<u32>,
    ) -> Interned<'a> {
        let guess = prev.and_then(|p| Some(self.slab.get(p as usize)?.as_ref()?.next));
        let h = content_hash(head, call);
        let known = self.find(h, head, call);
        let kept = match (known, guess) {
            (Some(s), _) => Interned::Slot(s),
            (None, Some(g)) => match self.slab.get(g as usize) {
                Some(Some(t)) if *head == t.content[..t.head_len] => {
                    match small_diff(&t.content[t.head_len..], call) {
                        Some((at, bytes)) => Interned::Delta { base: g, at, bytes },
                        None => Interned::Slot(self.insert(h, head, call, span)),
                    }
                }
                _ => Interned::Slot(self.insert(h, head, call, span)),
            },
            (None, None) => Interned::Slot(self.insert(h, head, call, span)),
        };
        let base = match kept {
            Interned::Slot(s) | Interned::Delta { base: s, .. } => s,
        };
        if let Some(Some(t)) = self.slab.get_mut(base as usize) {
            t.last_span = span;
        }
        if let Some(Some(p)) = prev.and_then(|p| self.slab.get_mut(p as usize)) {
            p.next = base;
        }
        kept
    }

    fn find(&self, h: u64, head: &[u8], call: &[u8]) -> Option<u32> {
        self.by_content.get(&h)?.iter().copied().find(|&s| {
            matches!(self.slab.get(s as usize), Some(Some(t))
                if t.content[..t.head_len] == *head && t.content[t.head_len..] == *call)
        })
    }

    fn insert(&mut self, h: u64, head: &[u8], call: &[u8], span: u64) -> u32 {
        let mut content = Vec::with_capacity(head.len() + call.len());
        content.extend_from_slice(head);
        content.extend_from_slice(call);
        self.content_bytes += content.len();
        let t = Template {
            content: content.into_boxed_slice(),
            head_len: head.len(),
            last_span: span,
            writes: None,
            next: u32::MAX,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(t);
                s
            }
            None => {
                self.slab.push(Some(t));
                (self.slab.len() - 1) as u32
            }
        };
        self.by_content.entry(h).or_default().push(slot);
        slot
    }

    /// The slot a call with raw inputs `key` was interned as, if it was seen since the maps
    /// last changed (`gen`); named by span `span`. The entry the last call's entry was
    /// followed by is tried first; only when that guess fails is the key hashed.
    #[inline]
    pub fn fast(&mut self, key: &RawKey, gen: u64, span: u64) -> Option<Fast> {
        if gen != self.raw_gen || !key.fits() {
            return None;
        }
        let guess = match self.entries.get(self.last_hit as usize) {
            Some(l) if l.forks => self.entries.get(self.prev_hit as usize).map(|p| p.next2),
            l => l.map(|l| l.next),
        };
        let hit = guess.filter(|&i| self.matches(i, key)).or_else(|| {
            self.lookups += 1;
            self.lookup(key)
        });
        let Some(i) = hit else {
            (self.last_hit, self.prev_hit) = (NONE, NONE);
            return None;
        };
        self.followed_by(i);
        let e = &self.entries[i as usize];
        let kept = match (&e.shape, &e.patch) {
            (None, None) => Fast::Slot(e.slot),
            // Its writes are the entry's (`entry_writes_in`).
            (None, Some(p)) => Fast::Delta {
                base: e.slot,
                at: usize::from(p.at),
                bytes: p.bytes,
                n: usize::from(p.n),
                scalar: true,
            },
            (Some(shape), _) => self.scalar_delta(e, shape, key.words())?,
        };
        let slot = match kept {
            Fast::Slot(s) | Fast::Delta { base: s, .. } => s,
        };
        // Entries are dropped with their template (`evict`), so one that marked this span
        // into its slot still names that template, whose `last_span` only grows.
        if e.span != span {
            self.slab.get_mut(slot as usize)?.as_mut()?.last_span = span;
            self.entries[i as usize].span = span;
        }
        Some(kept)
    }

    /// The words `e` was learned with.
    #[inline(always)]
    fn key_of(&self, e: &RawEntry) -> &[u64] {
        self.keys
            .get(e.key_at as usize..e.key_at as usize + usize::from(e.key_len))
            .unwrap_or(&[])
    }

    /// Entry `i` found the call after `last_hit`'s: note it as the guesses' answer.
    #[inline(always)]
    fn followed_by(&mut self, i: u32) {
        // Written only when they change: an engine repeating its calls changes none, and a
        // store to an entry's line at every call is one more to drain before the unlock.
        if let Some(l) = self.entries.get_mut(self.last_hit as usize) {
            if l.next != i {
                l.forks |= l.next != NONE;
                l.next = i;
            }
        }
        if let Some(p) = self.entries.get_mut(self.prev_hit as usize) {
            if p.next2 != i {
                p.next2 = i;
            }
        }
        (self.prev_hit, self.last_hit) = (self.last_hit, i);
    }

    /// The entry `key` is found by through the hash maps: its exact key, else (a launch with
    /// scalars) its shape.
    fn lookup(&self, key: &RawKey) -> Option<u32> {
        let exact = self.raw.get(&key.hash()).copied();
        if let Some(i) = exact.filter(|&i| self.matches(i, key)) {
            return Some(i);
        }
        if key.scalars == 0 {
            return None;
        }
        let shape = self.shape.get(&key.shape_hash()).copied();
        shape.filter(|&i| self.matches(i, key))
    }

    /// Whether entry `i` finds calls with raw inputs `key`.
    #[inline(always)]
    fn matches(&self, i: u32, key: &RawKey) -> bool {
        let Some(e) = self.entries.get(i as usize) else {
            return false;
        };
        let words = key.words();
        let learned = self.key_of(e);
        match &e.shape {
            None => same_words(learned, words),
            Some(shape) => {
                shape.scalars == key.scalars
                    && learned.len() == words.len()
                    && learned
                        .iter()
                        .zip(words)
                        .enumerate()
                        .all(|(i, (a, b))| a == b || key.scalars & (1 << i) != 0)
            }
        }
    }

    /// A launch known but for its scalar values, as a delta of its template: the new values'
    /// bytes, and the template's call bytes between them (its template itself when no value
    /// changed).
    fn scalar_delta(&self, e: &RawEntry, shape: &Shape, words: &[u64]) -> Option<Fast> {
        let changed = || {
            shape
                .vals
                .iter()
                .filter(|(w, ..)| self.key_of(e)[*w as usize] != words[*w as usize])
        };
        let scalars = changed()
            .map(|v| usize::from(v.1)..usize::from(v.1) + usize::from(v.2))
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end));
        // The bytes to replace: the changed values' and a learned patch's, as one range.
        let range = match (scalars.clone(), e.patch.map(|p| p.range())) {
            (None, None) => return Some(Fast::Slot(e.slot)),
            (Some(r), None) | (None, Some(r)) => r,
            (Some(a), Some(b)) => a.start.min(b.start)..a.end.max(b.end),
        };
        let (first, end) = (range.start, range.end);
        if end - first > DELTA_MAX {
            return None;
        }
        let t = self.slab.get(e.slot as usize)?.as_ref()?;
        let call = &t.content[t.head_len..];
        let mut bytes = [0u8; DELTA_MAX];
        bytes[..end - first].copy_from_slice(call.get(first..end)?);
        if let Some(p) = &e.patch {
            let r = p.range();
            bytes[r.start - first..r.end - first].copy_from_slice(&p.bytes[..usize::from(p.n)]);
        }
        for &(w, at, len) in changed() {
            let at = usize::from(at) - first;
            let new = words[w as usize].to_le_bytes();
            bytes[at..][..usize::from(len)].copy_from_slice(&new[..usize::from(len)]);
        }
        // Scalars aside, the call is the entry's: its writes are the entry's.
        Some(Fast::Delta {
            base: e.slot,
            at: first,
            bytes,
            n: end - first,
            scalar: true,
        })
    }

    /// `fast` for a copy of host bytes whose blob id is `id`: its template with the new id in
    /// place (the raw key holds where and how much, not the bytes). `None` unless the key was
    /// learned with `learn_blob`.
    pub fn fast_blob(&mut self, key: &RawKey, gen: u64, span: u64, id: &[u8; 16]) -> Option<Fast> {
        let base = match self.fast(key, gen, span)? {
            Fast::Slot(s) | Fast::Delta { base: s, .. } => s,
        };
        let at = self.entries.get(self.last_hit as usize)?.blob_at?;
        let mut bytes = [0u8; DELTA_MAX];
        bytes[..16].copy_from_slice(id);
        Some(Fast::Delta {
            base,
            at: usize::from(at),
            bytes,
            n: 16,
            // The destination and length are the key's: what the copy writes is the same.
            scalar: true,
        })
    }

    /// `learn` for a copy of host bytes with blob id `id`: where the id lies in the call as
    /// kept (`slot` with `patch`) is found and kept with the key. Not learned when the id is
    /// not there once, or the patch changes anything but the id.
    pub fn learn_blob(
        &mut self,
        key: &RawKey,
        gen: u64,
        (slot, patch): (u32, Option<Patch>),
        id: &[u8; 16],
    ) {
        let Some(Some(t)) = self.slab.get(slot as usize) else {
            return;
        };
        let mut call = t.content[t.head_len..].to_vec();
        if let Some(p) = &patch {
            let Some(dst) = call.get_mut(p.range()) else {
                return;
            };
            dst.copy_from_slice(&p.bytes[..usize::from(p.n)]);
        }
        let mut found = call.windows(16).enumerate().filter(|(_, w)| w == id);
        let (Some((at, _)), None) = (found.next(), found.next()) else {
            return;
        };
        if patch.is_some_and(|p| p.range().start < at || p.range().end > at + 16) {
            return;
        }
        let Ok(at) = u16::try_from(at) else {
            return;
        };
        self.learn(key, gen, slot, patch);
        if let Some(e) = self.entries.get_mut(self.last_hit as usize) {
            e.blob_at = Some(at);
        }
    }

    /// Calls with raw inputs `key` are `slot` (patched by `patch`, if given) while the maps
    /// stay at generation `gen`.
    pub fn learn(&mut self, key: &RawKey, gen: u64, slot: u32, patch: Option<Patch>) {
        if !key.fits() {
            return;
        }
        if gen != self.raw_gen || self.entries.len() + 2 > RAW_MAX {
            for e in self.entries.drain(..) {
                if let (Some(p), true) = (e.patch, e.span != u64::MAX) {
                    let at = self.retired.entry((e.slot, p)).or_insert(e.span);
                    *at = (*at).max(e.span);
                }
            }
            self.raw.clear();
            self.shape.clear();
            self.keys.clear();
            self.entry_writes.clear();
            (self.last_hit, self.prev_hit) = (NONE, NONE);
            self.raw_gen = gen;
        }
        let at = self.entries.len() as u32;
        let (key_at, key_len) = (self.keys.len() as u32, key.words().len() as u8);
        self.keys.extend_from_slice(key.words());
        self.entries.push(RawEntry {
            key_at,
            key_len,
            slot,
            patch,
            shape: None,
            blob_at: None,
            next: NONE,
            next2: NONE,
            forks: false,
            span: u64::MAX,
        });
        self.raw.insert(key.hash(), at);
        self.followed_by(at);
        if key.scalars != 0 {
            if let Some(shape) = self.shape_of(key, slot) {
                self.shape.insert(key.shape_hash(), at + 1);
                self.entries.push(RawEntry {
                    key_at,
                    key_len,
                    slot,
                    patch,
                    shape: Some(Box::new(shape)),
                    blob_at: None,
                    next: NONE,
                    next2: NONE,
                    forks: false,
                    span: u64::MAX,
                });
            }
        }
    }

    /// Where `key`'s scalar values lie in template `slot`'s call: its inline arguments of at
    /// most 8 bytes, in order, are the key's scalar words.
    fn shape_of(&self, key: &RawKey, slot: u32) -> Option<Shape> {
        let t = self.slab.get(slot as usize)?.as_ref()?;
        let spans = launch_val_spans(&t.content[t.head_len..])?;
        let small = spans.iter().filter(|(_, len)| *len <= 8);
        let words = (0..RAW_WORDS).filter(|i| key.scalars & (1 << i) != 0);
        if small.clone().count() != words.clone().count() {
            return None;
        }
        let vals = words
            .zip(small)
            .map(|(w, &(at, len))| Some((w as u8, u16::try_from(at).ok()?, len as u8)))
            .collect::<Option<_>>()?;
        Some(Shape {
            scalars: key.scalars,
            vals,
        })
    }

    /// A template's Begin record, with `seq` and `t_ns`, appended to `out`; `false` if the
    /// slot is empty.
    pub fn append_begin(&self, slot: u32, seq: u64, t_ns: u64, out: &mut Vec<u8>) -> bool {
        match self.slab.get(slot as usize) {
            Some(Some(t)) => {
                let (head, call) = t.content.split_at(t.head_len);
                append_begin_split(seq, t_ns, head, call, out);
                true
            }
            _ => false,
        }
    }

    /// Whether template `slot`'s deltas write nothing (`Writes::deltas_write_nothing`), as
    /// its writes were worked out by `writes_in`; `false` when they were not.
    pub fn deltas_write_nothing(&self, slot: u32) -> bool {
        matches!(
            self.slab.get(slot as usize),
            Some(Some(Template {
                writes: Some(Writes {
                    deltas_write_nothing: true,
                    ..
                }),
                ..
            }))
        )
    }

    /// `append_begin` for a delta: the template's call with `bytes` at `at`; `false` if the
    /// slot is empty or the bytes do not fit.
    pub fn append_begin_patched(
        &self,
        (slot, at, bytes): (u32, usize, &[u8]),
        seq: u64,
        t_ns: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(Some(t)) = self.slab.get(slot as usize) else {
            return false;
        };
        let (head, call) = t.content.split_at(t.head_len);
        if at.checked_add(bytes.len()).is_none_or(|e| e > call.len()) {
            return false;
        }
        append_begin_split(seq, t_ns, head, call, out);
        let call_at = out.len() - call.len();
        out[call_at + at..][..bytes.len()].copy_from_slice(bytes);
        true
    }

    /// Drop the templates no span from `oldest` on names, and the raw keys that found them:
    /// their slots may be reused.
    pub fn evict_before(&mut self, oldest: u64) {
        for (i, e) in self.slab.iter_mut().enumerate() {
            if e.as_ref().is_some_and(|t| t.last_span < oldest) {
                let t = e.take().expect("checked");
                self.content_bytes -= t.content.len();
                let (head, call) = t.content.split_at(t.head_len);
                let h = content_hash(head, call);
                if let Some(v) = self.by_content.get_mut(&h) {
                    v.retain(|s| *s as usize != i);
                    if v.is_empty() {
                        self.by_content.remove(&h);
                    }
                }
                self.free.push(i as u32);
            }
        }
        // Keys of the templates that stay still hold: a call whose scalars change every step
        // is found as a delta only from a key learned when it was new.
        let slab = &self.slab;
        let live = |s: u32| matches!(slab.get(s as usize), Some(Some(_)));
        let mut moved = vec![NONE; self.entries.len()];
        let mut kept = Vec::with_capacity(self.entries.len());
        let mut keys = Vec::with_capacity(self.keys.len());
        for (i, mut e) in std::mem::take(&mut self.entries).into_iter().enumerate() {
            if live(e.slot) {
                moved[i] = kept.len() as u32;
                // An exact entry and its shape entry share their words.
                let words = &self.keys[e.key_at as usize..][..usize::from(e.key_len)];
                let shared = kept.last().filter(|k: &&RawEntry| {
                    k.key_len == e.key_len
                        && keys[k.key_at as usize..][..usize::from(k.key_len)] == *words
                });
                e.key_at = match shared {
                    Some(k) => k.key_at,
                    None => {
                        keys.extend_from_slice(words);
                        (keys.len() - words.len()) as u32
                    }
                };
                kept.push(e);
            }
        }
        self.keys = keys;
        self.entry_writes.clear();
        let to = |i: u32| moved.get(i as usize).copied().unwrap_or(NONE);
        for e in &mut kept {
            (e.next, e.next2) = (to(e.next), to(e.next2));
        }
        self.entries = kept;
        (self.last_hit, self.prev_hit) = (to(self.last_hit), to(self.prev_hit));
        for map in [&mut self.raw, &mut self.shape] {
            map.retain(|_, i| {
                *i = to(*i);
                *i != NONE
            });
        }
    }

    /// What the templates span `span` named may have written. `compute` works out one
    /// template's writes from a Begin record of it (once per template).
    pub fn writes_in(
        &mut self,
        span: u64,
        mut compute: impl FnMut(&[u8]) -> Writes,
        mut each: impl FnMut(&Writes),
    ) {
        let mut record = Vec::new();
        for t in self.slab.iter_mut().flatten() {
            if t.last_span != span {
                continue;
            }
            let w = t.writes.get_or_insert_with(|| {
                record.clear();
                let (head, call) = t.content.split_at(t.head_len);
                append_begin_split(0, 0, head, call, &mut record);
                compute(&record)
            });
            each(w);
        }
    }

    /// What the calls the fast path kept as deltas of a learned patch in span `span` may
    /// have written: `compute` works out one entry's from its call (the template with the
    /// patch), once per entry.
    pub fn entry_writes_in(
        &mut self,
        span: u64,
        mut compute: impl FnMut(&[u8]) -> Writes,
        mut each: impl FnMut(&Writes),
    ) {
        let mut record = Vec::new();
        // The writes of template `slot` with patch `p`.
        let mut writes_of = |t: &Templates, slot: u32, p: &Patch| {
            record.clear();
            let patch = (slot, usize::from(p.at), &p.bytes[..usize::from(p.n)]);
            t.append_begin_patched(patch, 0, 0, &mut record)
                .then(|| compute(&record))
        };
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            let Some(p) = e.patch.filter(|_| e.span == span) else {
                continue;
            };
            let i = i as u32;
            if !self.entry_writes.contains_key(&i) {
                if let Some(w) = writes_of(self, e.slot, &p) {
                    self.entry_writes.insert(i, w);
                }
            }
            if let Some(w) = self.entry_writes.get(&i) {
                each(w);
            }
        }
        // Those dropped with the raw cache: a template the span used is not evicted before
        // its checkpoint, so their slots still hold what they were learned on.
        for (slot, p) in self
            .retired
            .iter()
            .filter(|(_, s)| **s == span)
            .map(|(k, _)| k)
        {
            if let Some(w) = writes_of(self, *slot, p) {
                each(&w);
            }
        }
        self.retired.retain(|_, s| *s > span);
    }

    /// Bytes held: content, and a rough count of the maps' entries (the raw keys too: they
    /// are a fixed cost per distinct call, not per call made).
    pub fn held_bytes(&self) -> usize {
        self.content_bytes
            + self.slab.len() * std::mem::size_of::<Option<Template>>()
            + self.by_content.len() * 48
            + self
                .entries
                .iter()
                .map(|e| 64 + usize::from(e.key_len) * 8 + e.shape.as_ref().map_or(0, |_| 32))
                .sum::<usize>()
            + (self.raw.len() + self.shape.len()) * 16
    }
}

impl Default for Templates {
    fn default() -> Self {
        Templates {
            slab: Vec::new(),
            free: Vec::new(),
            by_content: HashMap::default(),
            entries: Vec::new(),
            raw: ByHash::default(),
            shape: ByHash::default(),
            keys: Vec::new(),
            entry_writes: HashMap::default(),
            last_hit: NONE,
            prev_hit: NONE,
            lookups: 0,
            raw_gen: 0,
            content_bytes: 0,
            retired: HashMap::default(),
        }
    }
}

/// A Begin record's parts for `Templates::intern_or_delta`: its seq, time, head and call.
pub(crate) fn split(payload: &[u8]) -> Option<(u64, u64, &[u8], &[u8])> {
    let s = split_begin(payload)?;
    Some((s.seq, s.t_ns, &payload[s.head], &payload[s.call]))
}

#[cfg(test)]
mod tests;
