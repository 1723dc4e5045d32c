//! An engine's own CI, as an outside crate would write it: a backend of its own (only the
//! trait's required methods, its own kernels on host memory), a step recorded through
//! `gputape::testing`, snapshotted, and held to each rule; and each rule made to fail, with
//! a message that names the call and its site.

use gputape::analysis::CaptureQuery;
use gputape::backend::{DevicePtr, GpuBackend, KernelArg, KernelHandle, OpCache};
use gputape::mock::MockGpuBackend;
use gputape::testing::{Harness, Recording};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::c_void;

/// "Their" backend: device memory is host memory, two kernels, one stream.
#[derive(Default)]
struct TinyGpu {
    mem: Mutex<BTreeMap<u64, Vec<u8>>>,
    next: Mutex<u64>,
    cache: OpCache,
    /// Answer `kernel_params` (each parameter an 8-byte slot), so raw launches record.
    layouts: bool,
}

impl TinyGpu {
    fn with<R>(&self, p: DevicePtr, f: impl FnOnce(&mut [u8]) -> R) -> anyhow::Result<R> {
        let mut mem = self.mem.lock();
        let (base, buf) = mem
            .range_mut(..=p.0)
            .next_back()
            .ok_or_else(|| anyhow::anyhow!("{p} is in no allocation"))?;
        let off = (p.0 - base) as usize;
        anyhow::ensure!(off <= buf.len(), "{p} is past its allocation");
        Ok(f(&mut buf[off..]))
    }
}

/// Kernel handles: 1 = scale(x: *f32, n: u32, a: f32), 2 = add(x: *f32, y: *const f32, n).
impl GpuBackend for TinyGpu {
    fn alloc(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let mut next = self.next.lock();
        let base = 0x1000 + *next;
        *next += (bytes as u64).next_multiple_of(256) + 256;
        self.mem.lock().insert(base, vec![0; bytes]);
        Ok(DevicePtr(base))
    }
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        self.alloc(bytes)
    }
    fn free(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        self.mem
            .lock()
            .remove(&ptr.0)
            .map(|_| ())
            .ok_or_else(|| anyhow::anyhow!("{ptr} is not an allocation"))
    }
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        self.with(dst, |d| d[..src.len()].copy_from_slice(src))
    }
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        self.with(src, |s| dst.copy_from_slice(&s[..dst.len()]))
    }
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> anyhow::Result<()> {
        let mut tmp = vec![0; bytes];
        self.copy_d2h(src, &mut tmp)?;
        self.copy_h2d(&tmp, dst)
    }
    fn launch(
        &self,
        func: KernelHandle,
        _grid: [u32; 3],
        _block: [u32; 3],
        _shared_mem: u32,
        _stream: u64,
        params: &mut [*mut c_void],
    ) -> anyhow::Result<()> {
        // SAFETY: the launch contract: each param points at a value of the kernel's
        // parameter type (launch_typed's default packing gives each its own u64 slot).
        let arg = |i: usize| unsafe { *(params[i] as *const u64) };
        let floats = |b: &mut [u8], n: usize| -> Vec<f32> {
            b[..n * 4]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        match func.0 {
            1 => {
                let (x, n, a) = (arg(0), arg(1) as usize, f32::from_bits(arg(2) as u32));
                self.with(DevicePtr(x), |b| {
                    let v = floats(b, n);
                    for (i, f) in v.iter().enumerate() {
                        b[i * 4..i * 4 + 4].copy_from_slice(&(f * a).to_le_bytes());
                    }
                })
            }
            2 => {
                let (x, y, n) = (arg(0), arg(1), arg(2) as usize);
                let ys = self.with(DevicePtr(y), |b| floats(b, n))?;
                self.with(DevicePtr(x), |b| {
                    let xs = floats(b, n);
                    for i in 0..n {
                        b[i * 4..i * 4 + 4].copy_from_slice(&(xs[i] + ys[i]).to_le_bytes());
                    }
                })
            }
            k => anyhow::bail!("no kernel {k}"),
        }
    }
    fn synchronize(&self, _stream: u64) -> anyhow::Result<()> {
        Ok(())
    }
    fn default_stream(&self) -> u64 {
        7
    }
    fn kernel(&self, module: &str, func_name: &str) -> anyhow::Result<KernelHandle> {
        match (module, func_name) {
            ("tiny", "scale") => Ok(KernelHandle(1)),
            ("tiny", "add") => Ok(KernelHandle(2)),
            _ => anyhow::bail!("no kernel {module}::{func_name}"),
        }
    }
    fn op_cache(&self) -> &OpCache {
        &self.cache
    }
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> anyhow::Result<()> {
        self.with(ptr, |b| b[..bytes].fill(value))
    }
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, _s: u64) -> anyhow::Result<()> {
        self.memset(ptr, value, bytes)
    }
    fn total_memory(&self) -> anyhow::Result<usize> {
        Ok(1 << 30)
    }
    fn free_memory(&self) -> anyhow::Result<usize> {
        Ok(1 << 30)
    }
    fn sm_count(&self) -> anyhow::Result<u32> {
        Ok(1)
    }
    fn kernel_params(&self, func: KernelHandle) -> Option<Vec<gputape::backend::ParamInfo>> {
        use gputape::backend::{ParamAccess::*, ParamInfo};
        match (self.layouts, func.0) {
            (true, 1) => Some(ParamInfo::packed(&[(8, ReadWrite), (8, Value), (8, Value)])),
            (true, 2) => Some(ParamInfo::packed(&[(8, ReadWrite), (8, Read), (8, Value)])),
            _ => None,
        }
    }
}

