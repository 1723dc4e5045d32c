//! Capture-rule probes: run the call pattern behind each row of the capture table on a real
//! backend and report what happened, so the table can be checked against the mock in CI and
//! against the driver on a GPU with the same code.

use super::{
    decide, CaptureContext, CaptureMode, CaptureOp, DevicePtr, GpuBackend, Relation, StreamKind,
    Verdict, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, LEGACY_STREAM,
};
use anyhow::Result;

/// What one probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The probed call: Ok, or the driver code it failed with.
    pub call: Result<(), u32>,
    /// `end_capture` on the capturing stream.
    pub end: Result<(), u32>,
    /// For device work: whether its effect was visible before the graph was launched (it ran
    /// eagerly) and after (the graph carried it). `None` for calls with no device effect.
    pub landed: Option<(bool, bool)>,
}

impl Outcome {
    /// One cell of the probe table: "call ok, end err 901, eager" (`-` for no device effect,
    /// `lost` for work that landed neither before nor after the graph).
    pub fn describe(&self) -> String {
        let r = |x: &Result<(), u32>| match x {
            Ok(()) => "ok".to_string(),
            Err(c) => format!("err {c}"),
        };
        let l = match self.landed {
            None => "-".to_string(),
            Some((true, _)) => "eager".to_string(),
            Some((false, true)) => "in graph".to_string(),
            Some((false, false)) => "lost".to_string(),
        };
        format!("call {}, end {}, {}", r(&self.call), r(&self.end), l)
    }
}

/// One probe: a table row's conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The call probed.
    pub op: CaptureOp,
    /// Where the probed call's stream stands against the capture.
    pub relation: Relation,
    /// The kind of stream the backend creates (and the capture runs on).
    pub kind: StreamKind,
    /// The capture's mode, set on the backend the probe runs on.
    pub mode: CaptureMode,
    /// Whether the probed call is made on the thread that began the capture.
    pub same_thread: bool,
}

impl Probe {
    /// The conditions `decide` judges this probe's call under.
    pub fn context(&self) -> CaptureContext {
        CaptureContext {
            relation: self.relation,
            kind: self.kind,
            mode: self.mode,
            same_thread: self.same_thread,
        }
    }

    /// What the table predicts.
    pub fn expected(&self) -> (&'static str, Outcome) {
        let rule = decide(self.op, self.context());
        let device_work = matches!(
            self.op,
            CaptureOp::StreamWork | CaptureOp::AsyncH2D | CaptureOp::SyncCopy
        );
        let landed = |eager: bool| device_work.then_some((eager, true));
        let o = match rule.verdict {
            Verdict::Captured | Verdict::Joins => Outcome {
                call: Ok(()),
                end: Ok(()),
                landed: device_work.then_some((false, true)),
            },
            Verdict::Eager => Outcome {
                call: Ok(()),
                end: Ok(()),
                landed: landed(true),
            },
            Verdict::Host => Outcome {
                call: Ok(()),
                end: Ok(()),
                landed: None,
            },
            Verdict::Fails { code, invalidates } => Outcome {
                call: Err(code),
                end: if invalidates {
                    Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
                } else {
                    Ok(())
                },
                landed: device_work.then_some((false, false)),
            },
        };
        (rule.id, o)
    }
}

/// Every probe that has a meaningful call pattern.
pub fn all_probes() -> Vec<Probe> {
    use CaptureOp as O;
    use Relation as R;
    let mut v = Vec::new();
    for mode in CaptureMode::ALL {
        for kind in StreamKind::ALL {
            let mut add = |op, relation, same_thread| {
                v.push(Probe {
                    op,
                    relation,
                    kind,
                    mode,
                    same_thread,
                })
            };
            for rel in [R::Capturing, R::Legacy, R::Other] {
                add(O::StreamWork, rel, true);
                add(O::AsyncH2D, rel, true);
                add(O::CopyThenWait, rel, true);
                add(O::StreamSync, rel, true);
                add(O::EventRecord, rel, true);
                add(O::WaitCapturedEvent, rel, true);
                add(O::WaitExternalEvent, rel, true);
                add(O::BeginCapture, rel, true);
            }
            add(O::SyncCopy, R::Legacy, true);
            add(O::EndCapture, R::Other, true);
            add(O::EndCapture, R::Legacy, true);
            add(O::SyncCapturedEvent, R::Capturing, true);
            add(O::SyncExternalEvent, R::Other, true);
            for same in [true, false] {
                add(O::DeviceAlloc, R::NoStream, same);
                add(O::DeviceFree, R::NoStream, same);
                add(O::PinnedHost, R::NoStream, same);
                add(O::HostOnly, R::NoStream, same);
            }
        }
    }
    v
}

