//! What a sticky fault was, after the fact.
//!
//! The driver reports an illegal address at the first call that waits, with a code and
//! nothing else: not the kernel, not the address. Once it is reported the context is dead, so
//! nothing on the device can be read any more (red zones included). What the backend can still
//! say is what it knows on the host: which launches were in flight (issued since their stream
//! was last synchronised), from which sites, and which allocations their pointer arguments lie
//! in. That is the fault probe. It names the kernel outright when only one launch was in flight,
//! and otherwise gives the candidates a replay pins down (`gputape replay` syncs after every
//! launch of the fault's window).

use crate::backend::{site_string, Site};
use std::collections::VecDeque;

/// Launches kept per backend; older ones fall off (a step that runs longer than this between
/// syncs keeps its latest launches, the ones nearest the report).
const KEPT: usize = 256;

/// One launch the probe keeps until its stream is synchronised.
#[derive(Clone, Debug)]
pub(crate) struct Launched {
    /// The kernel's handle, or the graph's for a graph launch.
    pub kernel: u64,
    /// A graph launch: its nodes are in flight, none of them named.
    pub graph: bool,
    pub stream: u64,
    pub site: Site,
    /// Pointer-sized argument values (the first eight), resolved to allocations only when a
    /// fault asks.
    pub words: smallvec::SmallVec<[u64; 8]>,
}

/// The launches in flight, oldest first.
#[derive(Default)]
pub(crate) struct InFlight {
    launches: VecDeque<Launched>,
    /// Launches that fell off the front since the last sync.
    dropped: usize,
}

impl InFlight {
    pub fn push(&mut self, l: Launched) {
        if self.launches.len() == KEPT {
            self.launches.pop_front();
            self.dropped += 1;
        }
        self.launches.push_back(l);
    }

    /// `stream` was synchronised: its launches finished cleanly.
    pub fn retire_stream(&mut self, stream: u64) {
        self.launches.retain(|l| l.stream != stream);
        if self.launches.is_empty() {
            self.dropped = 0;
        }
    }

    /// Everything issued so far finished (a synchronous copy on the legacy stream, which
    /// blocking streams wait for).
    pub fn retire_all(&mut self) {
        self.launches.clear();
        self.dropped = 0;
    }

    pub fn snapshot(&self) -> (Vec<Launched>, usize) {
        (self.launches.iter().cloned().collect(), self.dropped)
    }
}

/// An allocation a candidate launch's argument lies in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeAlloc {
    pub base: u64,
    pub bytes: usize,
    /// Where it was allocated (`file:line:col`).
    pub site: String,
}

/// A launch that may have raised the fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `module::name`, the handle when the registry does not know it, or `a graph` for a
    /// graph launch (its nodes are in flight, unnamed).
    pub kernel: String,
    pub graph: bool,
    /// Where it was launched (`file:line:col`).
    pub site: String,
    pub stream: u64,
    /// The allocations its pointer arguments lie in.
    pub allocs: Vec<ProbeAlloc>,
}

/// What the backend knows of a sticky fault: its code, and the launches that may have raised
/// it (in issue order; `dropped` older ones no longer kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultProbe {
    pub code: u32,
    pub candidates: Vec<Candidate>,
    pub dropped: usize,
}

impl FaultProbe {
    /// The kernel, when one launch alone was in flight.
    pub fn culprit(&self) -> Option<&Candidate> {
        match (&self.candidates[..], self.dropped) {
            ([one], 0) if !one.graph => Some(one),
            _ => None,
        }
    }