const N: u32 = 8;

/// "Their" step: x = 2x + y on the default stream, then the host reads x back.
fn step(
    g: &dyn GpuBackend,
    x: DevicePtr,
    y: DevicePtr,
    read_back: bool,
) -> anyhow::Result<Vec<u8>> {
    let s = g.default_stream();
    let (n, two) = (N.to_le_bytes(), 2f32.to_le_bytes());
    let scale = g.kernel("tiny", "scale")?;
    let add = g.kernel("tiny", "add")?;
    g.launch_typed(
        scale,
        [1, 1, 1],
        [32, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(x),
            KernelArg::Bytes(&n),
            KernelArg::Bytes(&two),
        ],
    )?;
    g.launch_typed(
        add,
        [1, 1, 1],
        [32, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&n),
        ],
    )?;
    let mut out = vec![0u8; N as usize * 4];
    if read_back {
        g.synchronize(s)?;
        g.copy_d2h(x, &mut out)?;
    }
    Ok(out)
}

/// Set up (unrecorded) and record one step on their backend.
fn recorded(read_back: bool) -> (Vec<u8>, Recording) {
    let h = Harness::new(TinyGpu::default());
    let x = h.gpu().alloc(N as usize * 4).unwrap();
    let y = h.gpu().alloc(N as usize * 4).unwrap();
    let ones: Vec<u8> = (0..N).flat_map(|_| 1f32.to_le_bytes()).collect();
    h.gpu().copy_h2d(&ones, x).unwrap();
    h.gpu().copy_h2d(&ones, y).unwrap();
    let (out, rec) = h.record(|g| step(g, x, y, read_back)).unwrap();
    (out.unwrap(), rec)
}

/// `f` must fail with a message naming `call`, a site in this file and `rule`.
#[track_caller]
fn fails_naming(f: impl FnOnce() + std::panic::UnwindSafe, call: &str, rule: &str) {
    let e = std::panic::catch_unwind(f).expect_err("the assertion fails");
    let msg = e
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| e.downcast_ref::<&str>().unwrap_or(&"").to_string());
    assert!(msg.contains(&format!("[{rule}")), "{msg}");
    assert!(msg.contains(call), "{msg}");
    assert!(msg.contains("tests/engine_ci.rs:"), "{msg}");
}

#[test]
fn their_step_is_snapshotted_and_keeps_every_rule() {
    let (out, rec) = recorded(true);
    assert_eq!(&out[..4], &3f32.to_le_bytes(), "2*1 + 1");
    insta::assert_snapshot!("their_step", gputape::testing::mask_format(&rec.render()));
    assert_eq!(
        rec.launches().into_iter().collect::<Vec<_>>(),
        vec![("tiny::add".to_string(), 1), ("tiny::scale".to_string(), 1)]
    );
    assert_eq!(rec.bytes_copied(), (0, 32));
    assert_eq!(rec.host_syncs(), 2);
    rec.assert_no_device_alloc();
    rec.assert_no_pageable_async_copy();
    rec.assert_no_race();
    rec.assert_no_leak();
    rec.assert_at_most_launches(2);
    // Without its readback the step has no host sync and captures as one graph.
    let (_, quiet) = recorded(false);
    quiet.assert_no_host_sync();
    quiet.assert_capturable(CaptureQuery::default());
}