const N: usize = 256;
const MARK: u8 = 0xAB;

/// Run `probe` on a fresh backend made by `make(mode, kind)`. `code` extracts the driver code
/// from a backend error.
pub fn run_probe(
    make: &dyn Fn(CaptureMode, StreamKind) -> Result<Box<dyn GpuBackend>>,
    code: &(dyn Fn(&anyhow::Error) -> u32 + Sync),
    p: Probe,
) -> Result<Outcome> {
    let gpu = make(p.mode, p.kind)?;
    run_pattern(gpu.as_ref(), code, p, true)
}

/// The call pattern of `p` on `g`. With `capture` false the same calls run eagerly, with
/// `stream_is_capturing(a)` standing where `begin_capture(a)` would be and again right after the
/// probed call, so an offline analysis of the recorded pattern knows what to judge.
pub fn run_pattern(
    g: &dyn GpuBackend,
    code: &(dyn Fn(&anyhow::Error) -> u32 + Sync),
    p: Probe,
    capture: bool,
) -> Result<Outcome> {
    let fx = Fixture::new(g)?;
    if capture {
        g.begin_capture(fx.a)?;
    } else {
        g.stream_is_capturing(fx.a);
    }
    let probed = probed_call(g, code, p, &fx)?;
    let call = probed.call;
    let outcome = if capture {
        end_capture(g, code, p, &fx, probed.forked, call)?
    } else {
        g.stream_is_capturing(fx.a);
        if p.op == CaptureOp::BeginCapture && call.is_ok() && fx.stream(p) == fx.a {
            // Eagerly, "beginning" on `a` really began a capture: end it.
            g.abort_capture_if_active(fx.a);
        }
        Outcome {
            call,
            end: Ok(()),
            landed: None,
        }
    };
    g.free_host_pinned(fx.pinned, N)?;
    release(
        g,
        &[fx.buf, fx.spare],
        p.op == CaptureOp::DeviceFree && call.is_ok(),
        &[fx.ext, fx.ev, fx.ev2],
    );
    give_back(g, probed.made, probed.made_host);
    Ok(outcome)
}

/// What every probe sets up first: streams `a` (captured) and `b`, a buffer and a spare, a
/// pinned region, an event recorded outside the capture and two for inside it.
struct Fixture {
    a: u64,
    b: u64,
    buf: DevicePtr,
    spare: DevicePtr,
    pinned: *mut u8,
    ext: u64,
    ev: u64,
    ev2: u64,
}

impl Fixture {
    fn new(g: &dyn GpuBackend) -> Result<Fixture> {
        let a = g.create_stream()?;
        let b = g.create_stream()?;
        let buf = g.alloc(N)?;
        let spare = g.alloc(N)?;
        g.memset(buf, 0, N)?;
        let pinned = g.alloc_host_pinned(N)?;
        let ext = g.create_event()?;
        let ev = g.create_event()?;
        let ev2 = g.create_event()?;
        g.record_event(ext, b)?;
        g.synchronize(b)?;
        Ok(Fixture {
            a,
            b,
            buf,
            spare,
            pinned,
            ext,
            ev,
            ev2,
        })
    }

    /// The stream the probed call goes to, by its relation to the capture.
    fn stream(&self, p: Probe) -> u64 {
        match p.relation {
            Relation::Capturing => self.a,
            Relation::Legacy => LEGACY_STREAM,
            Relation::Other | Relation::NoStream => self.b,
        }
    }
}

/// The probed call's result, and what it made or started that the pattern must undo.
struct Probed {
    call: Result<(), u32>,
    /// `b` waited on an event of the capture: it joined it and must be joined back.
    forked: bool,
    made: Option<DevicePtr>,
    made_host: Option<usize>,
}

