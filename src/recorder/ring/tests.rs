//! The templates, their raw keys and the fast path, on calls encoded as the recorder does.

use super::*;
use crate::trace::LaunchHead;

#[test]
fn a_call_that_changed_a_scalar_since_the_last_step_is_kept_as_a_delta() {
    let mut t = Templates::default();
    let h = [0u8, 5];
    let Interned::Slot(first) = t.intern_or_delta(&h, b"norm", 1, None) else {
        panic!()
    };
    let Interned::Slot(rope) = t.intern_or_delta(&h, b"rope pos=0001", 1, Some(first)) else {
        panic!()
    };
    // The next step: after `first` again, the same call but its position.
    let Interned::Delta { base, at, bytes } =
        t.intern_or_delta(&h, b"rope pos=0002", 1, Some(first))
    else {
        panic!("not a delta")
    };
    assert_eq!((base, at, bytes), (rope, 12, &b"2"[..]));
    // After `rope`, a long call; next step, it changed in two places further apart than
    // a delta holds, then it came back at another length: templates of their own.
    let long = |t: &mut Templates, c: &'static [u8]| t.intern_or_delta(&h, c, 1, Some(rope));
    assert!(matches!(
        long(&mut t, b"gemv pos=0001, and 24 more bytes"),
        Interned::Slot(_)
    ));
    assert!(matches!(
        long(&mut t, b"gemv pos=0002, and 24 more byteZ"),
        Interned::Slot(_)
    ));
    assert!(matches!(
        long(&mut t, b"gemv pos=0002, and 24 more byteZ!"),
        Interned::Slot(_)
    ));
    assert!(matches!(
        long(&mut t, b"gemv pos=0003, and 24 more byteZ!"),
        Interned::Delta { .. }
    ));
    let mut log = Log::after(u64::MAX, 0);
    log.push_delta(rope, (0, 10, false), (12, b"7", false));
    assert_eq!(
        log.rewrite_patches().count(),
        1,
        "a delta not known to touch scalars only is read back"
    );
    assert!(log.fold_ok(0));
    let Some(Record::Delta {
        slot,
        at,
        bytes,
        ok: true,
        ..
    }) = log.records().next()
    else {
        panic!("a delta record")
    };
    let mut out = Vec::new();
    assert!(t.append_begin_patched((slot, at, bytes), 0, 10, &mut out));
    assert_eq!(split(&out).expect("a Begin").3, b"rope pos=0007");
    assert!(
        !t.append_begin_patched((slot, 13, b"xx"), 0, 10, &mut out),
        "past the end"
    );
}

/// A typed launch with one buffer and scalars `pos` (4 bytes) and `scale` (8 bytes), as
/// the recorder encodes it, split into head and call; and its raw key.
fn launch(pos: u32, scale: u64) -> (Vec<u8>, RawKey) {
    launch_on(7, pos, scale)
}

/// `launch` on buffer `buf` (raw address `0x1000 * buf`): another layer's weights.
fn launch_on(buf: u32, pos: u32, scale: u64) -> (Vec<u8>, RawKey) {
    use crate::trace::{ArgRef, BeginRef, DevAddr, KernelId, LaunchRef, SiteId, StreamRef};
    let (p, s) = (pos.to_le_bytes(), scale.to_le_bytes());
    let args = [
        ArgRef::Buf(DevAddr::Buf {
            buf: BufferId(buf),
            off: 0,
        }),
        ArgRef::Val(&p),
        ArgRef::Val(&s),
    ];
    let head = BeginRef {
        seq: 0,
        thread: 0,
        site: SiteId(3),
        t_ns: 0,
        call: &(),
    };
    let view = LaunchRef {
        typed: true,
        head: LaunchHead {
            kernel: KernelId(1),
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_mem: 0,
            stream: StreamRef::Legacy,
        },
        n_args: 3,
        arg: |i| args[i],
    };
    let mut out = Vec::new();
    crate::trace::codec::append_launch_begin(&head, &view, &mut out);
    let mut k = RawKey::new(1, 0x99, 0);
    k.word(1);
    k.word(0x1000 * u64::from(buf));
    k.bytes(&p);
    k.bytes(&s);
    (out, k)
}

