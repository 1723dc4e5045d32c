//! Recorded faults met again, in a room of its own because reproducing a fault is its own
//! question: which launch raised it (`culprit`, `band_culprit`), red-zone scans after
//! launches inside a fault window and the guard bands they found (`Bands`), and the report of
//! a recorded fault set against the replay's (`fault`).

use super::{Culprit, FaultReport, ReplayReport, Replayer, State};
use crate::backend::{GpuBackend, ParamAccess};
use crate::trace::*;

pub(super) fn err_code(e: &anyhow::Error) -> Option<u32> {
    crate::driver_code(e)
}

impl Replayer<'_> {
    /// The launch `seq` as the one that raised a fault (`graph_launch`: the call that launched
    /// the graph it was captured into), with what the backend's error says of the buffer.
    pub(super) fn culprit(
        &self,
        st: &State,
        seq: u64,
        graph_launch: Option<&CallRecord>,
        e: Option<&anyhow::Error>,
    ) -> Option<Culprit> {
        let c = self.by_seq.get(&seq)?;
        let (kid, args) = c.call.launch()?;
        let info = self.trace.kernels.get(&kid);
        let in_error = e.and_then(|e| self.buffer_in_error(st, e));
        // The buffers the kernel may write, as candidates, only when the backend did not say.
        let writes = args
            .iter()
            .filter(|_| in_error.is_none())
            .enumerate()
            .filter_map(|(i, a)| match a.device_addr() {
                Some(DevAddr::Buf { buf, .. }) => {
                    let access = match a {
                        Arg::TensorMap(_) => ParamAccess::ReadWrite,
                        _ => info
                            .and_then(|k| k.params.get(i))
                            .map_or(ParamAccess::Unknown, |p| p.access),
                    };
                    matches!(
                        access,
                        ParamAccess::Write | ParamAccess::ReadWrite | ParamAccess::Unknown
                    )
                    .then(|| self.describe_buffer(*buf))
                }
                _ => None,
            })
            .collect();
        let graph = graph_launch.map(|g| match &g.call {
            Call::LaunchGraph { graph, .. } => format!("{graph} (launched by call #{})", g.seq),
            _ => format!("the graph launched by call #{}", g.seq),
        });
        Some(Culprit {
            seq,
            kernel: self.trace.kernel_name(kid),
            site: self.trace.site(c.site),
            graph,
            past_end: in_error.as_ref().map(|(_, n)| *n),
            buffer: in_error.map(|(b, _)| b),
            writes,
            access: e
                .and_then(crate::backend::device_error)
                .and_then(|d| d.access.as_deref().map(str::to_string)),
        })
    }

    /// The launch after which a scan first found a guard band, with the band's buffer and how
    /// far past its end the band was written.
    pub(super) fn band_culprit(&self, st: &State, bands: &Bands) -> Option<Culprit> {
        let (seq, band) = bands.first?;
        let mut c = self.culprit(st, seq, None, None)?;
        if let Some((base, last)) = band {
            if let Some((id, _)) = st.bufs.iter().find(|(_, (p, _))| p.0 == base) {
                c.buffer = Some(self.describe_buffer(*id));
                c.past_end = Some(last as u64 + 1);
                c.writes.clear();
            }
        }
        Some(c)
    }

    /// A red-zone scan after the launch `seq`; hits are kept in the report (first loop).
    pub(super) fn scan_after(
        &self,
        gpu: &dyn GpuBackend,
        seq: u64,
        lp: usize,
        scanned_since: &mut Bands,
        report: &mut ReplayReport,
    ) {
        if let Ok(n) = gpu.scan_redzones() {
            if n > 0 {
                let hits = gpu.redzone_hits();
                if scanned_since.first.is_none() {
                    scanned_since.first = Some((seq, hits.first().map(|h| (h.base.0, h.last))));
                }
                scanned_since.add(n, &hits);
            }
            if n > 0 && lp == 0 {
                report.redzone_hits.push((seq, n as u64));
            }
        }
    }

    pub(super) fn fault(
        &self,
        c: &CallRecord,
        recorded: Option<&ErrorRec>,
        replayed: Option<&anyhow::Error>,
    ) -> FaultReport {
        let replayed_code = replayed.and_then(err_code);
        let recorded_code = recorded.and_then(|r| r.code);
        FaultReport {
            seq: c.seq,
            site: self.trace.site(c.site),
            call: c.call.kind().name().to_string(),
            kernel: c.call.launch().map(|(k, _)| self.trace.kernel_name(k)),
            recorded: match (recorded, &c.ret) {
                (Some(r), _) => match r.code {
                    Some(code) => format!("{} ({code})", crate::backend::cuda_error_name(code)),
                    None => r.message.clone(),
                },
                (None, None) => "never returned (the process died in this call)".into(),
                (None, Some(_)) => "success".into(),
            },
            recorded_code,
            replayed: replayed.map(|e| match err_code(e) {
                Some(code) => format!("{} ({code})", crate::backend::cuda_error_name(code)),
                None => format!("{e:#}"),
            }),
            replayed_code,
            reproduced: match (recorded, replayed) {
                (Some(r), Some(_)) => match (r.code, replayed_code) {
                    (None, _) => true,
                    (Some(a), Some(b)) => crate::backend::same_fault(a, b),
                    (Some(_), None) => false,
                },
                (None, Some(_)) => c.ret.is_none(),
                _ => false,
            },
            observed_at: None,
            window: None,
            raised_by: None,
        }
    }
}

/// The guard bands found written since the last recorded scan, as a set: a scan refills what
/// it finds, so an overrun repeated by a later launch dirties the same band again, and that is
/// still one violation.
#[derive(Default)]
pub(super) struct Bands {
    /// (allocation base, first byte past its end).
    set: std::collections::BTreeSet<(u64, usize)>,
    /// Hits from a backend that counts them without saying where.
    unplaced: usize,
    /// The first launch after which a scan found a band, and the band (base, last changed
    /// byte past the end).
    pub(super) first: Option<(u64, Option<(u64, usize)>)>,
}

impl Bands {
    pub(super) fn add(&mut self, n: usize, hits: &[crate::backend::RedzoneHit]) {
        if hits.is_empty() {
            self.unplaced += n;
        }
        self.set.extend(hits.iter().map(|h| (h.base.0, h.first)));
    }

    pub(super) fn len(&self) -> usize {
        self.set.len() + self.unplaced
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::Bands;
    use crate::backend::{DevicePtr, RedzoneHit};

    /// A scan refills what it finds: the same band dirtied again by a later launch is still
    /// one violation, two buffers' bands are two.
    #[test]
    fn red_zone_hits_count_as_a_set_of_bands() {
        let hit = |base, last| RedzoneHit {
            base: DevicePtr(base),
            first: 0,
            last,
        };
        let mut b = Bands::default();
        b.add(1, &[hit(0x1000, 63)]);
        b.add(1, &[hit(0x1000, 63)]);
        assert_eq!(b.len(), 1);
        b.add(1, &[hit(0x2000, 3)]);
        assert_eq!(b.len(), 2);
        // A backend that only counts: each hit counts.
        b.add(2, &[]);
        assert_eq!(b.len(), 4);
    }
}
