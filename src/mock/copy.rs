//! Copies and memsets, for the mock's `GpuBackend` methods (the trait impl in `backend.rs`
//! calls each `NAME_impl` here): synchronous ones run through `sync_copy`, stream-ordered ones
//! are submitted as `Work` (into a capture when their stream captures), every range checked
//! against its allocation.

use super::*;

impl MockGpuBackend {
    #[track_caller]
    pub(super) fn copy_h2d_impl(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        // On the legacy stream: after every blocking stream's work (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::Blocking))?;
        mock_try!(Self::tick(&mut st, CallKind::CopyH2D, site))?;
        let work = Work::H2D {
            dst: dst.0,
            src: HostSrc::Copied(src.to_vec()),
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_h2d", site))
    }

    #[track_caller]
    pub(super) fn copy_d2h_impl(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        // On the legacy stream: after every blocking stream's work (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::Blocking))?;
        mock_try!(Self::tick(&mut st, CallKind::CopyD2H, site))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_d2h", site))
    }

    #[track_caller]
    pub(super) fn copy_d2d_impl(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        // On the legacy stream: after every blocking stream's work (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::Blocking))?;
        mock_try!(Self::tick(&mut st, CallKind::CopyD2D, site))?;
        let work = Work::D2D {
            src: src.0,
            dst: dst.0,
            len: bytes,
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_d2d", site))
    }

    #[track_caller]
    pub(super) fn memset_impl(
        &self,
        ptr: DevicePtr,
        value: u8,
        bytes: usize,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        // On the legacy stream: after every blocking stream's work (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::Blocking))?;
        mock_try!(Self::tick(&mut st, CallKind::Memset, site))?;
        let work = Work::Memset {
            dst: ptr.0,
            value,
            len: bytes,
        };
        mock_try!(Self::sync_copy(&mut st, work, "memset", site))
    }

    #[track_caller]
    pub(super) fn memset_async_impl(
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
    pub(super) fn copy_d2h_on_stream_impl(
        &self,
        src: DevicePtr,
        dst: &mut [u8],
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::chaos_wait(&mut st, Until::Stream(stream)))?;
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
        mock_try!(Self::exec(
            &mut st,
            stream,
            &work,
            "copy_d2h_on_stream",
            site
        ))
    }

    #[track_caller]
    pub(super) fn copy_h2d_async_impl(
        &self,
        src: &[u8],
        dst: DevicePtr,
        stream: u64,
    ) -> anyhow::Result<()> {
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
    pub(super) fn copy_h2d_async_retained_impl(
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
    pub(super) fn copy_d2h_async_impl(
        &self,
        src: DevicePtr,
        dst: &mut [u8],
        stream: u64,
    ) -> anyhow::Result<()> {
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
    pub(super) fn copy_d2d_async_impl(
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
    #[allow(clippy::too_many_arguments)] // the trait method's own arguments, one for one
    pub(super) fn copy_d2d_2d_async_impl(
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
                None => mock_try!(Self::dispatch(
                    &mut st,
                    stream,
                    w,
                    "copy_d2d_2d_async",
                    site
                ))?,
            }
        }
        if let Some(ci) = into {
            Self::note_capture_op(&mut st, ci, stream);
        }
        Ok(())
    }
}
