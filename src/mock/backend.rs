//! The mock's `GpuBackend` implementation: each trait method as the driver behaves, over the
//! state, memory and work executor in `state.rs`, `memory.rs` and `exec.rs` (capture judged by
//! the rule table in `capture.rs`, faults raised at launch and reported by the next call that
//! waits).

use super::*;

macro_rules! mock_try {
    ($e:expr) => {
        $e.map_err(|e: MockError| anyhow::Error::from(crate::backend::DeviceError::from(e)))
    };
}

impl GpuBackend for MockGpuBackend {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Alloc, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceAlloc,
            None,
            "alloc",
            site
        ))?;
        if st
            .mem
            .live_bytes
            .checked_add(bytes)
            .is_none_or(|total| total > self.cfg.total_memory)
        {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc",
                site,
                requested: bytes,
                live: st.mem.live_bytes,
                limit: self.cfg.total_memory,
            }));
        }
        Ok(DevicePtr(st.mem.alloc(bytes, site)))
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::AllocManaged, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceAlloc,
            None,
            "alloc_managed",
            site
        ))?;
        // Managed memory may oversubscribe the device, up to what the host could back.
        let limit = self.cfg.total_memory.saturating_mul(2);
        if st
            .mem
            .live_bytes
            .checked_add(bytes)
            .is_none_or(|total| total > limit)
        {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc_managed",
                site,
                requested: bytes,
                live: st.mem.live_bytes,
                limit,
            }));
        }
        Ok(DevicePtr(st.mem.alloc(bytes, site)))
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        if st.dead.is_some() {
            // The driver fails every call on a dead context, frees included, and the memory
            // goes with the context: on a context already dead, the allocation goes.
            let _ = st.mem.free(ptr.0, site);
        }
        mock_try!(Self::tick(&mut st, CallKind::Free, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceFree,
            None,
            "free",
            site
        ))?;
        mock_try!(st.mem.free(ptr.0, site)).map(|_| ())
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyH2D, site))?;
        let work = Work::H2D {
            dst: dst.0,
            src: HostSrc::Copied(src.to_vec()),
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_h2d", site))
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2H, site))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_d2h", site))
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2D, site))?;
        let work = Work::D2D {
            src: src.0,
            dst: dst.0,
            len: bytes,
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_d2d", site))
    }

    #[track_caller]
    fn launch(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        _shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Launch, site))?;
        let k = mock_try!(Self::kernel_index(&st, func, "launch", site))?;
        let info = st.kernels[k].info.clone();
        let layout = &info.params;
        if params.len() != layout.len() {
            return mock_try!(Err(MockError::BadParams {
                kernel: format!("{}::{}", st.kernels[k].info.module, st.kernels[k].info.name),
                site,
                detail: format!(
                    "{} params passed, kernel takes {}",
                    params.len(),
                    layout.len()
                ),
            }));
        }
        let args: Vec<Vec<u8>> = params
            .iter()
            .zip(layout.iter())
            .map(|(p, info)| {
                // SAFETY: the launch contract: params[i] points at a value of the kernel's i-th
                // parameter, whose size the registered layout gives.
                unsafe { std::slice::from_raw_parts(*p as *const u8, info.size as usize) }.to_vec()
            })
            .collect();
        mock_try!(Self::launch_args(
            &mut st, func, grid, block, stream, args, "launch", site
        ))?;
        Ok(())
    }

    #[track_caller]
    fn launch_typed(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        _shared_mem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::LaunchTyped, site))?;
        let k = mock_try!(Self::kernel_index(&st, func, "launch_typed", site))?;
        let info = st.kernels[k].info.clone();
        let kname = || format!("{}::{}", info.module, info.name);
        if args.len() != info.params.len() {
            return mock_try!(Err(MockError::BadParams {
                kernel: kname(),
                site,
                detail: format!(
                    "{} args passed, kernel takes {}",
                    args.len(),
                    info.params.len()
                ),
            }));
        }
        let mut raw = Vec::with_capacity(args.len());
        for (i, (a, p)) in args.iter().zip(&info.params).enumerate() {
            let bytes = match a {
                KernelArg::Buffer(ptr) => ptr.0.to_le_bytes().to_vec(),
                KernelArg::Bytes(b) => b.to_vec(),
            };
            if bytes.len() != p.size as usize {
                return mock_try!(Err(MockError::BadParams {
                    kernel: kname(),
                    site,
                    detail: format!(
                        "argument {i} is {} bytes, the kernel's parameter is {}",
                        bytes.len(),
                        p.size
                    ),
                }));
            }
            raw.push(bytes);
        }
        mock_try!(Self::launch_args(
            &mut st,
            func,
            grid,
            block,
            stream,
            raw,
            "launch_typed",
            site
        ))
    }

    #[track_caller]
    fn synchronize(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Synchronize, site))?;
        mock_try!(Self::check_stream(&st, stream, "synchronize", site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::StreamSync,
            Some(stream),
            "synchronize",
            site
        ))?;
        Ok(())
    }

    #[track_caller]
    fn default_stream(&self) -> u64 {
        self.default_stream
    }

    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> anyhow::Result<KernelHandle> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Kernel, site))?;
        match st
            .kernels
            .iter()
            .position(|k| k.info.module == module && k.info.name == func_name)
        {
            Some(i) => {
                drop(st);
                self.registry.note_lookup(
                    module,
                    func_name,
                    crate::backend::site_string(site),
                    None,
                );
                Ok(KernelHandle(i as u64 + 1))
            }
            None => {
                let e = MockError::UnknownKernel {
                    module: module.to_string(),
                    func: func_name.to_string(),
                    site,
                };
                drop(st);
                self.registry.note_lookup(
                    module,
                    func_name,
                    crate::backend::site_string(site),
                    Some(e.to_string()),
                );
                mock_try!(Err(e))
            }
        }
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        &self.op_cache
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Memset, site))?;
        let work = Work::Memset {
            dst: ptr.0,
            value,
            len: bytes,
        };
        mock_try!(Self::sync_copy(&mut st, work, "memset", site))
    }

    #[track_caller]
    fn memset_async(
        &self,
        ptr: DevicePtr,
        value: u8,
        bytes: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::MemsetAsync, site))?;
        let work = Work::Memset {
            dst: ptr.0,
            value,
            len: bytes,
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            work,
            "memset_async",
            site
        ))
    }

    #[track_caller]
    fn total_memory(&self) -> anyhow::Result<usize> {
        Ok(self.cfg.total_memory)
    }

    #[track_caller]
    fn free_memory(&self) -> anyhow::Result<usize> {
        Ok(self
            .cfg
            .total_memory
            .saturating_sub(self.state.lock().mem.live_bytes))
    }

    #[track_caller]
    fn sm_count(&self) -> anyhow::Result<u32> {
        Ok(self.cfg.sm_count)
    }

    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        let site = here();
        let mut st = self.state.lock();
        let live: Vec<(u64, Site, usize)> = st
            .mem
            .allocs
            .iter()
            .filter(|(_, a)| matches!(a.storage, memory::Storage::Owned(_)))
            .map(|(b, a)| (*b, a.site, a.size))
            .collect();
        let rows = by_site(live.iter().map(|(_, s, n)| (*s, *n)));
        if !live.is_empty() {
            // As on CUDA: after a sticky fault the owners' frees failed and the memory goes
            // with the context; one line says so.
            let line =
                crate::backend::ledger::sweep_line(&rows, st.dead.as_ref().map(|e| e.cuda_code()));
            tracing::warn!("{line}");
            st.last_sweep_line = Some(line);
        } else {
            st.last_sweep_line = None;
        }
        for (b, _, _) in &live {
            let _ = st.mem.free(*b, site);
        }
        st.last_sweep = rows;
        live.len()
    }

    #[track_caller]
    fn live_bytes(&self) -> Option<usize> {
        Some(self.state.lock().mem.live_bytes)
    }

    #[track_caller]
    fn alloc_report(&self, top_n: usize, min_mb: usize) -> Option<String> {
        Some(crate::backend::ledger::alloc_report(
            &self.live_by_site(),
            top_n,
            min_mb,
        ))
    }

    #[track_caller]
    fn copy_d2h_on_stream(
        &self,
        src: DevicePtr,
        dst: &mut [u8],
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2HOnStream, site))?;
        mock_try!(Self::check_stream(&st, stream, "copy_d2h_on_stream", site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::CopyThenWait,
            Some(stream),
            "copy_d2h_on_stream",
            site
        ))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        mock_try!(Self::exec(&mut st, &work, "copy_d2h_on_stream", site))
    }

    #[track_caller]
    fn stream_is_capturing(&self, stream: u64) -> bool {
        self.state
            .lock()
            .captures
            .iter()
            .any(|c| c.streams.contains(&stream))
    }

    #[track_caller]
    fn encode_tensor_map(
        &self,
        base: DevicePtr,
        desc: &crate::backend::TensorMapDesc,
    ) -> anyhow::Result<crate::backend::TensorMapImage> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::EncodeTensorMap, site))?;
        let invalid = |detail: String| MockError::Invalid {
            op: "encode_tensor_map",
            site,
            detail,
        };
        mock_try!(desc.validate(base.0).map_err(|e| invalid(e.to_string())))?;
        // The driver does not check that the map stays inside an allocation; the mock does,
        // so a map past its buffer is named where it is made, not where TMA reads it.
        mock_try!(st
            .mem
            .read(base.0, desc.span() as usize, "encode_tensor_map", site)
            .map(|_| ()))?;
        Ok(crate::backend::tensormap::mock_image(base.0, desc))
    }

    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        self.cfg.debug_sync_kernels
    }

    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        Some(self.registry.clone())
    }

    /// Every kernel registered with its layout and body (a kernel without one is opaque), and
    /// the module's source kept for traces.
    #[track_caller]
    fn load_module(&self, module: &crate::backend::ModuleDesc) -> anyhow::Result<()> {
        self.registry.declare_module(module);
        for k in &module.kernels {
            self.register_kernel(&module.name, &k.name, k.params.clone(), k.body.clone());
        }
        self.set_module_code(crate::backend::ModuleCode {
            name: module.name.clone(),
            source: module.source.clone(),
            ptx: None,
        });
        Ok(())
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyH2DAsync, site))?;
        // The caller may drop `src` at once, so take the bytes now, as the CUDA backend stages.
        let work = Work::H2D {
            dst: dst.0,
            src: HostSrc::Copied(src.to_vec()),
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::AsyncH2D,
            stream,
            work,
            "copy_h2d_async",
            site
        ))
    }

    #[track_caller]
    fn copy_h2d_async_retained(
        &self,
        src: &[u8],
        dst: DevicePtr,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyH2DAsyncRetained, site))?;
        // A pinned source is read when the work runs, as the driver's DMA (or a graph node)
        // would read it; anything else is taken now.
        let addr = src.as_ptr() as usize;
        let hsrc = if st.mem.pinned_containing(addr, src.len()).is_some() {
            HostSrc::Pinned {
                addr,
                len: src.len(),
            }
        } else {
            HostSrc::Copied(src.to_vec())
        };
        let work = Work::H2D {
            dst: dst.0,
            src: hsrc,
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::AsyncH2D,
            stream,
            work,
            "copy_h2d_async_retained",
            site
        ))
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2HAsync, site))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        let captured = st.captures.iter().any(|c| c.streams.contains(&stream));
        if captured
            && st
                .mem
                .pinned_containing(dst.as_mut_ptr() as usize, dst.len())
                .is_none()
        {
            return mock_try!(Err(MockError::Invalid {
                op: "copy_d2h_async",
                site,
                detail: "a captured device-to-host copy must target pinned memory: the graph \
                         writes there at every launch"
                    .into(),
            }));
        }
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            work,
            "copy_d2h_async",
            site
        ))
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2DAsync, site))?;
        let work = Work::D2D {
            src: src.0,
            dst: dst.0,
            len: bytes,
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            work,
            "copy_d2d_async",
            site
        ))
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
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2D2DAsync, site))?;
        if height > 0 && (width_bytes > src_pitch || width_bytes > dst_pitch) {
            return mock_try!(Err(MockError::Invalid {
                op: "copy_d2d_2d_async",
                site,
                detail: format!(
                    "width {width_bytes} exceeds a pitch (src {src_pitch}, dst {dst_pitch})"
                ),
            }));
        }
        // One 2D copy is one operation: check every row before writing any.
        for row in 0..height {
            mock_try!(st.mem.locate(
                src.0 + (row * src_pitch) as u64,
                width_bytes,
                "copy_d2d_2d_async",
                site
            ))?;
            mock_try!(st.mem.locate(
                dst.0 + (row * dst_pitch) as u64,
                width_bytes,
                "copy_d2d_2d_async",
                site
            ))?;
        }
        mock_try!(Self::check_stream(&st, stream, "copy_d2d_2d_async", site))?;
        let into = mock_try!(Self::judge(
            &mut st,
            CaptureOp::StreamWork,
            Some(stream),
            "copy_d2d_2d_async",
            site
        ))?;
        for row in 0..height {
            let w = Work::D2D {
                src: src.0 + (row * src_pitch) as u64,
                dst: dst.0 + (row * dst_pitch) as u64,
                len: width_bytes,
            };
            match into {
                Some(ci) => st.captures[ci].work.push(w),
                None => mock_try!(Self::exec(&mut st, &w, "copy_d2d_2d_async", site))?,
            }
        }
        if let Some(ci) = into {
            Self::note_capture_op(&mut st, ci, stream);
        }
        Ok(())
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::BeginCapture, site))?;
        mock_try!(Self::check_stream(&st, stream, "begin_capture", site))?;
        // Against the captures already running (touching the legacy stream kills a blocking
        // one), then against the stream's own state.
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::BeginCapture,
            Some(stream),
            "begin_capture",
            site
        ))?;
        let relation = if stream == LEGACY_STREAM {
            Relation::Legacy
        } else if st.captures.iter().any(|c| c.streams.contains(&stream)) {
            Relation::Capturing
        } else {
            Relation::Other
        };
        let kind = st.streams[&stream];
        let rule = decide(
            CaptureOp::BeginCapture,
            CaptureContext {
                relation,
                kind,
                mode: self.cfg.capture_mode,
                same_thread: true,
            },
        );
        if let Verdict::Fails { .. } = rule.verdict {
            return mock_try!(Err(capture_err("begin_capture", site, rule)));
        }
        st.captures.push(Capture {
            origin: stream,
            streams: BTreeSet::from([stream]),
            unjoined: BTreeSet::new(),
            mode: self.cfg.capture_mode,
            kind,
            thread: std::thread::current().id(),
            work: Vec::new(),
            invalidated: None,
        });
        Ok(())
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> anyhow::Result<GraphHandle> {
        mock_try!(self.end_capture_inner(stream, here()))
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::LaunchGraph, site))?;
        if !st.graphs.contains_key(&graph.0) {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "launch_graph",
                what: "graph",
                id: graph.0,
                site,
            }));
        }
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            Work::Graph(graph.0),
            "launch_graph",
            site
        ))
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::DestroyGraph, site))?;
        match st.graphs.remove(&graph.0) {
            Some(_) => Ok(()),
            None => mock_try!(Err(MockError::UnknownHandle {
                op: "destroy_graph",
                what: "graph",
                id: graph.0,
                site,
            })),
        }
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        let mut st = self.state.lock();
        if let Some(ci) = st.captures.iter().position(|c| c.streams.contains(&stream)) {
            let c = st.captures.remove(ci);
            for e in st.events.values_mut() {
                if e.in_capture.is_some_and(|(o, _, _)| o == c.origin) {
                    e.in_capture = None;
                }
            }
        }
    }

    #[track_caller]
    fn device_free_memory(&self) -> anyhow::Result<usize> {
        self.free_memory()
    }

    #[track_caller]
    fn live_alloc_count(&self) -> usize {
        self.state
            .lock()
            .mem
            .allocs
            .values()
            .filter(|a| matches!(a.storage, memory::Storage::Owned(_)))
            .count()
    }

    #[track_caller]
    fn create_stream(&self) -> anyhow::Result<u64> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CreateStream, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::HostOnly,
            None,
            "create_stream",
            site
        ))?;
        let s = st.next_stream;
        st.next_stream += 1;
        st.streams.insert(s, self.cfg.stream_kind);
        Ok(s)
    }

    #[track_caller]
    fn create_event(&self) -> anyhow::Result<u64> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CreateEvent, site))?;
        let e = st.next_event;
        st.next_event += 1;
        st.events.insert(e, EventState::default());
        Ok(e)
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::RecordEvent, site))?;
        if !st.events.contains_key(&event) {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "record_event",
                what: "event",
                id: event,
                site,
            }));
        }
        mock_try!(Self::check_stream(&st, stream, "record_event", site))?;
        let into = mock_try!(Self::judge(
            &mut st,
            CaptureOp::EventRecord,
            Some(stream),
            "record_event",
            site
        ))?;
        let in_capture = into.map(|ci| {
            let n = st.stream_ops.get(&stream).copied().unwrap_or(0);
            (st.captures[ci].origin, stream, n)
        });
        st.events.insert(event, EventState { in_capture });
        Ok(())
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::StreamWaitEvent, site))?;
        let Some(ev) = st.events.get(&event).copied() else {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "stream_wait_event",
                what: "event",
                id: event,
                site,
            }));
        };
        mock_try!(Self::check_stream(&st, stream, "stream_wait_event", site))?;
        let op = if ev.in_capture.is_some() {
            CaptureOp::WaitCapturedEvent
        } else {
            CaptureOp::WaitExternalEvent
        };
        let into = mock_try!(Self::judge(
            &mut st,
            op,
            Some(stream),
            "stream_wait_event",
            site
        ))?;
        if let (Some(ci), Some((_, rec_stream, ops_at_record))) = (into, ev.in_capture) {
            let c = &mut st.captures[ci];
            if c.streams.insert(stream) {
                // A fork: the stream now captures and must be joined back before the end.
                c.unjoined.insert(stream);
            }
            // The origin waiting on the tail of a forked stream joins that stream back.
            let now = st.stream_ops.get(&rec_stream).copied().unwrap_or(0);
            let c = &mut st.captures[ci];
            if stream == c.origin && rec_stream != c.origin && now == ops_at_record {
                c.unjoined.remove(&rec_stream);
            }
        }
        Ok(())
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::EventSynchronize, site))?;
        let Some(ev) = st.events.get(&event).copied() else {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "event_synchronize",
                what: "event",
                id: event,
                site,
            }));
        };
        let op = if ev.in_capture.is_some() {
            CaptureOp::SyncCapturedEvent
        } else {
            CaptureOp::SyncExternalEvent
        };
        let stream = ev.in_capture.map(|(_, s, _)| s);
        mock_try!(Self::judge(&mut st, op, stream, "event_synchronize", site))?;
        Ok(())
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::DestroyEvent, site))?;
        match st.events.remove(&event) {
            Some(_) => Ok(()),
            None => mock_try!(Err(MockError::UnknownHandle {
                op: "destroy_event",
                what: "event",
                id: event,
                site,
            })),
        }
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::HostPtrToDevice, site))?;
        mock_try!(st.mem.host_alias(host, site)).map(DevicePtr)
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> anyhow::Result<*mut u8> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::AllocHostPinned, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::PinnedHost,
            None,
            "alloc_host_pinned",
            site
        ))?;
        if bytes > self.cfg.total_memory {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc_host_pinned",
                site,
                requested: bytes,
                live: 0,
                limit: self.cfg.total_memory,
            }));
        }
        mock_try!(st.mem.alloc_pinned(bytes, site))
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::FreeHostPinned, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::PinnedHost,
            None,
            "free_host_pinned",
            site
        ))?;
        mock_try!(st.mem.free_pinned(ptr, bytes, site))
    }
}