/// An engine's per-step upload: the same destination, length and stream, new bytes. The
/// raw key holds no bytes; the fast path puts the new blob id where the learned call
/// holds its own, and the result is the call as encoded.
#[test]
fn a_copy_of_new_bytes_to_the_same_place_is_its_template_with_the_new_blob_id() {
    use crate::trace::{BeginRef, BlobId, Call, DevAddr, SiteId, StreamId};
    let copy = |bytes: &[u8]| {
        let call = Call::CopyH2DAsync {
            dst: DevAddr::Buf {
                buf: BufferId(3),
                off: 0,
            },
            data: BlobId::of(bytes),
            len: bytes.len() as u64,
            stream: crate::trace::StreamRef::Id(StreamId(1)),
        };
        let begin = BeginRef {
            seq: 0,
            thread: 0,
            site: SiteId(2),
            t_ns: 0,
            call: &call,
        };
        crate::trace::codec::encode_to_vec(&begin).unwrap()
    };
    let mut key = RawKey::new(6, 0x55, 0);
    key.word(0x7000);
    key.word(4);
    key.word(1);
    let mut t = Templates::default();
    let first = copy(b"tok0");
    let (_, _, head, call) = split(&first).expect("a Begin");
    let Interned::Slot(slot) = t.intern_or_delta(head, call, 1, None) else {
        panic!("new")
    };
    t.learn_blob(&key, 0, (slot, None), &BlobId::of(b"tok0").0);
    for step in [b"tok1", b"tok2"] {
        let Some(Fast::Delta {
            base,
            at,
            bytes,
            n,
            scalar,
        }) = t.fast_blob(&key, 0, 2, &BlobId::of(step).0)
        else {
            panic!("a delta")
        };
        assert!(scalar, "the same destination: the same writes");
        let mut got = Vec::new();
        assert!(t.append_begin_patched((base, at, &bytes[..n]), 0, 0, &mut got));
        assert_eq!(split(&got).map(|p| p.3), split(&copy(step)).map(|p| p.3));
    }
    // Learned without its blob (an ordinary `learn`), the key gives no blob delta.
    let mut other = RawKey::new(6, 0x56, 0);
    other.word(1);
    t.learn(&other, 0, slot, None);
    assert_eq!(t.fast_blob(&other, 0, 2, &BlobId::of(b"x").0), None);
}

/// An engine's layers: layer 1's launch is layer 0's on other weights, so it is kept as a
/// delta of layer 0's template. The fast path learns it as that delta (patched to the
/// call as encoded, and not marked as a scalar change, as it names another buffer), and
/// with a new scalar value too.
#[test]
fn a_later_layers_launch_kept_as_a_delta_takes_the_fast_path() {
    let mut t = Templates::default();
    // The call before each layer's launch (a norm, say): after it came layer 0's launch.
    let Interned::Slot(norm) = t.intern_or_delta(&[0, 1], b"norm", 1, None) else {
        panic!("new")
    };
    let (rec0, k0) = launch_on(7, 5, 1);
    let (_, _, head, call) = split(&rec0).expect("a Begin");
    let Interned::Slot(base) = t.intern_or_delta(head, call, 1, Some(norm)) else {
        panic!("new")
    };
    t.learn(&k0, 0, base, None);
    let (rec1, k1) = launch_on(8, 5, 1);
    let (_, _, head, call) = split(&rec1).expect("a Begin");
    let Interned::Delta { base: b, at, bytes } = t.intern_or_delta(head, call, 1, Some(norm))
    else {
        panic!("a delta of layer 0's")
    };
    assert_eq!(b, base);
    t.learn(&k1, 0, base, Patch::new(at, bytes));
    // Logged as writing nothing new: what they write is the entry's (below).
    for (pos, want_scalar_only) in [(5, true), (6, true)] {
        let (want, k) = launch_on(8, pos, 1);
        let Some(Fast::Delta {
            base: got_base,
            at,
            bytes,
            n,
            scalar,
        }) = t.fast(&k, 0, 2)
        else {
            panic!("layer 1 at {pos}: a delta on the fast path")
        };
        assert_eq!((got_base, scalar), (base, want_scalar_only));
        let mut got = Vec::new();
        assert!(t.append_begin_patched((got_base, at, &bytes[..n]), 0, 0, &mut got));
        assert_eq!(split(&got).map(|p| p.3), split(&want).map(|p| p.3), "{pos}");
    }
    // Layer 0's call is still its template.
    assert_eq!(t.fast(&k0, 0, 2), Some(Fast::Slot(base)));
    // A checkpoint of span 2 learns layer 1's writes from its entries (its exact key's, at
    // 5, and its shape's, at 6): each call worked out once, whichever span asks again.
    let want = split(&rec1).map(|p| p.3.to_vec());
    for (span, calls) in [(2, 2), (2, 0), (3, 0)] {
        let (mut computed, mut each) = (Vec::new(), 0);
        t.entry_writes_in(
            span,
            |r| {
                computed.push(split(r).map(|p| p.3.to_vec()));
                Writes::default()
            },
            |_| each += 1,
        );
        assert_eq!(computed.len(), calls, "span {span}");
        assert!(computed.iter().all(|c| *c == want), "span {span}");
        assert_eq!(each, if span == 2 { 2 } else { 0 }, "span {span}");
    }
    // Used again in span 4, then the maps change (an allocation: the raw cache is emptied by
    // the next call learned) before span 4's checkpoint: its writes are still given, once.
    assert!(matches!(t.fast(&k1, 0, 4), Some(Fast::Delta { .. })));
    t.learn(&k0, 1, base, None);
    for (calls, what) in [(1, "dropped with the raw cache"), (0, "given once")] {
        let mut computed = Vec::new();
        t.entry_writes_in(
            4,
            |r| {
                computed.push(split(r).map(|p| p.3.to_vec()));
                Writes::default()
            },
            |_| {},
        );
        assert_eq!(computed.len(), calls, "{what}");
        assert!(computed.iter().all(|c| *c == want), "{what}");
    }
}