    /// One line for the error message: the culprit, or how many launches and of which kernels
    /// (the last few by name and site).
    pub fn summary(&self) -> String {
        if let Some(c) = self.culprit() {
            let allocs: Vec<String> = c
                .allocs
                .iter()
                .map(|a| format!("{} bytes from {}", a.bytes, a.site))
                .collect();
            return format!(
                "the one launch in flight since its stream's last sync: {} at {}{}",
                c.kernel,
                c.site,
                if allocs.is_empty() {
                    String::new()
                } else {
                    format!(", on {}", allocs.join("; "))
                }
            );
        }
        if self.candidates.is_empty() {
            return "no launch was in flight (the fault came from work issued before the last sync, or from a copy)".into();
        }
        let n = self.candidates.len() + self.dropped;
        let last: Vec<String> = self
            .candidates
            .iter()
            .rev()
            .take(3)
            .map(|c| format!("{} at {}", c.kernel, c.site))
            .collect();
        format!(
            "{n} launches in flight since their streams' last syncs, any of which may have raised it (latest: {}); `gputape replay` of a recording pins it to one",
            last.join(", ")
        )
    }
}

/// Resolve the in-flight launches into candidates.
pub(crate) fn probe(
    code: u32,
    (launches, dropped): (Vec<Launched>, usize),
    kernel_name: impl Fn(u64) -> Option<String>,
    alloc_of: impl Fn(u64) -> Option<(u64, usize, Site)>,
) -> FaultProbe {
    let candidates = launches
        .into_iter()
        .map(|l| {
            let mut allocs: Vec<ProbeAlloc> = Vec::new();
            for w in &l.words {
                if let Some((base, bytes, site)) = alloc_of(*w) {
                    if !allocs.iter().any(|a| a.base == base) {
                        allocs.push(ProbeAlloc {
                            base,
                            bytes,
                            site: site_string(site),
                        });
                    }
                }
            }
            Candidate {
                kernel: if l.graph {
                    format!("a graph ({:#x})", l.kernel)
                } else {
                    kernel_name(l.kernel).unwrap_or_else(|| format!("kernel {:#x}", l.kernel))
                },
                graph: l.graph,
                site: site_string(l.site),
                stream: l.stream,
                allocs,
            }
        })
        .collect();
    FaultProbe {
        code,
        candidates,
        dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launched(kernel: u64, stream: u64, words: &[u64]) -> Launched {
        Launched {
            kernel,
            graph: false,
            stream,
            site: std::panic::Location::caller(),
            words: words.iter().copied().collect(),
        }
    }

    #[test]
    fn one_launch_in_flight_is_named_with_its_allocations() {
        let mut f = InFlight::default();
        f.push(launched(1, 7, &[0x1000]));
        f.push(launched(2, 8, &[0x2010, 0x9999]));
        f.retire_stream(7);
        let here = std::panic::Location::caller();
        let p = probe(
            700,
            f.snapshot(),
            |k| Some(format!("m::k{k}")),
            |w| (0x2000..0x2100).contains(&w).then_some((0x2000, 256, here)),
        );
        let c = p.culprit().expect("one in flight");
        assert_eq!(c.kernel, "m::k2");
        assert_eq!(c.allocs.len(), 1);
        assert_eq!(c.allocs[0].bytes, 256);
        assert!(
            p.summary().contains("m::k2 at src/cuda/fault_probe.rs:"),
            "{}",
            p.summary()
        );
        // Two in flight: candidates, no culprit.
        f.push(launched(3, 8, &[]));
        let p = probe(700, f.snapshot(), |_| None, |_| None);
        assert!(p.culprit().is_none());
        assert!(
            p.summary().starts_with("2 launches in flight"),
            "{}",
            p.summary()
        );
        f.retire_all();
        let p = probe(700, f.snapshot(), |_| None, |_| None);
        assert!(p.summary().starts_with("no launch was in flight"));
        // A graph alone in flight: its nodes are unnamed, so no culprit.
        f.push(Launched {
            graph: true,
            ..launched(9, 1, &[])
        });
        let p = probe(700, f.snapshot(), |_| None, |_| None);
        assert!(p.culprit().is_none(), "{p:?}");
    }

    #[test]
    fn the_oldest_fall_off_and_are_counted() {
        let mut f = InFlight::default();
        for i in 0..KEPT as u64 + 5 {
            f.push(launched(i, 1, &[]));
        }
        let (kept, dropped) = f.snapshot();
        assert_eq!((kept.len(), dropped), (KEPT, 5));
        assert_eq!(kept[0].kernel, 5);
    }
}