#[test]
fn each_rule_fails_naming_the_call_and_its_site() {
    let (_, rec) = recorded(true);
    fails_naming(|| rec.assert_no_host_sync(), "synchronize", "no-host-sync");
    fails_naming(
        || rec.assert_capturable(CaptureQuery::default()),
        "synchronize",
        "capturable/",
    );
    fails_naming(
        || rec.assert_at_most_launches(1),
        "launch_typed",
        "at-most-launches",
    );
    // An allocation that is never freed, and an async readback into pageable memory.
    let h = Harness::new(TinyGpu::default());
    let (_, leaky) = h
        .record(|g| {
            let p = g.alloc(64).unwrap();
            let mut host = vec![0u8; 64];
            g.copy_d2h_async(p, &mut host, g.default_stream()).unwrap();
        })
        .unwrap();
    fails_naming(
        || leaky.assert_no_device_alloc(),
        "alloc",
        "no-device-alloc",
    );
    fails_naming(|| leaky.assert_no_leak(), "alloc", "no-leak/leak");
    fails_naming(
        || leaky.assert_no_pageable_async_copy(),
        "copy_d2h_async",
        "no-pageable-async-copy",
    );
    // A race needs two streams: on the mock, two streams write one buffer unordered.
    let h = Harness::new(MockGpuBackend::default());
    let b = h.gpu().alloc(64).unwrap();
    let (s1, s2) = (
        h.gpu().create_stream().unwrap(),
        h.gpu().create_stream().unwrap(),
    );
    let (_, racy) = h
        .record(|g| {
            g.memset_async(b, 1, 64, s1).unwrap();
            g.memset_async(b, 2, 64, s2).unwrap();
        })
        .unwrap();
    fails_naming(|| racy.assert_no_race(), "memset_async", "no-race");
}

/// Their trace replays in CI on the mock, which has none of their kernels: the launches are
/// skipped, the readback that depends on them is reported as not checked, and the rest
/// (allocation, ordering, the replay's own checks) runs.
#[test]
fn their_trace_replays_on_the_mock_with_their_kernels_opaque() {
    use gputape::replayer::{ReplayOptions, Replayer};
    let (_, rec) = recorded(true);
    let t = &rec.trace;
    assert!(Replayer::new(t)
        .run(
            &MockGpuBackend::default(),
            &ReplayOptions::default(),
            None,
            |_| {}
        )
        .is_err());
    let r = Replayer::new(t)
        .with_opaque_kernels()
        .run(
            &MockGpuBackend::default(),
            &ReplayOptions::default(),
            None,
            |_| {},
        )
        .unwrap();
    // Every readback depends on a skipped kernel: nothing was checked, so it does not pass.
    assert!(!r.passed() && r.checked_nothing(), "{}", r.summary());
    assert!(r.summary().contains("NOTHING CHECKED"), "{}", r.summary());
    assert_eq!(r.opaque_kernels, vec!["tiny::add", "tiny::scale"]);
    assert_eq!(r.d2h_checked, 0);
    assert_eq!(r.unchecked.len(), 1, "{:?}", r.unchecked);
    assert!(
        r.unchecked[0].contains("depends on tiny::"),
        "{:?}",
        r.unchecked
    );
    insta::assert_snapshot!("their_step_replayed_opaque", r.summary());
}

/// A raw `launch` on a backend of one's own: when it answers `kernel_params`, the launch's
/// arguments are recorded and it replays; when it does not, the recording says the arguments
/// are missing and the replay names the launch as not run, and does not pass.
#[test]
fn raw_launches_replay_when_the_backend_gives_their_layout() {
    use gputape::replayer::{ReplayOptions, Replayer};
    for layouts in [false, true] {
        let h = Harness::new(TinyGpu {
            layouts,
            ..TinyGpu::default()
        });
        let x = h.gpu().alloc(N as usize * 4).unwrap();
        let ones: Vec<u8> = (0..N).flat_map(|_| 1f32.to_le_bytes()).collect();
        h.gpu().copy_h2d(&ones, x).unwrap();
        let (out, rec) = h
            .record(|g| {
                let scale = g.kernel("tiny", "scale")?;
                let mut slots = [x.0, N as u64, 3f32.to_bits() as u64];
                let mut params: Vec<*mut c_void> =
                    slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
                g.launch(scale, [1, 1, 1], [32, 1, 1], 0, 7, &mut params)?;
                let mut back = vec![0u8; N as usize * 4];
                g.copy_d2h(x, &mut back)?;
                Ok::<_, anyhow::Error>(back)
            })
            .unwrap();
        assert_eq!(&out.unwrap()[..4], &3f32.to_le_bytes());
        let r = Replayer::new(&rec.trace)
            .run(&TinyGpu::default(), &ReplayOptions::default(), None, |_| {})
            .unwrap();
        if layouts {
            assert!(r.passed() && r.d2h_matched == 1, "{}", r.summary());
        } else {
            assert!(!r.passed(), "{}", r.summary());
            assert!(
                r.summary()
                    .contains("launch of tiny::scale not run: its 3 argument(s) were not recorded"),
                "{}",
                r.summary()
            );
        }
    }
}
