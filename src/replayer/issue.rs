//! Issuing one recorded call on the replay's backend: ids mapped to what the replay made,
//! the call made, and its outcome set against the recording's (a readback compared, a failure
//! that was recorded met again). The replay loop in `mod.rs` decides what to issue and when.

use super::state::taint_copy;
use super::verify::first_diff;
use super::*;

impl Replayer<'_> {
    /// Issue one recorded call. Returns how it went relative to the recording. One long
    /// function on purpose: an exhaustive match over `Call`, an arm per variant, so a new call
    /// is a compile error here until a replay knows how to issue it.
    pub(crate) fn issue(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut State,
        c: &CallRecord,
        verify: bool,
    ) -> Result<Outcome, ReplayError> {
        let recorded_err = matches!(c.ret, Some(Err(_)));
        let dangling = |what: String| ReplayError::Dangling {
            seq: c.seq,
            kind: c.call.kind().name(),
            what,
        };
        let live_event = |st: &State, id: &EventId| {
            st.events
                .get(id)
                .copied()
                .ok_or_else(|| dangling(id.to_string()))
        };
        let ret_value = match &c.ret {
            Some(Ok(v)) => Some(v),
            _ => None,
        };
        let mut checked = false;
        let mut mismatch = None;
        let r: anyhow::Result<()> = match &c.call {
            Call::Alloc { bytes } | Call::AllocManaged { bytes } => {
                let managed = matches!(c.call, Call::AllocManaged { .. });
                match ret_value {
                    Some(Value::Buffer(id)) => {
                        let r = self.alloc_buf(gpu, *id, *bytes, managed);
                        if let Ok(p) = &r {
                            self.check_hidden(*id, *p)?;
                            st.bufs.insert(*id, (*p, *bytes));
                            st.seen.bufs.push((*id, p.0, *bytes));
                        }
                        r.map(|_| ())
                    }
                    // Recorded as failed: make the same request, the result is not kept.
                    _ if managed => gpu.alloc_managed(*bytes as usize).map(|_| ()),
                    _ => gpu.alloc(*bytes as usize).map(|_| ()),
                }
            }
            Call::Free { ptr } => {
                let p = self.addr(st, ptr, c)?;
                let r = gpu.free(p);
                if r.is_ok() {
                    if let DevAddr::Buf { buf, .. } = ptr {
                        if let Some((p, _)) = st.bufs.remove(buf) {
                            st.freed.insert(*buf, p);
                        }
                    }
                }
                r
            }
            Call::CopyH2D { dst, data, .. } => {
                gpu.copy_h2d(self.blob(*data)?, self.addr(st, dst, c)?)
            }
            Call::CopyD2H { src, len } | Call::CopyD2HOnStream { src, len, .. } => {
                let mut out = self.host_bytes(*len, c)?;
                let p = self.addr(st, src, c)?;
                let r = match &c.call {
                    Call::CopyD2HOnStream { stream: s, .. } => {
                        gpu.copy_d2h_on_stream(p, &mut out, resolve_stream(st, *s, c)?)
                    }
                    _ => gpu.copy_d2h(p, &mut out),
                };
                if r.is_ok() && verify && !self.unchecked(st, c.seq, src) {
                    if let Some(Value::Bytes(blob)) = ret_value {
                        checked = true;
                        let want = self.blob(*blob)?;
                        if let Some(off) = first_diff(want, &out) {
                            let buf = match src {
                                DevAddr::Buf { buf, off: o } => Some((*buf, *o)),
                                _ => None,
                            };
                            mismatch = Some((
                                buf.map(|b| b.0),
                                Some(off + buf.map_or(0, |b| b.1)),
                                format!(
                                    "recorded byte {:#04x}, replayed {:#04x}",
                                    want.get(off as usize).copied().unwrap_or(0),
                                    out.get(off as usize).copied().unwrap_or(0)
                                ),
                            ));
                        }
                    }
                }
                r
            }
            Call::CopyD2D { src, dst, len } => {
                taint_copy(st, src, dst);
                gpu.copy_d2d(
                    self.addr(st, src, c)?,
                    self.addr(st, dst, c)?,
                    *len as usize,
                )
            }
            Call::Launch { head: LaunchHead { kernel, grid, block, shared_mem, stream: s }, args }
            | Call::LaunchTyped { head: LaunchHead { kernel, grid, block, shared_mem, stream: s }, args } => {
                self.taint_launch(st, *kernel, args);
                if let Some(n) = self.args_missing.get(&c.seq) {
                    // Launched with garbage it would be worse than not at all: not run, said.
                    st.unrecorded_args.push((c.seq, *kernel, *n));
                    return Ok(Outcome::Ok {
                        checked: false,
                        mismatch: None,
                    });
                }
                if st.opaque.contains(kernel) {
                    // Nothing to run it with: skipped, and what it wrote is marked. A recorded
                    // failure here is not checked, and says so.
                    if matches!(c.ret, Some(Err(_))) {
                        st.failed_unrun.push((c.seq, *kernel));
                    }
                    return Ok(Outcome::Ok {
                        checked: false,
                        mismatch: None,
                    });
                }
                let k = *st
                    .kernels
                    .get(kernel)
                    .ok_or_else(|| dangling(kernel.to_string()))?;
                let mut ptrs: smallvec::SmallVec<[DevicePtr; 8]> = smallvec::SmallVec::new();
                for a in args.iter() {
                    if let Arg::Buf(d) = a {
                        ptrs.push(self.addr(st, d, c)?);
                    }
                }
                // Tensor maps are encoded anew for where their buffers live in this replay; a
                // backend that cannot is this launch failing on replay.
                let mut maps: smallvec::SmallVec<[crate::backend::TensorMapImage; 1]> =
                    smallvec::SmallVec::new();
                let mut encoded: anyhow::Result<()> = Ok(());
                for a in args.iter() {
                    if let Arg::TensorMap(m) = a {
                        let base = self.addr(st, &m.base, c)?;
                        match gpu.encode_tensor_map(base, &m.desc) {
                            Ok(img) => maps.push(img),
                            Err(e) => {
                                encoded = Err(e.context(format!(
                                    "encoding the tensor map of call #{} for {}",
                                    c.seq, m.base
                                )));
                                break;
                            }
                        }
                    }
                }
                // Addresses (and tensor maps) inside by-value parameters, rewritten for where
                // their buffers live; a map the backend cannot encode fails this launch.
                let mut words: smallvec::SmallVec<[Vec<u8>; 2]> = smallvec::SmallVec::new();
                let mut encoded_err: Option<anyhow::Error> = None;
                for a in args.iter() {
                    if let Arg::Words(w) = a {
                        let encoded = w.relocated(
                            |d| self.addr(st, d, c).map(|p| p.0).map_err(anyhow::Error::from),
                            |m| {
                                let base = self.addr(st, &m.base, c)?;
                                gpu.encode_tensor_map(base, &m.desc)
                                    .map(|img| img.to_vec())
                                    .map_err(|e| {
                                        e.context(format!(
                                            "encoding a tensor map inside a parameter of call #{} for {}",
                                            c.seq, m.base
                                        ))
                                    })
                            },
                        );
                        match encoded {
                            Ok(b) => words.push(b),
                            Err(e) => match e.downcast::<ReplayError>() {
                                Ok(r) => return Err(r),
                                Err(e) => {
                                    encoded_err = Some(e);
                                    break;
                                }
                            },
                        }
                    }
                }
                if let Some(e) = encoded_err {
                    encoded = Err(e);
                }
                let stream = resolve_stream(st, *s, c)?;
                encoded.and_then(|()| {
                    let (mut pi, mut mi, mut wi) = (ptrs.iter(), maps.iter(), words.iter());
                    let kargs: smallvec::SmallVec<[KernelArg<'_>; 12]> = args
                        .iter()
                        .map(|a| match a {
                            Arg::Buf(_) => KernelArg::Buffer(*pi.next().expect("one per Buf")),
                            Arg::Val(v) => KernelArg::Bytes(v),
                            Arg::TensorMap(_) => {
                                KernelArg::Bytes(&mi.next().expect("one per tensor map")[..])
                            }
                            Arg::Words(_) => {
                                KernelArg::Bytes(&wi.next().expect("one per address words")[..])
                            }
                        })
                        .collect();
                    gpu.launch_typed(k, *grid, *block, *shared_mem, stream, &kargs)
                })
            }
            Call::Synchronize { stream: s } => {
                let raw = resolve_stream(st, *s, c)?;
                let r = gpu.synchronize(raw);
                self.settle(st, *s, c, verify, &mut checked, &mut mismatch)?;
                r
            }
            Call::Memset { dst, value, len } => {
                gpu.memset(self.addr(st, dst, c)?, *value, *len as usize)
            }
            // The bytes are not compared (they hold an address); each launch that takes the
            // map encodes it again for its buffer, so this only checks the description holds.
            Call::EncodeTensorMap { base, desc } => gpu
                .encode_tensor_map(self.addr(st, base, c)?, desc)
                .map(|_| ()),
            Call::CommUniqueId => gpu.comm_unique_id().map(|_| ()),
            Call::CommInit {
                unique,
                nranks,
                rank,
            } => match (ret_value, *nranks) {
                // A communicator of one: its collectives are local, and replay alone.
                (Some(Value::Comm(id)), 1) => {
                    let h = gpu.comm_unique_id().and_then(|u| gpu.comm_init(u, 1, 0));
                    if let Ok(h) = &h {
                        st.comms.insert(*id, *h);
                    }
                    h.map(|_| ())
                }
                (_, 1) => gpu
                    .comm_unique_id()
                    .and_then(|u| gpu.comm_init(u, 1, 0))
                    .map(|_| ()),
                // One rank of a rank set replayed together: the others join the same id.
                (ret, _) if st.comm_ids.contains_key(unique) => {
                    let h = gpu.comm_init(st.comm_ids[unique], *nranks, *rank);
                    if let (Ok(h), Some(Value::Comm(id))) = (&h, ret) {
                        st.comms.insert(*id, *h);
                    }
                    h.map(|_| ())
                }
                _ => Err(anyhow::anyhow!(
                    "comm_init: rank {rank} of {nranks} in communicator {unique}: a rank's \
                     trace replays only together with the other ranks' (`replay_ranks`, `gputape ranks --replay`)"
                )),
            },
            Call::Collective {
                comm,
                op,
                send,
                recv,
                count,
                dtype,
                stream: s,
                ..
            } => {
                use crate::backend::Collective as C;
                let h = *st
                    .comms
                    .get(comm)
                    .ok_or_else(|| dangling(comm.to_string()))?;
                let send = match op {
                    C::Recv { .. } => DevicePtr(0),
                    _ => self.addr(st, send, c)?,
                };
                let recv = match op {
                    C::Send { .. } => DevicePtr(0),
                    _ => self.addr(st, recv, c)?,
                };
                gpu.collective(
                    h,
                    *op,
                    send,
                    recv,
                    *count,
                    *dtype,
                    resolve_stream(st, *s, c)?,
                )
            }
            // Not understood when recorded: nothing to do it with. The report lists each.
            Call::Opaque { .. } => {
                return Ok(Outcome::Ok {
                    checked: false,
                    mismatch: None,
                })
            }
            // The program's own code: a replay keeps its place in the stream's order (issue
            // order is stream order) and the report says what came after it.
            Call::HostFunc { .. } => {
                return Ok(Outcome::Ok {
                    checked: false,
                    mismatch: None,
                })
            }
            Call::CommGroupStart => gpu.comm_group_start(),
            Call::CommGroupEnd => gpu.comm_group_end(),
            Call::CommDestroy { comm } => {
                let h = st
                    .comms
                    .remove(comm)
                    .ok_or_else(|| dangling(comm.to_string()))?;
                gpu.comm_destroy(h)
            }
            Call::MemsetAsync {
                dst,
                value,
                len,
                stream: s,
            } => gpu.memset_async(
                self.addr(st, dst, c)?,
                *value,
                *len as usize,
                resolve_stream(st, *s, c)?,
            ),
            Call::CopyH2DAsync {
                dst,
                data,
                stream: s,
                ..
            } => gpu.copy_h2d_async(
                self.blob(*data)?,
                self.addr(st, dst, c)?,
                resolve_stream(st, *s, c)?,
            ),
            Call::CopyH2DAsyncRetained {
                dst,
                data,
                stream: s,
                src,
                ..
            } => {
                let bytes = self.blob(*data)?;
                let d = self.addr(st, dst, c)?;
                let raw = resolve_stream(st, *s, c)?;
                match self.host(st, src, bytes.len() as u64, c)? {
                    Some(h) => {
                        // SAFETY: `h` points into a replay pinned region at the recorded offset,
                        // with room for the recorded length.
                        let slice = unsafe { std::slice::from_raw_parts_mut(h, bytes.len()) };
                        slice.copy_from_slice(bytes);
                        gpu.copy_h2d_async_retained(slice, d, raw)
                    }
                    None => {
                        st.pending.push((c.seq, *s, bytes.to_vec()));
                        let v = &st.pending.last().expect("pushed").2;
                        gpu.copy_h2d_async_retained(v, d, raw)
                    }
                }
            }
            Call::CopyD2HAsync {
                src,
                len,
                stream: s,
                dst,
            } => {
                let p = self.addr(st, src, c)?;
                let raw = resolve_stream(st, *s, c)?;
                match self.host(st, dst, *len, c)? {
                    Some(h) => {
                        // SAFETY: as above: a pinned region of the replay, recorded offset and
                        // length.
                        let slice = unsafe { std::slice::from_raw_parts_mut(h, *len as usize) };
                        let r = gpu.copy_d2h_async(p, slice, raw);
                        st.pending.push((c.seq, *s, Vec::new()));
                        r
                    }
                    None => {
                        let v = self.host_bytes(*len, c)?;
                        st.pending.push((c.seq, *s, v));
                        let v = &mut st.pending.last_mut().expect("pushed").2;
                        gpu.copy_d2h_async(p, v, raw)
                    }
                }
            }
            Call::CopyD2DAsync {
                src,
                dst,
                len,
                stream: s,
            } => {
                taint_copy(st, src, dst);
                gpu.copy_d2d_async(
                    self.addr(st, src, c)?,
                    self.addr(st, dst, c)?,
                    *len as usize,
                    resolve_stream(st, *s, c)?,
                )
            }
            Call::CopyD2D2DAsync {
                src,
                src_pitch,
                dst,
                dst_pitch,
                width,
                height,
                stream: s,
            } => {
                taint_copy(st, src, dst);
                gpu.copy_d2d_2d_async(
                    self.addr(st, src, c)?,
                    *src_pitch as usize,
                    self.addr(st, dst, c)?,
                    *dst_pitch as usize,
                    *width as usize,
                    *height as usize,
                    resolve_stream(st, *s, c)?,
                )
            }
            Call::BeginCapture { stream: s } => gpu.begin_capture(resolve_stream(st, *s, c)?),
            Call::EndCapture { stream: s } => {
                gpu.end_capture(resolve_stream(st, *s, c)?).map(|g| {
                    if let Some(Value::Graph(id)) = ret_value {
                        st.graphs.insert(*id, g);
                    }
                })
            }
            Call::LaunchGraph { graph, stream: s } => {
                let g = *st
                    .graphs
                    .get(graph)
                    .ok_or_else(|| dangling(graph.to_string()))?;
                gpu.launch_graph(g, resolve_stream(st, *s, c)?)
            }
            Call::DestroyGraph { graph } => {
                let g = st
                    .graphs
                    .remove(graph)
                    .ok_or_else(|| dangling(graph.to_string()))?;
                gpu.destroy_graph(g)
            }
            Call::AbortCaptureIfActive { stream: s } => {
                gpu.abort_capture_if_active(resolve_stream(st, *s, c)?);
                Ok(())
            }
            Call::CreateStream => gpu.create_stream().map(|s| {
                if let Some(Value::Stream(StreamRef::Id(id))) = ret_value {
                    st.streams.insert(*id, s);
                    st.seen.streams.insert(s, *id);
                }
            }),
            Call::CreateEvent => gpu.create_event().map(|e| {
                if let Some(Value::Event(id)) = ret_value {
                    st.events.insert(*id, e);
                    st.seen.events.insert(e, *id);
                }
            }),
            Call::RecordEvent { event, stream: s } => {
                let e = live_event(st, event)?;
                gpu.record_event(e, resolve_stream(st, *s, c)?)
            }
            Call::StreamWaitEvent { stream: s, event } => {
                let e = live_event(st, event)?;
                gpu.stream_wait_event(resolve_stream(st, *s, c)?, e)
            }
            Call::EventSynchronize { event } => {
                let e = live_event(st, event)?;
                gpu.event_synchronize(e)
            }
            Call::DestroyEvent { event } => {
                let e = st
                    .events
                    .remove(event)
                    .ok_or_else(|| dangling(event.to_string()))?;
                gpu.destroy_event(e)
            }
            Call::HostPtrToDevice { host } => match self.host(st, host, 0, c)? {
                Some(h) => gpu.host_ptr_to_device(h).map(|p| {
                    if let Some(Value::Buffer(id)) = ret_value {
                        st.bufs.insert(*id, (p, 0));
                        st.seen.bufs.push((*id, p.0, 0));
                    }
                }),
                None => Err(anyhow::anyhow!(
                    "host pointer was not in a recorded pinned region"
                )),
            },
            Call::AllocHostPinned { bytes } => gpu.alloc_host_pinned(*bytes as usize).map(|p| {
                if let Some(Value::Host(id)) = ret_value {
                    st.hosts.insert(*id, (p, *bytes as usize));
                }
            }),
            Call::FreeHostPinned { host, bytes } => match host {
                HostAddr::Pinned { host: id, .. } => {
                    let (p, _) = st
                        .hosts
                        .remove(id)
                        .ok_or_else(|| dangling(id.to_string()))?;
                    gpu.free_host_pinned(p, *bytes as usize)
                }
                HostAddr::Unknown => Err(anyhow::anyhow!("freeing an unknown pinned region")),
            },
            Call::Kernel { module, func } => match (gpu.kernel(module, func), ret_value) {
                (Ok(h), Some(Value::Kernel(id))) => {
                    st.kernels.insert(*id, h);
                    Ok(())
                }
                (Ok(_), _) => Ok(()),
                // A kernel this backend cannot run: its lookup is as opaque as its launches.
                (Err(_), Some(Value::Kernel(id))) if st.opaque.contains(id) => Ok(()),
                (Err(e), _) => Err(e),
            },
            Call::ScanRedzones => gpu.scan_redzones().map(|n| st.last_scan = Some(n)),
            Call::PoisonRedzones { lo, hi } => gpu.poison_redzones(*lo as usize, *hi as usize),
            Call::SweepUnreleased => {
                gpu.sweep_unreleased();
                st.bufs.clear();
                Ok(())
            }
            Call::BindToThread => gpu.bind_to_thread(),
            // Queries and accessors: nothing to reproduce.
            Call::DefaultStream
            | Call::OpCache
            | Call::TotalMemory
            | Call::FreeMemory
            | Call::SmCount
            | Call::LiveBytes
            | Call::AllocReport { .. }
            | Call::StreamIsCapturing { .. }
            | Call::DebugSyncKernels
            | Call::KernelRegistry
            | Call::DeviceFreeMemory
            | Call::LiveAllocCount
            | Call::RedzoneHits
            | Call::StepBoundary { .. } => Ok(()),
        };
        if let Call::EventSynchronize { .. } = &c.call {
            // The recorded stream of the event is not known here; settle everything pending.
            let mut streams: Vec<StreamRef> = st.pending.iter().map(|p| p.1).collect();
            streams.sort();
            streams.dedup();
            for s in streams {
                self.settle(st, s, c, verify, &mut checked, &mut mismatch)?;
            }
        }
        Ok(match (r, recorded_err) {
            (Ok(()), false) => Outcome::Ok { checked, mismatch },
            (Ok(()), true) => Outcome::SucceededButRecordedError,
            (Err(e), _) => Outcome::Failed(e),
        })
    }
}
