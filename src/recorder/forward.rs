//! `RecordingBackend` as a `GpuBackend`: every trait method forwarded to the wrapped backend,
//! with its Begin frame written before the call and its End frame after. Every trait method is
//! implemented here but `create_private_stream`, whose default is a recorded
//! `create_stream`; any other left to the trait's default would go unrecorded, which
//! tests/every_call.rs catches.
//!
//! One room, over 900 lines: it is the one `impl GpuBackend` block, a method per trait method,
//! and a trait impl cannot be split across files. What a method needs beyond forwarding and
//! framing lives in `call.rs`, `state.rs`, `checkpoint.rs` and `flight/`.

use super::*;

macro_rules! plain {
    ($self:ident, $call:expr, $inner:expr, $val:expr) => {{
        let tok = $self.begin(Location::caller(), |_| $call);
        let r = $inner;
        $self.finish_plain(tok, &r, $val);
        r
    }};
}

/// What the flight recorder's fast path tells its calls apart by (`RawKey::new`).
const FAST_LAUNCH: u64 = 1;
const FAST_LAUNCH_TYPED: u64 = 2;
const FAST_RECORD_EVENT: u64 = 3;
const FAST_WAIT_EVENT: u64 = 4;
const FAST_OP_CACHE: u64 = 5;
const FAST_COPY_H2D_ASYNC: u64 = 6;
const FAST_COPY_H2D: u64 = 7;
const FAST_COPY_D2H: u64 = 8;
const FAST_COPY_D2H_ON_STREAM: u64 = 9;
const FAST_LAUNCH_GRAPH: u64 = 10;

/// A blocking readback on the fast path: it waits, and uploads nothing.
const WAITS: FastExtra<'static> = FastExtra {
    blob: None,
    fill: None,
    waits: true,
};

fn unit<T>(_: &T) -> Value {
    Value::Unit
}

