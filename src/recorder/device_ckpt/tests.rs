//! Device checkpoints on the mock: what they read, and that dumps from them replay.

use crate::backend::GpuBackend;
use crate::mock::MockGpuBackend;
use crate::recorder::{BackendDesc, FlightConfig, RecordingBackend};

/// The first checkpoint takes a written buffer whole; later ones only the 64 KiB chunk
/// each step rewrites; a buffer filled by a copy (weights) is only hashed, never read,
/// and one nobody writes is not looked at. The dump replays with every readback matching.
#[test]
fn a_checkpoint_takes_only_the_chunks_that_changed() {
    let dir = std::env::temp_dir().join(format!("gputape-dc-{}", std::process::id()));
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 1;
    cfg.ring_mb = 4;
    let rec =
        RecordingBackend::flight(MockGpuBackend::default(), cfg, BackendDesc::new("mock")).unwrap();
    let hot = rec.alloc(1 << 20).unwrap();
    let cold = rec.alloc(1 << 20).unwrap();
    let weights: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    rec.copy_h2d(&weights, cold).unwrap();
    let mut read = Vec::new();
    for s in 0..4u64 {
        rec.memset(hot, s as u8 + 1, 4096).unwrap();
        rec.step_boundary(s);
        assert!(rec.flight_settle(std::time::Duration::from_secs(10)));
        read.push(rec.flight_held().unwrap().checkpoint_read_bytes);
    }
    let h = rec.flight_held().unwrap();
    assert!(
        h.device_checkpoints && h.incomplete_checkpoints == 0,
        "{h:?}"
    );
    assert_eq!(
        read[0],
        1 << 20,
        "the written buffer whole, not the copied one: {read:?}"
    );
    for w in read.windows(2) {
        assert_eq!(w[1] - w[0], 64 << 10, "one chunk a step: {read:?}");
    }
    let mut back = vec![0u8; 1 << 20];
    rec.copy_d2h(cold, &mut back).unwrap();
    rec.copy_d2h(hot, &mut back).unwrap();
    let path = rec.flight_dump("asked").unwrap();
    let t = crate::trace::Trace::open(&path).unwrap();
    assert_eq!(t.initial.len(), 2, "both buffers in the checkpoint");
    replays_on_the_mock(&t);
    drop(rec);
    std::fs::remove_dir_all(&dir).ok();
}

/// An arena filled by copies at offsets, with gaps between them: a checkpoint reads the
/// gaps alone, and the dump gives back the arena's bytes, copies and gaps.
#[test]
fn an_arena_filled_by_copies_is_read_only_between_them() {
    let dir = std::env::temp_dir().join(format!("gputape-dca-{}", std::process::id()));
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 1;
    let rec =
        RecordingBackend::flight(MockGpuBackend::default(), cfg, BackendDesc::new("mock")).unwrap();
    let arena = rec.alloc(1 << 20).unwrap();
    rec.memset(arena, 9, 1 << 20).unwrap();
    rec.step_boundary(0);
    assert!(rec.flight_settle(std::time::Duration::from_secs(10)));
    let before = rec.flight_held().unwrap().checkpoint_read_bytes;
    // Three tensors, 4 KiB of alignment between them and 16 bytes at the end; the
    // second copied twice (the later one counts).
    let tensors = [
        (0usize, 300 << 10),
        (304 << 10, 400 << 10),
        (708 << 10, (316 << 10) - 16),
    ];
    for (k, &(off, len)) in tensors.iter().enumerate() {
        let bytes: Vec<u8> = (0..len).map(|i| (i * (k + 3) % 253) as u8).collect();
        rec.copy_h2d(&bytes, arena.offset(off)).unwrap();
    }
    let again: Vec<u8> = vec![5; 400 << 10];
    rec.copy_h2d(&again, arena.offset(304 << 10)).unwrap();
    rec.step_boundary(1);
    assert!(rec.flight_settle(std::time::Duration::from_secs(10)));
    let h = rec.flight_held().unwrap();
    assert_eq!(h.incomplete_checkpoints, 0, "{h:?}");
    assert_eq!(
        h.checkpoint_read_bytes - before,
        8 << 10 | 16,
        "the gaps alone: {h:?}"
    );
    // Two more checkpoints: the dump starts after the copies, from the arena as the
    // checkpoint made it up.
    for s in 2..4 {
        rec.step_boundary(s);
        assert!(rec.flight_settle(std::time::Duration::from_secs(10)));
    }
    let mut back = vec![0u8; 1 << 20];
    rec.copy_d2h(arena, &mut back).unwrap();
    assert_eq!(&back[300 << 10..304 << 10], &[9u8; 4 << 10][..]);
    let path = rec.flight_dump("asked").unwrap();
    let t = crate::trace::Trace::open(&path).unwrap();
    assert!(
        !t.calls
            .iter()
            .any(|c| matches!(c.call, crate::trace::Call::CopyH2D { .. })),
        "the copies are before the dump's checkpoint"
    );
    replays_on_the_mock(&t);
    drop(rec);
    std::fs::remove_dir_all(&dir).ok();
}

/// The dump replays on a fresh mock with every readback matching.
fn replays_on_the_mock(t: &crate::trace::Trace) {
    let r = crate::replayer::Replayer::new(t)
        .run(
            &MockGpuBackend::default(),
            &Default::default(),
            None,
            |_| {},
        )
        .unwrap();
    assert!(r.passed(), "{}", r.summary());
}