#[test]
fn a_launch_whose_scalars_changed_is_a_delta_on_the_fast_path() {
    let mut t = Templates::default();
    let (rec, k0) = launch(5, 1);
    let (_, _, head, call) = split(&rec).expect("a Begin");
    let Interned::Slot(slot) = t.intern_or_delta(head, call, 1, None) else {
        panic!("new")
    };
    t.learn(&k0, 0, slot, None);
    assert_eq!(t.fast(&k0, 0, 1), Some(Fast::Slot(slot)));
    // Each changed scalar, and both: the patched template is the call as encoded.
    for (pos, scale) in [(6, 1), (5, 2), (70_000, 1 << 40)] {
        let (want, k) = launch(pos, scale);
        let Some(Fast::Delta {
            base, at, bytes, n, ..
        }) = t.fast(&k, 0, 2)
        else {
            panic!("a delta for {pos} {scale}")
        };
        assert_eq!(base, slot);
        let mut got = Vec::new();
        assert!(t.append_begin_patched((base, at, &bytes[..n]), 0, 0, &mut got));
        assert_eq!(split(&got).map(|p| p.3), split(&want).map(|p| p.3));
    }
    // Another buffer is not a scalar change; after eviction the key is gone with its
    // template.
    let mut other = RawKey::new(1, 0x99, 0);
    other.word(1);
    other.word(0x8000);
    other.bytes(&6u32.to_le_bytes());
    other.bytes(&1u64.to_le_bytes());
    assert_eq!(t.fast(&other, 0, 2), None);
    assert_eq!(t.fast(&launch(6, 1).1, 1, 2), None, "the maps changed");
    t.evict_before(3);
    assert_eq!(t.fast(&launch(6, 1).1, 0, 3), None);
}