/// The probed call, on this thread or another as `p` says.
fn probed_call(
    g: &dyn GpuBackend,
    code: &(dyn Fn(&anyhow::Error) -> u32 + Sync),
    p: Probe,
    fx: &Fixture,
) -> Result<Probed> {
    use CaptureOp as O;
    let (a, b, buf, spare, ev, ext) = (fx.a, fx.b, fx.buf, fx.spare, fx.ev, fx.ext);
    let stream = fx.stream(p);
    let src = vec![MARK; N];
    let run = |f: &(dyn Fn() -> Result<()> + Sync)| -> Result<(), u32> {
        if p.same_thread {
            f().map_err(|e| code(&e))
        } else {
            std::thread::scope(|s| {
                s.spawn(|| {
                    let _ = g.bind_to_thread();
                    f().map_err(|e| code(&e))
                })
                .join()
                .expect("probe thread panicked")
            })
        }
    };
    let made: parking_lot::Mutex<Option<DevicePtr>> = parking_lot::Mutex::new(None);
    let made_host: parking_lot::Mutex<Option<usize>> = parking_lot::Mutex::new(None);
    let mut forked = false;
    let call = match p.op {
        O::StreamWork => run(&|| g.memset_async(buf, MARK, N, stream)),
        O::AsyncH2D => run(&|| g.copy_h2d_async(&src, buf, stream)),
        O::SyncCopy => run(&|| g.copy_h2d(&src, buf)),
        O::CopyThenWait => run(&|| {
            let mut tmp = vec![0u8; N];
            g.copy_d2h_on_stream(buf, &mut tmp, stream)
        }),
        O::StreamSync => run(&|| g.synchronize(stream)),
        O::EventRecord => run(&|| g.record_event(ev, stream)),
        O::WaitCapturedEvent => {
            g.record_event(ev, a)?;
            let r = run(&|| g.stream_wait_event(stream, ev));
            forked = r.is_ok() && stream == b;
            r
        }
        O::WaitExternalEvent => run(&|| g.stream_wait_event(stream, ext)),
        O::SyncCapturedEvent => {
            g.record_event(ev, a)?;
            run(&|| g.event_synchronize(ev))
        }
        O::SyncExternalEvent => run(&|| g.event_synchronize(ext)),
        // What these make is kept and given back after the capture (freeing it inside would
        // be one more call for the capture to judge).
        O::DeviceAlloc => run(&|| g.alloc(N).map(|p| *made.lock() = Some(p))),
        O::DeviceFree => run(&|| g.free(spare)),
        O::PinnedHost => run(&|| {
            g.alloc_host_pinned(64)
                .map(|h| *made_host.lock() = Some(h as usize))
        }),
        O::BeginCapture => {
            let r = run(&|| g.begin_capture(stream));
            if r.is_ok() && stream == b {
                // A second capture started: drop it without instantiating a graph (that would
                // itself be a prohibited call while `a` captures in a strict mode).
                g.abort_capture_if_active(b);
            }
            r
        }
        O::EndCapture => run(&|| g.end_capture(stream).map(|_| ())),
        O::HostOnly => run(&|| g.create_event().map(|_| ())),
    };
    let (made, made_host) = (*made.lock(), *made_host.lock());
    Ok(Probed {
        call,
        forked,
        made,
        made_host,
    })
}

