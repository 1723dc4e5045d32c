//! Lifetime problems the trace shows: buffers never freed, used after their free, or freed
//! while work that uses them may still be pending.

use super::*;

/// A lifetime problem: a leak, a use after free, or a free racing with pending work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lifetime {
    pub kind: &'static str,
    pub buffer: String,
    pub seq: u64,
    pub site: String,
    pub detail: String,
}

impl Lifetime {
    /// A leak or a use after free: not memory a program that frees nothing holds to its end.
    pub fn is_problem(&self) -> bool {
        self.kind != HELD
    }
}

/// `Lifetime::kind` of a buffer a program that frees nothing holds to the end.
pub const HELD: &str = "held-until-exit";

pub fn lifetimes(t: &Trace, g: &DepGraph, range: (u64, u64)) -> Vec<Lifetime> {
    let mut out = Vec::new();
    let mut live: BTreeMap<BufferId, (u64, String)> = BTreeMap::new();
    let mut freed_at: BTreeMap<BufferId, String> = BTreeMap::new();
    let mut last_use: HashMap<BufferId, NodeIndex> = HashMap::new();
    for (i, c) in t.calls.iter().enumerate() {
        if c.seq < range.0 || c.seq >= range.1 {
            continue;
        }
        let site = t.site(c.site);
        match (&c.call, &c.ret) {
            (Call::Alloc { .. } | Call::AllocManaged { .. }, Some(Ok(Value::Buffer(b)))) => {
                live.insert(*b, (c.seq, site.clone()));
            }
            (
                Call::Free {
                    ptr: DevAddr::Buf { buf, .. },
                },
                Some(Ok(_)),
            ) => {
                live.remove(buf);
                freed_at.insert(*buf, site.clone());
                if let (Some(u), Some(f)) = (last_use.get(buf), g.node_of_call(i)) {
                    if !g.happens_before(*u, f) {
                        let uc = &t.calls[g.graph[*u].call];
                        out.push(Lifetime {
                            kind: "free-while-pending",
                            buffer: buf.to_string(),
                            seq: c.seq,
                            site: site.clone(),
                            detail: format!(
                                "work from #{} {} ({}) on another stream may still use it",
                                uc.seq,
                                uc.call.kind().name(),
                                t.site(uc.site)
                            ),
                        });
                    }
                }
            }
            _ => {}
        }
        let acc = accesses(t, &c.call);
        for a in &acc {
            if let Some(n) = g.node_of_call(i) {
                last_use.insert(a.buf, n);
            }
        }
        let mut stale = |buf: &BufferId| {
            out.push(Lifetime {
                kind: "use-after-free",
                buffer: buf.to_string(),
                seq: c.seq,
                site: site.clone(),
                detail: format!(
                    "{} uses it after it was freed{}",
                    c.call.kind().name(),
                    freed_at
                        .get(buf)
                        .map(|s| format!(" at {s}"))
                        .unwrap_or_default()
                ),
            })
        };
        if let Call::Free {
            ptr: DevAddr::Freed { buf, .. },
        } = &c.call
        {
            stale(buf);
        }
        let mut seen = BTreeSet::new();
        for a in acc.iter().filter(|a| a.freed) {
            if seen.insert(a.buf) {
                stale(&a.buf);
            }
        }
    }
    // A program that frees nothing it allocated, and ran without a failure, keeps its memory
    // on purpose, as a caching allocator (PyTorch's) keeps its segments until exit: what it
    // holds at the end is no leak. Where the program does free, or failed on the way (and so
    // may have skipped its frees), what it never freed is. A flight dump ends where it was
    // taken, not where the program would have freed: nothing live then is a leak.
    let frees = t.calls.iter().any(|c| {
        let freed = matches!(
            c.call,
            Call::Free {
                ptr: DevAddr::Buf { .. }
            }
        );
        let failed = matches!(c.ret, Some(Err(_)));
        (freed || failed) && c.seq >= range.0 && c.seq < range.1
    });
    let dumped = t.dump.is_some();
    for (b, (seq, site)) in live {
        let bytes = t.buffer_size(b).unwrap_or(0);
        let (kind, detail) = if dumped {
            (
                HELD,
                format!("live when the dump was taken ({bytes} bytes): the program had not ended"),
            )
        } else if frees {
            (
                "leak",
                format!("allocated in the trace and never freed ({bytes} bytes)"),
            )
        } else {
            (
                HELD,
                format!(
                    "allocated in the trace and held to its end ({bytes} bytes); the program \
                     frees nothing it allocates, as a caching allocator keeps its memory: no leak"
                ),
            )
        };
        out.push(Lifetime {
            kind,
            buffer: b.to_string(),
            seq,
            site,
            detail,
        });
    }
    out
}
