//! The work executor, in a room of its own because it is where device work happens: a unit of
//! work (`Work`) submitted on a stream is captured or run at once (under chaos, queued by the
//! scheduler in `chaos.rs`, which runs it through `exec` later), validated against the exact
//! allocations, and run in call order (copies, memsets, graphs, and launches through
//! `run_kernel`, which checks pointer arguments and calls the kernel's CPU body).

use super::exec_log::{Executed, Ran};
use super::state::State;
use super::{kernel, KernelCtx, MockError, MockGpuBackend, R};
use crate::backend::{CaptureOp, KernelHandle, ParamAccess, Site, LEGACY_STREAM};

/// A unit of device work, executed now or kept in a graph to execute at launch.
#[derive(Clone)]
pub(crate) enum Work {
    Launch {
        kernel: usize,
        grid: [u32; 3],
        block: [u32; 3],
        args: Vec<Vec<u8>>,
    },
    /// Host-to-device copy. A source inside a pinned region is read when the work runs (as a
    /// graph's memcpy node reads at launch); any other source was copied at enqueue time.
    H2D {
        dst: u64,
        src: HostSrc,
    },
    D2H {
        src: u64,
        dst: usize,
        len: usize,
    },
    D2D {
        src: u64,
        dst: u64,
        len: usize,
    },
    Memset {
        dst: u64,
        value: u8,
        len: usize,
    },
    Graph(u64),
    /// A collective captured into a graph (`comm.rs`): it meets the other ranks at each run.
    Collective(std::sync::Arc<super::comm::CapturedCollective>),
}

#[derive(Clone)]
pub(crate) enum HostSrc {
    Pinned { addr: usize, len: usize },
    Copied(Vec<u8>),
}

impl MockGpuBackend {
    /// Enqueue device work on `stream`: captured into a graph, or executed now.
    pub(super) fn submit(
        st: &mut State,
        op: CaptureOp,
        stream: u64,
        work: Work,
        name: &'static str,
        site: Site,
    ) -> R<()> {
        Self::check_stream(st, stream, name, site)?;
        match Self::judge(st, op, Some(stream), name, site)? {
            Some(ci) => {
                // Validate now, as the driver validates a node's pointers when it is added.
                Self::validate(st, &work, name, site)?;
                st.captures[ci].work.push(work);
                Self::note_capture_op(st, ci, stream);
                Ok(())
            }
            None => Self::dispatch(st, stream, work, name, site),
        }
    }

    pub(super) fn validate(st: &State, work: &Work, name: &'static str, site: Site) -> R<()> {
        match work {
            Work::H2D { dst, src } => {
                let len = match src {
                    HostSrc::Pinned { len, .. } => *len,
                    HostSrc::Copied(v) => v.len(),
                };
                st.mem.locate(*dst, len, name, site).map(|_| ())
            }
            Work::D2H { src, len, .. } => st.mem.locate(*src, *len, name, site).map(|_| ()),
            Work::D2D { src, dst, len } => {
                st.mem.locate(*src, *len, name, site)?;
                st.mem.locate(*dst, *len, name, site).map(|_| ())
            }
            Work::Memset { dst, len, .. } => st.mem.locate(*dst, *len, name, site).map(|_| ()),
            Work::Collective(c) => {
                for (at, len) in c.ranges() {
                    if len > 0 {
                        st.mem.locate(at, len, name, site)?;
                    }
                }
                Ok(())
            }
            Work::Launch { .. } | Work::Graph(_) => Ok(()),
        }
    }