/// End the capture on `a` and, for device work, see where the probed call's effect landed: before the
/// graph's launch (it ran eagerly), after it (the graph carried it), or neither.
fn end_capture(
    g: &dyn GpuBackend,
    code: &(dyn Fn(&anyhow::Error) -> u32 + Sync),
    p: Probe,
    fx: &Fixture,
    forked: bool,
    call: Result<(), u32>,
) -> Result<Outcome> {
    use CaptureOp as O;
    let (a, b, buf) = (fx.a, fx.b, fx.buf);
    if forked {
        // Join the forked stream back so the capture can end cleanly.
        g.record_event(fx.ev2, b)?;
        g.stream_wait_event(a, fx.ev2)?;
    }
    let end = g.end_capture(a);
    g.abort_capture_if_active(a);
    g.abort_capture_if_active(b);
    let device_work = matches!(p.op, O::StreamWork | O::AsyncH2D | O::SyncCopy);
    let mut host = vec![0u8; N];
    let mut landed = None;
    let end = match end {
        Ok(graph) => {
            if device_work {
                g.synchronize(b)?;
                g.copy_d2h(buf, &mut host)?;
                let before = host.iter().all(|&x| x == MARK);
                g.memset(buf, 0, N)?;
                g.launch_graph(graph, a)?;
                g.synchronize(a)?;
                g.copy_d2h(buf, &mut host)?;
                let after = host.iter().all(|&x| x == MARK);
                landed = Some((before, after || before));
            }
            g.destroy_graph(graph)?;
            Ok(())
        }
        Err(e) => {
            if device_work {
                g.synchronize(b)?;
                g.copy_d2h(buf, &mut host)?;
                let before = host.iter().all(|&x| x == MARK);
                landed = Some((before, before));
            }
            Err(code(&e))
        }
    };
    Ok(Outcome { call, end, landed })
}

/// Give back what the probed call itself made (an allocation, a pinned region).
fn give_back(g: &dyn GpuBackend, dev: Option<DevicePtr>, host: Option<usize>) {
    if let Some(p) = dev {
        let _ = g.free(p);
    }
    if let Some(h) = host {
        let _ = g.free_host_pinned(h as *mut u8, 64);
    }
}

/// Give back what a probe made, so a table of probes leaves nothing allocated: its buffers
/// (`bufs[1]` is the spare a free probe may already have freed) and its events. Errors are
/// ignored: a probe that broke its backend's state has said so in its outcome.
fn release(g: &dyn GpuBackend, bufs: &[DevicePtr; 2], spare_freed: bool, events: &[u64]) {
    let _ = g.free(bufs[0]);
    if !spare_freed {
        let _ = g.free(bufs[1]);
    }
    for e in events {
        let _ = g.destroy_event(*e);
    }
}

/// One probe's result beside the table's prediction.
#[derive(Clone, Debug)]
pub struct ProbeRow {
    /// The conditions run.
    pub probe: Probe,
    /// The id of the table row that decides them.
    pub rule: &'static str,
    /// What that row predicts.
    pub expected: Outcome,
    /// What the backend did, or why the probe itself could not run.
    pub observed: Result<Outcome, String>,
}

impl ProbeRow {
    /// The probe ran and the backend did what the table says.
    pub fn agrees(&self) -> bool {
        self.observed.as_ref().is_ok_and(|o| *o == self.expected)
    }
}

/// Run every probe on backends made by `make`.
pub fn run_all(
    make: &dyn Fn(CaptureMode, StreamKind) -> Result<Box<dyn GpuBackend>>,
    code: &(dyn Fn(&anyhow::Error) -> u32 + Sync),
) -> Vec<ProbeRow> {
    all_probes()
        .into_iter()
        .map(|p| {
            let (rule, expected) = p.expected();
            ProbeRow {
                probe: p,
                rule,
                expected,
                observed: run_probe(make, code, p).map_err(|e| format!("{e:#}")),
            }
        })
        .collect()
}

/// The rows as a Markdown table, disagreements marked.
pub fn render_rows(rows: &[ProbeRow]) -> String {
    let mut s = String::from(
        "| op | stream | capturing stream | mode | thread | rule | table says | backend did | |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let p = &r.probe;
        s.push_str(&format!(
            "| {:?} | {:?} | {} | {} | {} | {} | {} | {} | {} |\n",
            p.op,
            p.relation,
            p.kind.name(),
            p.mode.name(),
            if p.same_thread { "same" } else { "other" },
            r.rule,
            r.expected.describe(),
            match &r.observed {
                Ok(o) => o.describe(),
                Err(e) => format!("probe failed: {e}"),
            },
            if r.agrees() { "ok" } else { "DIFFERS" }
        ));
    }
    let bad = rows.iter().filter(|r| !r.agrees()).count();
    s.push_str(&format!(
        "\n{} probes, {} disagree with the table\n",
        rows.len(),
        bad
    ));
    s
}