#[test]
fn the_guessed_next_entry_is_checked_and_a_wrong_guess_falls_back_to_the_hash() {
    let mut t = Templates::default();
    let h = [0u8, 1];
    let mut keys = Vec::new();
    let mut slots = Vec::new();
    for (i, call) in [&b"a"[..], b"b", b"c"].into_iter().enumerate() {
        let Interned::Slot(s) = t.intern_or_delta(&h, call, 1, None) else {
            panic!("new")
        };
        let mut k = RawKey::new(1, 0x10 + i, 0);
        k.word(i as u64);
        t.learn(&k, 0, s, None);
        keys.push(k);
        slots.push(s);
    }
    // Learned in order a b c: after a the guess is b. Made in another order, each call is
    // still found as itself, whatever the guess.
    for order in [[0, 1, 2], [0, 2, 1], [2, 2, 0], [1, 0, 2]] {
        for i in order {
            assert_eq!(t.fast(&keys[i], 0, 2), Some(Fast::Slot(slots[i])));
        }
    }
    let mut unknown = RawKey::new(1, 0x10, 0);
    unknown.word(9);
    assert_eq!(t.fast(&unknown, 0, 2), None);
    // A launch with a scalar, learned at value 5 and made again at 5: its template, though
    // the guess after it may be its shape entry.
    let (rec, k5) = launch(5, 1);
    let (_, _, head, call) = split(&rec).expect("a Begin");
    let Interned::Slot(s) = t.intern_or_delta(head, call, 2, None) else {
        panic!("new")
    };
    t.learn(&k5, 0, s, None);
    for _ in 0..3 {
        assert_eq!(t.fast(&k5, 0, 2), Some(Fast::Slot(s)));
        assert!(
            matches!(t.fast(&launch(6, 1).1, 0, 2), Some(Fast::Delta { base, .. }) if base == s)
        );
    }
    // Evicting a and b keeps c's and the launch's entries, their guesses renumbered.
    t.fast(&keys[2], 0, 3);
    t.fast(&k5, 0, 3);
    t.evict_before(3);
    assert_eq!(t.fast(&keys[0], 0, 3), None);
    assert_eq!(t.fast(&keys[2], 0, 3), Some(Fast::Slot(slots[2])));
    assert_eq!(t.fast(&k5, 0, 3), Some(Fast::Slot(s)));
}

#[test]
fn a_call_every_layer_makes_on_the_same_buffers_is_guessed_by_the_call_before_it() {
    // Each layer: a launch on its own weights (w0, w1, w2), then one on shared scratch (s),
    // whose raw key is the same at every layer; after s comes the next layer's launch.
    let mut t = Templates::default();
    let h = [0u8, 1];
    let mut keys = Vec::new();
    let mut learned = std::collections::HashMap::new();
    for name in [&b"w0"[..], b"s", b"w1", b"s", b"w2", b"s"] {
        let mut k = RawKey::new(1, 0x10, 0);
        k.word(u64::from(name[0]) << 8 | u64::from(*name.get(1).unwrap_or(&0)));
        let slot = match t.intern_or_delta(&h, name, 1, None) {
            Interned::Slot(s) => s,
            Interned::Delta { .. } => panic!("{name:?} is new or known, not a delta"),
        };
        if !learned.contains_key(name) {
            t.learn(&k, 0, slot, None);
            learned.insert(name, slot);
        } else {
            assert_eq!(t.fast(&k, 0, 1), Some(Fast::Slot(slot)));
        }
        keys.push((k, slot));
    }
    // The first steps teach the guesses that s forks; after them no call is hashed.
    for step in 0..6 {
        let before = t.lookups;
        for (k, slot) in &keys {
            assert_eq!(t.fast(k, 0, 2), Some(Fast::Slot(*slot)), "step {step}");
        }
        if step >= 2 {
            assert_eq!(t.lookups, before, "step {step}: every guess right");
        }
    }
}

#[test]
fn templates_intern_once_and_the_raw_cache_forgets_on_a_new_generation() {
    let mut t = Templates::default();
    // A head is the thread and site varints.
    let h = [1u8, 2];
    let slot = |i: Interned<'_>| match i {
        Interned::Slot(s) => s,
        Interned::Delta { .. } => panic!("a delta"),
    };
    let a = slot(t.intern_or_delta(&h, b"call-a", 1, None));
    assert_eq!(slot(t.intern_or_delta(&h, b"call-a", 1, None)), a);
    let b = slot(t.intern_or_delta(&h, b"call-b", 1, None));
    assert_ne!(a, b);
    let mut k = RawKey::new(1, 0x1234, 0);
    k.word(42);
    assert_eq!(t.fast(&k, 0, 1), None);
    t.learn(&k, 0, b, None);
    assert_eq!(t.fast(&k, 0, 2), Some(Fast::Slot(b)));
    assert_eq!(t.fast(&k, 1, 2), None, "the maps changed");
    // Span 2 named only b: a goes, its slot is reused.
    t.evict_before(2);
    let c = slot(t.intern_or_delta(&h, b"call-c", 3, None));
    assert_eq!(c, a);
    let mut out = Vec::new();
    assert!(t.append_begin(b, 5, 6, &mut out));
    let (seq, t_ns, head, call) = split(&out).expect("a Begin record");
    assert_eq!((seq, t_ns, head, call), (5, 6, &h[..], &b"call-b"[..]));
}