    /// Run `work`, which `stream` reached (the legacy stream for synchronous copies).
    pub(super) fn exec(
        st: &mut State,
        stream: u64,
        work: &Work,
        name: &'static str,
        site: Site,
    ) -> R<()> {
        if st.raised.is_some() {
            // The device stopped at a faulting kernel: nothing queued after it runs.
            return Ok(());
        }
        if st.exec_log.is_some() {
            let ran = Self::ran(st, work);
            st.log(|| Executed::Ran { stream, work: ran });
        }
        match work {
            Work::H2D { dst, src } => match src {
                HostSrc::Copied(v) => {
                    st.mem.write(*dst, v.len(), name, site)?.copy_from_slice(v);
                }
                HostSrc::Pinned { addr, len } => {
                    if st.mem.pinned_containing(*addr, *len).is_none() {
                        return Err(MockError::Invalid {
                            op: name,
                            site,
                            detail: format!(
                                "host source {addr:#x} (+{len}) is no longer a live pinned region"
                            ),
                        });
                    }
                    // SAFETY: the range lies inside a live pinned region owned by this mock
                    // (checked just above, under the state lock that guards frees).
                    let bytes = unsafe { std::slice::from_raw_parts(*addr as *const u8, *len) };
                    st.mem.write(*dst, *len, name, site)?.copy_from_slice(bytes);
                }
            },
            Work::D2H { src, dst, len } => {
                let bytes = st.mem.read(*src, *len, name, site)?;
                // SAFETY: `dst` is either the caller's live `&mut [u8]` (eager execution,
                // during the call that lent it) or, for a graph, a range that was inside a
                // pinned region at capture time; graph launches re-check it below.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), *dst as *mut u8, *len) };
            }
            Work::D2D { src, dst, len } => st.mem.copy_within(*src, *dst, *len, name, site)?,
            Work::Memset { dst, value, len } => st.mem.write(*dst, *len, name, site)?.fill(*value),
            Work::Launch {
                kernel,
                grid,
                block,
                args,
            } => match Self::run_kernel(st, *kernel, *grid, *block, args, site) {
                Err(e) if e.is_hang() => {
                    // The kernel never finishes: nothing after it runs, and whoever waits for
                    // it waits forever (`tick`).
                    st.raised = Some(e);
                }
                Err(e) if crate::backend::is_sticky(e.cuda_code()) => {
                    if st.async_faults {
                        // The launch went through; the fault shows at the next call that waits.
                        st.raised = Some(e);
                    } else {
                        st.dead = Some(e.clone());
                        return Err(e);
                    }
                }
                r => r?,
            },
            Work::Collective(c) => {
                let [(send, sb), (recv, rb)] = c.ranges();
                let mine = st.mem.read(send, sb, name, site)?.to_vec();
                let got = c.run(mine).map_err(|detail| MockError::Invalid {
                    op: c.name(),
                    site,
                    detail,
                })?;
                if rb > 0 {
                    st.mem.write(recv, rb, name, site)?.copy_from_slice(&got);
                }
            }
            Work::Graph(g) => {
                let Some(work) = st.graphs.get(g).cloned() else {
                    return Err(MockError::UnknownHandle {
                        op: name,
                        what: "graph",
                        id: *g,
                        site,
                    });
                };
                for w in &work {
                    if let Work::D2H { dst, len, .. } = w {
                        if st.mem.pinned_containing(*dst, *len).is_none() {
                            // A graph writing into pageable or freed host memory: the driver
                            // would scribble there; the mock refuses.
                            return Err(MockError::Invalid {
                                op: name,
                                site,
                                detail: format!(
                                    "graph {g} copies into host {dst:#x} (+{len}), which is not a live pinned region"
                                ),
                            });
                        }
                    }
                    Self::exec(st, stream, w, name, site)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn run_kernel(
        st: &mut State,
        k: usize,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Vec<u8>],
        site: Site,
    ) -> R<()> {
        let (info, body) = {
            let mk = &st.kernels[k];
            (mk.info.clone(), mk.body.clone().filter(|_| !st.skip_bodies))
        };
        let kname = || format!("{}::{}", info.module, info.name);
        for (i, p) in info.params.iter().enumerate() {
            if p.size != 8 {
                continue;
            }
            let v = u64::from_le_bytes(args[i][..8].try_into().expect("8"));
            let res = if p.access.is_pointer() {
                st.mem.check_pointer(v, "kernel pointer argument", site)
            } else if p.access == ParamAccess::Unknown && v != 0 {
                // An undeclared 8-byte value: only a pointer into freed memory is certainly wrong.
                match st.mem.check_pointer(v, "kernel pointer argument", site) {
                    Err(e @ MockError::UseAfterFree { .. }) => Err(e),
                    _ => Ok(()),
                }
            } else {
                Ok(())
            };
            res.map_err(|e| MockError::InKernel {
                kernel: format!("{} (argument {i})", kname()),
                site,
                cause: Box::new(e),
            })?;
        }
        if let Some(body) = body {
            let name = kname();
            let mut ctx = KernelCtx {
                mem: &mut st.mem,
                args,
                grid,
                block,
                site,
                name: &name,
            };
            body(&mut ctx).map_err(|e| MockError::InKernel {
                kernel: name.clone(),
                site,
                cause: Box::new(kernel::fault_to_mock(e, &name, site)),
            })?;
        }
        Ok(())
    }

    pub(super) fn kernel_index(
        st: &State,
        func: KernelHandle,
        op: &'static str,
        site: Site,
    ) -> R<usize> {
        let i = func.0.wrapping_sub(1) as usize;
        if i < st.kernels.len() {
            Ok(i)
        } else {
            Err(MockError::BadKernelHandle {
                op,
                site,
                handle: func.0,
            })
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_args(
        st: &mut State,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        stream: u64,
        args: Vec<Vec<u8>>,
        op: &'static str,
        site: Site,
    ) -> R<()> {
        let kernel = Self::kernel_index(st, func, op, site)?;
        Self::submit(
            st,
            CaptureOp::StreamWork,
            stream,
            Work::Launch {
                kernel,
                grid,
                block,
                args,
            },
            op,
            site,
        )
    }

    /// `work` as the execution log says it ran.
    fn ran(st: &State, work: &Work) -> Ran {
        match work {
            Work::Launch {
                kernel,
                grid,
                block,
                ..
            } => Ran::Launch {
                kernel: st.kernels.get(*kernel).map_or_else(
                    || format!("kernel #{kernel}"),
                    |k| format!("{}::{}", k.info.module, k.info.name),
                ),
                grid: *grid,
                block: *block,
            },
            Work::H2D { dst, src } => Ran::H2D {
                dst: *dst,
                len: match src {
                    HostSrc::Pinned { len, .. } => *len,
                    HostSrc::Copied(v) => v.len(),
                },
            },
            Work::D2H { src, len, .. } => Ran::D2H {
                src: *src,
                len: *len,
            },
            Work::D2D { src, dst, len } => Ran::D2D {
                src: *src,
                dst: *dst,
                len: *len,
            },
            Work::Memset { dst, value, len } => Ran::Memset {
                dst: *dst,
                value: *value,
                len: *len,
            },
            Work::Graph(g) => Ran::Graph { graph: *g },
            Work::Collective(_) => Ran::Collective,
        }
    }

    pub(super) fn sync_copy(st: &mut State, work: Work, name: &'static str, site: Site) -> R<()> {
        Self::judge(st, CaptureOp::SyncCopy, Some(LEGACY_STREAM), name, site)?;
        Self::exec(st, LEGACY_STREAM, &work, name, site)
    }
}