impl<B: GpuBackend> GpuBackend for RecordingBackend<B> {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let site = Location::caller();
        let tok = self.begin(site, |_| Call::Alloc {
            bytes: bytes as u64,
        });
        let r = self.inner.alloc(bytes);
        self.finish(tok, &r, SyncScope::None, |st, p| {
            Value::Buffer(st.add_buf(p.0, bytes as u64, site, None))
        });
        r
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        let site = Location::caller();
        let tok = self.begin(site, |_| Call::AllocManaged {
            bytes: bytes as u64,
        });
        let r = self.inner.alloc_managed(bytes);
        self.finish(tok, &r, SyncScope::None, |st, p| {
            Value::Buffer(st.add_buf(p.0, bytes as u64, site, None))
        });
        r
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::Free {
            ptr: st.addr(ptr.0),
        });
        // A device checkpoint's gather may not have read the buffer yet.
        self.gather_read();
        let r = self.inner.free(ptr);
        self.finish(tok, &r, SyncScope::None, |st, _| {
            st.remove_buf(ptr.0);
            Value::Unit
        });
        r
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        let key = |_: &mut RecState, k: &mut ring::RawKey| {
            k.word(dst.0);
            k.word(src.len() as u64);
            true
        };
        let extra = FastExtra {
            blob: Some(src),
            fill: Some(dst.0),
            waits: true,
        };
        let tok =
            self.begin_fast_with(Location::caller(), FAST_COPY_H2D, key, extra, |st, head| {
                let (to, data, len) = (st.addr(dst.0), st.blob(src), src.len() as u64);
                st.note_fill(&to, data, len);
                st.emit_call(&head, &Call::CopyH2D { dst: to, data, len });
            });
        let r = self.inner.copy_h2d(src, dst);
        self.finish(tok, &r, SyncScope::Stream(0), |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        let len = dst.len() as u64;
        let key = |_: &mut RecState, k: &mut ring::RawKey| {
            k.word(src.0);
            k.word(len);
            true
        };
        let tok =
            self.begin_fast_with(Location::caller(), FAST_COPY_D2H, key, WAITS, |st, head| {
                let call = Call::CopyD2H {
                    src: st.addr(src.0),
                    len,
                };
                st.emit_call(&head, &call);
            });
        let r = self.inner.copy_d2h(src, dst);
        if tok.is_some() {
            let bytes: &[u8] = dst;
            self.finish(tok, &r, SyncScope::Stream(0), |st, _| {
                Value::Bytes(st.readback(bytes))
            });
        }
        r
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::CopyD2D {
            src: st.addr(src.0),
            dst: st.addr(dst.0),
            len: bytes as u64,
        });
        let r = self.inner.copy_d2d(src, dst, bytes);
        self.finish(tok, &r, SyncScope::Stream(0), |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn launch(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let key = |st: &mut RecState, k: &mut ring::RawKey| {
            if !st.tensor_maps.is_empty() {
                return false;
            }
            k.launch(func.0, (grid, block), shared_mem, params.len(), stream);
            let layout = st.kernels.get(&func.0).and_then(|e| e.params.as_deref());
            if layout.is_none() && !params.is_empty() {
                // Its arguments cannot be recorded: the slow path says so in a finding.
                return false;
            }
            for (p, info) in params.iter().zip(layout.unwrap_or(&[])) {
                // SAFETY: launch's contract: params[i] points at a value of the kernel's i-th
                // parameter, whose size the layout gives.
                k.bytes(unsafe { std::slice::from_raw_parts(*p as *const u8, info.size as usize) });
            }
            true
        };
        let tok = self.begin_fast(Location::caller(), FAST_LAUNCH, key, |st, head| {
            let kernel = st.kernel(func.0, self.registry.as_deref(), None);
            let stream = st.stream(stream);
            // SAFETY: launch's contract, as below.
            if let Some(call) =
                unsafe { raw_launch_with_tensor_maps(st, func.0, params) }.and_then(|kargs| {
                    st.launch_with_tensor_maps(kernel, (grid, block, shared_mem, stream), &kargs)
                })
            {
                let Call::LaunchTyped { args, .. } = call else {
                    unreachable!("launch_with_tensor_maps builds a typed launch")
                };
                let call = Call::Launch {
                    head: LaunchHead {
                        kernel,
                        grid,
                        block,
                        shared_mem,
                        stream,
                    },
                    args,
                };
                st.emit_call(&head, &call);
                return;
            }
            if st.tracks_writes() {
                let sizes: Vec<u32> = st
                    .kernels
                    .get(&func.0)
                    .and_then(|k| k.params.as_ref())
                    .map(|p| p.iter().map(|i| i.size).collect())
                    .unwrap_or_default();
                let ptrs: Vec<Option<u64>> = params
                    .iter()
                    .zip(&sizes)
                    .map(|(p, size)| {
                        // SAFETY: launch's contract: params[i] points at a value of the
                        // kernel's i-th parameter, `size` bytes.
                        (*size == 8).then(|| unsafe { (*p as *const u64).read_unaligned() })
                    })
                    .collect();
                st.note_launch_writes(head.seq, func.0, stream, ptrs.into_iter());
            }
            let parts = st.launch_parts(Some(func.0));
            let (addrs, layout) = (&parts.addrs, parts.layout);
            let unrecorded = (layout.is_empty() && !params.is_empty()).then_some(params.len());
            let view = LaunchRef {
                typed: false,
                head: LaunchHead {
                    kernel,
                    grid,
                    block,
                    shared_mem,
                    stream,
                },
                n_args: params.len().min(layout.len()),
                // SAFETY: launch's contract: params[i] points at a value of the kernel's i-th
                // parameter, whose size the layout gives.
                arg: |i| unsafe { raw_param_arg(addrs, params[i], &layout[i]) },
            };
            let written = parts.writer.map(|w| w.write_launch_begin(&head, &view));
            st.written(written);
            if let Some(n) = unrecorded {
                st.emit(&Frame::Finding(crate::trace::Finding::ArgsNotRecorded {
                    seq: head.seq,
                    params: n as u32,
                }));
            }
        });
        let r = self
            .inner
            .launch(func, grid, block, shared_mem, stream, params);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn launch_typed(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        let key = |st: &mut RecState, k: &mut ring::RawKey| {
            if !st.tensor_maps.is_empty() {
                return false;
            }
            k.launch(func.0, (grid, block), shared_mem, args.len(), stream);
            for a in args {
                match a {
                    KernelArg::Buffer(p) => {
                        k.word(1);
                        k.word(p.0);
                    }
                    KernelArg::Bytes(b) => k.bytes(b),
                }
            }
            true
        };
        let tok = self.begin_fast(Location::caller(), FAST_LAUNCH_TYPED, key, |st, head| {
            let kernel = st.kernel(func.0, self.registry.as_deref(), None);
            let stream = st.stream(stream);
            if let Some(call) =
                st.launch_with_tensor_maps(kernel, (grid, block, shared_mem, stream), args)
            {
                st.emit_call(&head, &call);
                return;
            }
            if st.tracks_writes() {
                let ptrs = args.iter().map(|a| match a {
                    KernelArg::Buffer(p) => Some(p.0),
                    KernelArg::Bytes(_) => None,
                });
                st.note_launch_writes(head.seq, func.0, stream, ptrs);
            }
            // Typed arguments say what they are: no layout needed.
            let parts = st.launch_parts(None);
            let addrs = &parts.addrs;
            let view = LaunchRef {
                typed: true,
                head: LaunchHead {
                    kernel,
                    grid,
                    block,
                    shared_mem,
                    stream,
                },
                n_args: args.len(),
                arg: |i| match args[i] {
                    KernelArg::Buffer(p) => ArgRef::Buf(addrs.addr(p.0)),
                    KernelArg::Bytes(b) => ArgRef::Val(b),
                },
            };
            let written = parts.writer.map(|w| w.write_launch_begin(&head, &view));
            st.written(written);
        });
        let r = self
            .inner
            .launch_typed(func, grid, block, shared_mem, stream, args);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn synchronize(&self, stream: u64) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::Synchronize {
            stream: st.stream(stream),
        });
        let r = self.inner.synchronize(stream);
        self.finish(tok, &r, SyncScope::Stream(stream), |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn default_stream(&self) -> u64 {
        let tok = self.begin(Location::caller(), |_| Call::DefaultStream);
        let s = self.inner.default_stream();
        if tok.is_some() {
            self.finish(tok, &Ok(s), SyncScope::None, |st, s| {
                Value::Stream(st.stream(*s))
            });
        }
        s
    }

    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> Result<KernelHandle> {
        let tok = self.begin(Location::caller(), |_| Call::Kernel {
            module: module.to_string(),
            func: func_name.to_string(),
        });
        let r = self.inner.kernel(module, func_name);
        // A backend without a registry may still say how wide each parameter is.
        let asked = match (&r, self.registry.as_deref()) {
            (Ok(h), None) => self.inner.kernel_params(*h),
            _ => None,
        };
        self.finish(tok, &r, SyncScope::None, |st, h| {
            Value::Kernel(st.kernel(
                h.0,
                self.registry.as_deref(),
                Some((module, func_name, asked)),
            ))
        });
        r
    }

    #[track_caller]
    fn kernel_params(&self, func: KernelHandle) -> Option<Vec<crate::backend::ParamInfo>> {
        match self.registry.as_deref() {
            Some(r) => r.kernel_by_handle(func).map(|i| i.params),
            None => self.inner.kernel_params(func),
        }
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        // An engine asks for it before each cached launch (a layer's worth a step): the fast
        // path keeps it, as its call has no arguments to encode; a flight recorder not at all.
        if self.flight_mode.load(Ordering::Relaxed) {
            return &self.op_cache;
        }
        let tok = self.begin_fast(
            Location::caller(),
            FAST_OP_CACHE,
            |_, _| true,
            |st, head| st.emit_call(&head, &Call::OpCache),
        );
        self.finish_plain(tok, &Ok(()), unit);
        &self.op_cache
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::Memset {
            dst: st.addr(ptr.0),
            value,
            len: bytes as u64,
        });
        let r = self.inner.memset(ptr, value, bytes);
        self.finish(tok, &r, SyncScope::Stream(0), |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, stream: u64) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::MemsetAsync {
            dst: st.addr(ptr.0),
            value,
            len: bytes as u64,
            stream: st.stream(stream),
        });
        let r = self.inner.memset_async(ptr, value, bytes, stream);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn total_memory(&self) -> Result<usize> {
        plain!(self, Call::TotalMemory, self.inner.total_memory(), |v| {
            Value::Count(*v as u64)
        })
    }

    #[track_caller]
    fn free_memory(&self) -> Result<usize> {
        plain!(self, Call::FreeMemory, self.inner.free_memory(), |v| {
            Value::Count(*v as u64)
        })
    }

    #[track_caller]
    fn sm_count(&self) -> Result<u32> {
        plain!(
            self,
            Call::SmCount,
            self.inner.sm_count(),
            |v| Value::Count(*v as u64)
        )
    }

    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        let tok = self.begin(Location::caller(), |_| Call::SweepUnreleased);
        let n = self.inner.sweep_unreleased();
        self.finish(tok, &Ok(n), SyncScope::None, |st, n| {
            st.gen += 1;
            st.bufs.retain(|_, b| b.alias_of.is_some());
            Value::Count(*n as u64)
        });
        n
    }

    #[track_caller]
    fn live_bytes(&self) -> Option<usize> {
        let tok = self.begin(Location::caller(), |_| Call::LiveBytes);
        let v = self.inner.live_bytes();
        self.finish_plain(tok, &Ok(v), |v| Value::OptCount(v.map(|x| x as u64)));
        v
    }

    #[track_caller]
    fn alloc_report(&self, top_n: usize, min_mb: usize) -> Option<String> {
        let tok = self.begin(Location::caller(), |_| Call::AllocReport {
            top_n: top_n as u64,
            min_mb: min_mb as u64,
        });
        let v = self.inner.alloc_report(top_n, min_mb);
        self.finish_plain(tok, &Ok(v.clone()), |v| Value::Text(v.clone()));
        v
    }

    #[track_caller]
    fn copy_d2h_on_stream(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        let len = dst.len() as u64;
        let key = |_: &mut RecState, k: &mut ring::RawKey| {
            k.word(src.0);
            k.word(len);
            k.word(stream);
            true
        };
        let kind = FAST_COPY_D2H_ON_STREAM;
        let tok = self.begin_fast_with(Location::caller(), kind, key, WAITS, |st, head| {
            let call = Call::CopyD2HOnStream {
                src: st.addr(src.0),
                len,
                stream: st.stream(stream),
            };
            st.emit_call(&head, &call);
        });
        let r = self.inner.copy_d2h_on_stream(src, dst, stream);
        if tok.is_some() {
            let bytes: &[u8] = dst;
            self.finish(tok, &r, SyncScope::Stream(stream), |st, _| {
                Value::Bytes(st.readback(bytes))
            });
        }
        r
    }

    #[track_caller]
    fn stream_is_capturing(&self, stream: u64) -> bool {
        let tok = self.begin(Location::caller(), |st| Call::StreamIsCapturing {
            stream: st.stream(stream),
        });
        let v = self.inner.stream_is_capturing(stream);
        self.finish_plain(tok, &Ok(v), |v| Value::Bool(*v));
        v
    }

    #[track_caller]
    fn scan_redzones(&self) -> Result<usize> {
        let r = plain!(self, Call::ScanRedzones, self.inner.scan_redzones(), |v| {
            Value::Count(*v as u64)
        });
        if let Ok(n @ 1..) = r {
            let mut st = self.st.lock();
            if st.recording && st.flight.is_some() {
                self.flight_trigger(
                    &mut st,
                    &format!("a red-zone scan found {n} guard band(s) written"),
                );
            }
        }
        r
    }

    #[track_caller]
    fn step_boundary(&self, step: u64) {
        let tok = self.begin(Location::caller(), |_| Call::StepBoundary { step });
        self.inner.step_boundary(step);
        self.finish_plain(tok, &Ok(()), unit);
        // `flight_step` asks whether a flight recorder is armed under the lock it takes
        // anyway (a lock of its own for that was a fourth per step).
        if self.on.load(Ordering::Relaxed) {
            self.flight_step(true);
        }
    }

    #[track_caller]
    fn redzone_hits(&self) -> Vec<crate::backend::RedzoneHit> {
        let tok = self.begin(Location::caller(), |_| Call::RedzoneHits);
        let v = self.inner.redzone_hits();
        self.finish_plain(tok, &Ok(v.len()), |v| Value::Count(*v as u64));
        v
    }

    #[track_caller]
    fn encode_tensor_map(
        &self,
        base: DevicePtr,
        desc: &crate::backend::TensorMapDesc,
    ) -> Result<crate::backend::TensorMapImage> {
        let tok = self.begin(Location::caller(), |st| Call::EncodeTensorMap {
            base: st.addr(base.0),
            desc: desc.clone(),
        });
        let r = self.inner.encode_tensor_map(base, desc);
        self.finish(tok, &r, SyncScope::None, |st, img| {
            // Bounded. Re-encoding the same map for the same memory replaces its entry, and
            // freeing a buffer drops the maps into it; past 65536 live maps, new ones are
            // recorded as plain bytes holding the recorded address, which a replay passes on
            // unchanged (right only where the buffer lands where it was: --fixed-addresses).
            if st.tensor_maps.len() < 1 << 16 {
                st.gen += 1;
                st.tensor_maps.insert(*img, (base.0, desc.clone()));
            }
            Value::Unit
        });
        r
    }

    #[track_caller]
    fn poison_redzones(&self, lo: usize, hi: usize) -> Result<()> {
        plain!(
            self,
            Call::PoisonRedzones {
                lo: lo as u64,
                hi: hi as u64
            },
            self.inner.poison_redzones(lo, hi),
            unit
        )
    }

    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        let tok = self.begin(Location::caller(), |_| Call::DebugSyncKernels);
        let v = self.inner.debug_sync_kernels();
        self.finish_plain(tok, &Ok(v), |v| Value::Bool(*v));
        v
    }

    /// Forwarded, not recorded: a replay loads what the trace embeds of each module (written
    /// at the first lookup of one of its kernels), never the description.
    #[track_caller]
    fn load_module(&self, module: &crate::backend::ModuleDesc) -> anyhow::Result<()> {
        self.inner.load_module(module)
    }

    #[track_caller]
    fn load_module_image(&self, name: &str, image: &[u8]) -> anyhow::Result<()> {
        self.inner.load_module_image(name, image)
    }

    #[track_caller]
    fn module_global(
        &self,
        module: &str,
        name: &str,
    ) -> anyhow::Result<(crate::backend::DevicePtr, u64)> {
        self.inner.module_global(module, name)
    }

    #[track_caller]
    fn set_kernel_cluster(
        &self,
        kernel: crate::backend::KernelHandle,
        dims: [u32; 3],
    ) -> anyhow::Result<()> {
        self.inner.set_kernel_cluster(kernel, dims)
    }

    #[track_caller]
    fn set_kernel_cooperative(&self, kernel: crate::backend::KernelHandle) -> anyhow::Result<()> {
        self.inner.set_kernel_cooperative(kernel)
    }

    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        let tok = self.begin(Location::caller(), |_| Call::KernelRegistry);
        let v = self.inner.kernel_registry();
        self.finish_plain(tok, &Ok(()), unit);
        v
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        let key = |_: &mut RecState, k: &mut ring::RawKey| {
            k.word(dst.0);
            k.word(src.len() as u64);
            k.word(stream);
            true
        };
        let extra = FastExtra {
            blob: Some(src),
            ..FastExtra::default()
        };
        let tok = self.begin_fast_with(
            Location::caller(),
            FAST_COPY_H2D_ASYNC,
            key,
            extra,
            |st, head| {
                let call = Call::CopyH2DAsync {
                    dst: st.addr(dst.0),
                    data: st.blob(src),
                    len: src.len() as u64,
                    stream: st.stream(stream),
                };
                st.emit_call(&head, &call);
            },
        );
        let r = self.inner.copy_h2d_async(src, dst, stream);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn copy_h2d_async_retained(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        let mut hash = None;
        let tok = self.begin(Location::caller(), |st| {
            let data = st.blob(src);
            hash = Some(data);
            Call::CopyH2DAsyncRetained {
                dst: st.addr(dst.0),
                data,
                len: src.len() as u64,
                stream: st.stream(stream),
                src: st.host(src.as_ptr() as usize),
            }
        });
        let seq = tok.as_ref().map(|t| t.seq);
        let r = self.inner.copy_h2d_async_retained(src, dst, stream);
        if let (Some(seq), Ok(())) = (seq, &r) {
            self.st.lock().pending.push(Pending {
                seq,
                stream,
                ptr: src.as_ptr() as usize,
                len: src.len(),
                hash,
            });
        }
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        let (ptr, len) = (dst.as_mut_ptr() as usize, dst.len());
        let tok = self.begin(Location::caller(), |st| Call::CopyD2HAsync {
            src: st.addr(src.0),
            len: len as u64,
            stream: st.stream(stream),
            dst: st.host(ptr),
        });
        let seq = tok.as_ref().map(|t| t.seq);
        let r = self.inner.copy_d2h_async(src, dst, stream);
        if let (Some(seq), Ok(())) = (seq, &r) {
            self.st.lock().pending.push(Pending {
                seq,
                stream,
                ptr,
                len,
                hash: None,
            });
        }
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::CopyD2DAsync {
            src: st.addr(src.0),
            dst: st.addr(dst.0),
            len: bytes as u64,
            stream: st.stream(stream),
        });
        let r = self.inner.copy_d2d_async(src, dst, bytes, stream);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn copy_d2d_2d_async(
        &self,
        src: DevicePtr,
        src_pitch: usize,
        dst: DevicePtr,
        dst_pitch: usize,
        width_bytes: usize,
        height: usize,
        stream: u64,
    ) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::CopyD2D2DAsync {
            src: st.addr(src.0),
            src_pitch: src_pitch as u64,
            dst: st.addr(dst.0),
            dst_pitch: dst_pitch as u64,
            width: width_bytes as u64,
            height: height as u64,
            stream: st.stream(stream),
        });
        let r = self.inner.copy_d2d_2d_async(
            src,
            src_pitch,
            dst,
            dst_pitch,
            width_bytes,
            height,
            stream,
        );
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> Result<()> {
        // Open before the Begin frame, so the capture's frames start with it.
        if let Some(f) = self.st.lock().flight.as_deref_mut() {
            f.capture_open();
        }
        let tok = self.begin(Location::caller(), |st| Call::BeginCapture {
            stream: st.stream(stream),
        });
        let r = self.inner.begin_capture(stream);
        if r.is_ok() {
            self.st.lock().capturing.insert(stream);
        } else {
            self.st.lock().capture_closed(None);
        }
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        let tok = self.begin(Location::caller(), |st| Call::EndCapture {
            stream: st.stream(stream),
        });
        let r = self.inner.end_capture(stream);
        // Ended or failed, the capture is over.
        self.st.lock().capturing.remove(&stream);
        self.finish(tok, &r, SyncScope::None, |st, g| {
            Value::Graph(st.new_graph(g.0))
        });
        // Closed after the End frame, which belongs to the capture.
        self.st.lock().capture_closed(r.as_ref().ok().map(|g| g.0));
        r
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> Result<()> {
        let key = |_: &mut RecState, k: &mut ring::RawKey| {
            k.word(graph.0);
            k.word(stream);
            true
        };
        let tok = self.begin_fast(Location::caller(), FAST_LAUNCH_GRAPH, key, |st, head| {
            let call = Call::LaunchGraph {
                graph: st.graph(graph.0),
                stream: st.stream(stream),
            };
            st.emit_call(&head, &call);
        });
        let r = self.inner.launch_graph(graph, stream);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::DestroyGraph {
            graph: st.graph(graph.0),
        });
        let r = self.inner.destroy_graph(graph);
        self.finish(tok, &r, SyncScope::None, |st, _| {
            st.gen += 1;
            if let (Some(id), Some(f)) = (st.graphs.remove(graph.0), st.flight.as_deref_mut()) {
                f.graph_destroyed(id);
            }
            Value::Unit
        });
        r
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        let tok = self.begin(Location::caller(), |st| Call::AbortCaptureIfActive {
            stream: st.stream(stream),
        });
        self.inner.abort_capture_if_active(stream);
        let mut st = self.st.lock();
        if st.capturing.remove(&stream) {
            st.capture_closed(None);
        }
        drop(st);
        self.finish_plain(tok, &Ok(()), unit);
    }

    #[track_caller]
    fn device_free_memory(&self) -> Result<usize> {
        plain!(
            self,
            Call::DeviceFreeMemory,
            self.inner.device_free_memory(),
            |v| { Value::Count(*v as u64) }
        )
    }

    #[track_caller]
    fn live_alloc_count(&self) -> usize {
        let tok = self.begin(Location::caller(), |_| Call::LiveAllocCount);
        let v = self.inner.live_alloc_count();
        self.finish_plain(tok, &Ok(v), |v| Value::Count(*v as u64));
        v
    }

    #[track_caller]
    fn create_stream(&self) -> Result<u64> {
        let tok = self.begin(Location::caller(), |_| Call::CreateStream);
        let r = self.inner.create_stream();
        self.finish(tok, &r, SyncScope::None, |st, s| {
            Value::Stream(st.new_stream(*s))
        });
        r
    }

    #[track_caller]
    fn bind_to_thread(&self) -> Result<()> {
        plain!(self, Call::BindToThread, self.inner.bind_to_thread(), unit)
    }

    #[track_caller]
    fn comm_unique_id(&self) -> Result<crate::backend::CommUniqueId> {
        self.rec_comm_unique_id(Location::caller())
    }

    #[track_caller]
    fn comm_init(
        &self,
        id: crate::backend::CommUniqueId,
        nranks: u32,
        rank: u32,
    ) -> Result<crate::backend::CommHandle> {
        self.rec_comm_init(Location::caller(), id, nranks, rank)
    }

    #[track_caller]
    fn collective(
        &self,
        comm: crate::backend::CommHandle,
        op: crate::backend::Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: crate::backend::CollDtype,
        stream: u64,
    ) -> Result<()> {
        let site = Location::caller();
        self.rec_collective(site, comm, op, send, recv, count, dtype, stream)
    }

    #[track_caller]
    fn comm_destroy(&self, comm: crate::backend::CommHandle) -> Result<()> {
        self.rec_comm_destroy(Location::caller(), comm)
    }

    #[track_caller]
    fn comm_group_start(&self) -> Result<()> {
        let tok = self.begin(Location::caller(), |_| Call::CommGroupStart);
        let r = self.inner.comm_group_start();
        self.finish(tok, &r, SyncScope::None, |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn comm_group_end(&self) -> Result<()> {
        let tok = self.begin(Location::caller(), |_| Call::CommGroupEnd);
        let r = self.inner.comm_group_end();
        self.finish(tok, &r, SyncScope::None, |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn create_event(&self) -> Result<u64> {
        let tok = self.begin(Location::caller(), |_| Call::CreateEvent);
        let r = self.inner.create_event();
        self.finish(tok, &r, SyncScope::None, |st, e| {
            Value::Event(st.new_event(*e))
        });
        r
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> Result<()> {
        // What the map said before, if the fast path changed it: a failed call puts it back.
        let before = std::cell::Cell::new(None);
        let key = |st: &mut RecState, k: &mut ring::RawKey| {
            // What the End would have mapped, mapped now: a fast call has no End.
            before.set(Some(st.event_stream.insert(event, stream)));
            k.word(event);
            k.word(stream);
            true
        };
        let tok = self.begin_fast(Location::caller(), FAST_RECORD_EVENT, key, |st, head| {
            let call = Call::RecordEvent {
                event: st.event(event),
                stream: st.stream(stream),
            };
            st.emit_call(&head, &call);
        });
        let r = self.inner.record_event(event, stream);
        if let (Err(_), Some(was)) = (&r, before.take()) {
            let mut st = self.st.lock();
            match was {
                Some(s) => st.event_stream.insert(event, s),
                None => st.event_stream.remove(&event),
            };
        }
        // One lock for the map update and the End frame.
        self.finish(tok, &r, SyncScope::None, |st, _| {
            st.event_stream.insert(event, stream);
            Value::Unit
        });
        r
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        let key = |_: &mut RecState, k: &mut ring::RawKey| {
            k.word(stream);
            k.word(event);
            true
        };
        let tok = self.begin_fast(Location::caller(), FAST_WAIT_EVENT, key, |st, head| {
            let call = Call::StreamWaitEvent {
                stream: st.stream(stream),
                event: st.event(event),
            };
            st.emit_call(&head, &call);
        });
        let r = self.inner.stream_wait_event(stream, event);
        self.finish_plain(tok, &r, unit);
        r
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::EventSynchronize {
            event: st.event(event),
        });
        let r = self.inner.event_synchronize(event);
        self.finish(tok, &r, SyncScope::Event(event), |_, _| Value::Unit);
        r
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::DestroyEvent {
            event: st.event(event),
        });
        let r = self.inner.destroy_event(event);
        self.finish(tok, &r, SyncScope::None, |st, _| {
            st.gen += 1;
            st.events.remove(event);
            st.event_stream.remove(&event);
            Value::Unit
        });
        r
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> Result<DevicePtr> {
        let site = Location::caller();
        let tok = self.begin(site, |st| Call::HostPtrToDevice {
            host: st.host(host as usize),
        });
        let r = self.inner.host_ptr_to_device(host);
        self.finish(tok, &r, SyncScope::None, |st, p| {
            // Register the alias once, as a buffer spanning the pinned region's remainder.
            match st.addr(p.0) {
                DevAddr::Buf { buf, .. } => Value::Buffer(buf),
                _ => {
                    let len = match st.host(host as usize) {
                        HostAddr::Pinned { host: h, off } => st
                            .hosts
                            .values()
                            .find(|(id, _)| *id == h)
                            .map_or(0, |(_, l)| *l as u64 - off),
                        HostAddr::Unknown => 0,
                    };
                    Value::Buffer(st.add_buf(p.0, len, site, Some(region(st, host as usize))))
                }
            }
        });
        r
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
        let tok = self.begin(Location::caller(), |_| Call::AllocHostPinned {
            bytes: bytes as u64,
        });
        let r = self.inner.alloc_host_pinned(bytes);
        self.finish(tok, &r, SyncScope::None, |st, p| {
            let id = HostId(st.next_host);
            st.next_host += 1;
            st.gen += 1;
            st.hosts.insert(*p as usize, (id, bytes));
            Value::Host(id)
        });
        r
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        let tok = self.begin(Location::caller(), |st| Call::FreeHostPinned {
            host: st.host(ptr as usize),
            bytes: bytes as u64,
        });
        let r = self.inner.free_host_pinned(ptr, bytes);
        self.finish(tok, &r, SyncScope::None, |st, _| {
            st.gen += 1;
            st.hosts.remove(&(ptr as usize));
            // Drop the device alias of this region, if one was taken.
            st.bufs.retain(|_, b| b.alias_of != Some(ptr as usize));
            Value::Unit
        });
        r
    }
}
