//! `gputape inspect`: a buffer's bytes after any call, by replaying up to it.
//!
//! The replay runs the calls in recorded order up to and including call `at` (graphs launched
//! as the recording launched them), waits for every stream, and reads the asked buffers back.
//! What the bytes mean (their element type) is the caller's to say or `elem_of` to guess
//! from the kernels that use the buffer.

use super::state::sync_all;
use super::{ModuleLoader, Outcome, ReplayError, Replayer};
use crate::backend::GpuBackend;
use crate::trace::*;

impl Replayer<'_> {
    /// Replay up to and including call `at`, then read back each of `bufs` whole.
    pub fn inspect(
        &self,
        gpu: &dyn GpuBackend,
        at: u64,
        bufs: &[BufferId],
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<Vec<(BufferId, Vec<u8>)>, ReplayError> {
        let mut guard = self.set_up(gpu, loader)?;
        let st = &mut guard.st;
        let stop = |seq: u64, e: String| ReplayError::Unsupported {
            seq,
            site: self
                .by_seq
                .get(&seq)
                .map(|c| self.trace.site(c.site))
                .unwrap_or_default(),
            msg: e,
        };
        for c in self.trace.calls.iter().take_while(|c| c.seq <= at) {
            if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                if !matches!(c.ret, Some(Err(_))) {
                    return Err(stop(
                        c.seq,
                        format!("the replay failed before reaching call #{at}: {e:#}"),
                    ));
                }
            }
        }
        if let Some(o) = st.opaque.iter().next() {
            tracing::warn!(
                "inspect: kernel {} cannot run on this backend; buffers it writes keep older contents",
                self.trace.kernel_name(*o)
            );
        }
        sync_all(gpu, st).map_err(|e| stop(at, format!("waiting for the streams: {e:#}")))?;
        let mut out = Vec::new();
        for b in bufs {
            let Some((p, bytes)) = st.bufs.get(b).copied() else {
                return Err(stop(
                    at,
                    format!("{b} is not live after call #{at} (not yet allocated, or freed)"),
                ));
            };
            if bytes > self.max_host_bytes {
                return Err(ReplayError::TooLarge {
                    seq: at,
                    what: "inspect",
                    bytes,
                    limit: self.max_host_bytes,
                });
            }
            let mut host = vec![0u8; bytes as usize];
            gpu.copy_d2h(p, &mut host)
                .map_err(|e| stop(at, format!("reading {b} back: {e:#}")))?;
            out.push((*b, host));
        }
        Ok(out)
    }
}
