//! A trace as a standalone program (`gputape export --program DIR`): one C source file (valid
//! C++ too) that makes the trace's driver calls in order through the CUDA driver API alone,
//! its data beside it, and a build line. What a kernel's owner wants in a bug report: no
//! gputape, no Python, no framework; `cc repro.c -lcuda` and run.
//!
//! The program loads each module image the trace holds (`cuModuleLoadData`: fatbin, cubin or
//! PTX, as recorded), allocates each buffer, uploads what the recording uploaded, launches
//! each kernel with its recorded parameters (every device address rewritten to where that
//! buffer is now: a pointer past a buffer's end stays the same distance past it), and checks
//! as it goes: each call's status against the recorded one, each read back against the
//! recorded bytes. It ends with a verdict: the recorded fault reproduced (the first failed
//! call failed the same way), or the run as recorded, or the first call that was not, and
//! exits 0 or 1 accordingly.
//!
//! A call the program cannot make the same way (one kept by name only, a collective, a tensor
//! map, a cluster launch, a kernel compiled by the mock) refuses the export, naming the call
//! and why: a program that silently skips one would reproduce something else.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::trace::{
    Arg, BlobId, BufferId, Call, CallRecord, DevAddr, KernelId, LaunchHead, StreamRef, Trace, Value,
};

mod call;

/// Why a trace could not be written as a program.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// A call the driver API program cannot make as recorded.
    #[error("call #{seq} ({what}) cannot be written as a driver call: {why}")]
    Unsupported { seq: u64, what: String, why: String },
    /// A module whose code the trace does not hold in a form the driver loads.
    #[error("module {module} has no image or PTX in the trace ({why}): its kernels cannot be loaded without gputape")]
    NoImage { module: String, why: String },
    /// A blob the program needs is missing or damaged.
    #[error("blob {blob} (needed by {what}) is not in the trace")]
    MissingBlob { blob: BlobId, what: String },
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    /// Writing the program's files failed.
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What was written.
#[derive(Debug, serde::Serialize)]
pub struct Written {
    /// The C source.
    pub source: PathBuf,
    /// The data directory (module images, uploads, expected read backs).
    pub data: PathBuf,
    /// The trace's calls the program makes.
    pub calls: usize,
    /// The trace's calls it leaves out because they change nothing on the device (queries,
    /// step marks): a program makes no such call.
    pub skipped: usize,
    /// Lines of C.
    pub lines: usize,
    /// Files in the data directory and their bytes.
    pub data_files: usize,
    pub data_bytes: u64,
    /// The command that builds it.
    pub build: String,
}

/// Writes the program for `t` into `dir`: `repro.c`, `build.sh`, `data/`.
pub fn write_program(t: &Trace, dir: &Path, origin: &str) -> Result<Written, ProgramError> {
    let mut g = Gen::new(t);
    g.plan()?;
    let body = g.body()?;
    let data = dir.join("data");
    let io = |path: &Path, source| ProgramError::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(&data).map_err(|e| io(&data, e))?;
    let mut data_bytes = 0u64;
    for (name, blob) in &g.files {
        let bytes = g.bytes(*blob, name)?;
        data_bytes += bytes.len() as u64;
        let p = data.join(name);
        std::fs::write(&p, bytes).map_err(|e| io(&p, e))?;
    }
    for (name, text) in &g.ptx {
        data_bytes += text.len() as u64;
        let p = data.join(name);
        std::fs::write(&p, text).map_err(|e| io(&p, e))?;
    }
    let source = head(t, origin, &g) + &body;
    let src = dir.join("repro.c");
    std::fs::write(&src, &source).map_err(|e| io(&src, e))?;
    let build = "cc -O1 -o repro repro.c -lcuda".to_string();
    let script = format!(
        "#!/bin/sh\n# Builds the repro: any C or C++ compiler and the CUDA driver (libcuda.so; \
         from the toolkit's lib64/stubs where no driver is installed).\ncd \"$(dirname \"$0\")\" \
         && {build} \"$@\"\n"
    );
    let sh = dir.join("build.sh");
    std::fs::write(&sh, script).map_err(|e| io(&sh, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755));
    }
    Ok(Written {
        source: src,
        data,
        calls: g.made,
        skipped: g.skipped,
        lines: source.lines().count(),
        data_files: g.files.len() + g.ptx.len(),
        data_bytes,
        build,
    })
}

/// The generator's state: what the program needs, found in a first pass, then its text.
struct Gen<'a> {
    t: &'a Trace,
    /// Data files by name, and the blob each holds.
    files: BTreeMap<String, BlobId>,
    /// Modules by name, their index in `mod[]`.
    modules: BTreeMap<String, usize>,
    /// Kernels launched, their index in `fn[]`.
    kernels: BTreeMap<KernelId, usize>,
    /// Streams, events, graphs and pinned regions the calls name.
    streams: BTreeSet<u32>,
    events: BTreeSet<u32>,
    graphs: BTreeSet<u32>,
    hosts: BTreeSet<u32>,
    /// The most buffers any id names, plus one.
    buffers: u32,
    /// Streams, events the program creates at start (adopted, or first seen in use).
    pre_streams: BTreeSet<u32>,
    pre_events: BTreeSet<u32>,
    /// PTX text files by name (a module compiled from source keeps its PTX, not a blob).
    ptx: BTreeMap<String, String>,
    /// Modules loaded and kernels looked up so far, as the text is written.
    loaded: BTreeSet<usize>,
    found: BTreeSet<usize>,
    made: usize,
    skipped: usize,
}

/// The C program's fixed part (`prelude.c`): the driver prototypes it uses, and its checks.
const PRELUDE: &str = include_str!("prelude.c");

fn head(t: &Trace, origin: &str, g: &Gen) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "/* A standalone repro written by `gputape export --program` from {origin}: the trace's \
         {} calls as CUDA driver calls, in order, with their recorded arguments ({} made, {} \
         that change nothing on the device left out). Build: cc -O1 -o repro repro.c -lcuda. \
         Run: ./repro [DATA_DIR] (default: data/ beside it). Exit 0 when the recorded fault \
         reproduces (or, without one, every call and read back is as recorded), 1 otherwise, 2 \
         when it cannot start. */",
        t.calls.len(),
        g.made,
        g.skipped
    );
    s.push_str(PRELUDE);
    s
}

/// The C expression of a stream.
fn stream(s: &StreamRef) -> String {
    match s {
        StreamRef::Legacy => "(CUstream)0".into(),
        StreamRef::Id(id) => format!("st[{}]", id.0),
    }
}

/// A C string literal of `s`.
fn c_str(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

/// A comment's text, made safe to put inside `/* */`.
fn comment(s: &str) -> String {
    s.replace("*/", "* /")
}

fn hex_name(b: BlobId) -> String {
    b.0.iter().take(8).map(|x| format!("{x:02x}")).collect()
}

/// Calls a recording keeps by name that the program does not need to make: what each did is
/// done another way, or is none of the device's (`Gen::check`).
fn is_done_otherwise(name: &str) -> bool {
    matches!(
        name,
        "cuCtxSetCurrent"
            | "cuKernelSetAttribute"
            | "cuFuncSetAttribute"
            | "cuLaunchHostFunc"
            | "cuLaunchHostFunc_ptsz"
            | "cuStreamAddCallback"
            | "cuStreamAddCallback_ptsz"
    )
}

impl<'a> Gen<'a> {
    fn new(t: &'a Trace) -> Self {
        Gen {
            t,
            files: BTreeMap::new(),
            modules: BTreeMap::new(),
            kernels: BTreeMap::new(),
            streams: BTreeSet::new(),
            events: BTreeSet::new(),
            graphs: BTreeSet::new(),
            hosts: BTreeSet::new(),
            buffers: 0,
            pre_streams: BTreeSet::new(),
            pre_events: BTreeSet::new(),
            ptx: BTreeMap::new(),
            loaded: BTreeSet::new(),
            found: BTreeSet::new(),
            made: 0,
            skipped: 0,
        }
    }

    fn bytes(&self, blob: BlobId, what: &str) -> Result<&'a [u8], ProgramError> {
        self.t
            .try_blob(blob)?
            .ok_or_else(|| ProgramError::MissingBlob {
                blob,
                what: what.to_string(),
            })
    }

    /// A data file for `blob`; its name.
    fn file(&mut self, blob: BlobId) -> String {
        let name = format!("{}.bin", hex_name(blob));
        self.files.insert(name.clone(), blob);
        name
    }

    fn buf(&mut self, b: BufferId) {
        self.buffers = self.buffers.max(b.0 + 1);
    }

    /// The C expression of a device address.
    fn addr(&mut self, d: &DevAddr, seq: u64, what: &str) -> Result<String, ProgramError> {
        Ok(match d {
            DevAddr::Null => "0ull".into(),
            DevAddr::Buf { buf, off } | DevAddr::Freed { buf, off } => {
                self.buf(*buf);
                format!("buf[{}] + {off}ull", buf.0)
            }
            DevAddr::Unknown {
                near: Some((buf, off)),
            } => {
                self.buf(*buf);
                format!("buf[{}] + {off}ull", buf.0)
            }
            DevAddr::Unknown { near: None } => {
                return Err(ProgramError::Unsupported {
                    seq,
                    what: what.to_string(),
                    why: "it names an address below every buffer, which no buffer of the \
                          program can stand for"
                        .into(),
                })
            }
        })
    }

    /// The first pass: the modules, kernels, streams and events the calls need, and whether
    /// every call can be made.
    fn plan(&mut self) -> Result<(), ProgramError> {
        let t = self.t;
        for a in &t.adopted {
            match a {
                crate::trace::Adopted::Stream { id, .. } => {
                    self.pre_streams.insert(id.0);
                }
                crate::trace::Adopted::Event { id } => {
                    self.pre_events.insert(id.0);
                }
                crate::trace::Adopted::Host { id, .. } => {
                    self.hosts.insert(id.0);
                }
                crate::trace::Adopted::Graph { .. } => {}
                other => {
                    return Err(ProgramError::Unsupported {
                        seq: 0,
                        what: "the state before the first call".into(),
                        why: format!("it holds {other:?}, which the program cannot make"),
                    })
                }
            }
        }
        for b in &t.initial {
            self.buf(b.buf);
        }
        let mut created_streams = BTreeSet::new();
        let mut created_events = BTreeSet::new();
        for c in &t.calls {
            if let Some(Ok(Value::Stream(StreamRef::Id(s)))) = &c.ret {
                created_streams.insert(s.0);
            }
            if let Some(Ok(Value::Event(e))) = &c.ret {
                created_events.insert(e.0);
            }
            self.check(c)?;
        }
        for s in self.streams.clone() {
            if !created_streams.contains(&s) {
                self.pre_streams.insert(s);
            }
        }
        for e in self.events.clone() {
            if !created_events.contains(&e) {
                self.pre_events.insert(e);
            }
        }
        for g in &self.graphs {
            if !t
                .calls
                .iter()
                .any(|c| matches!(&c.ret, Some(Ok(Value::Graph(id))) if id.0 == *g))
            {
                return Err(ProgramError::Unsupported {
                    seq: 0,
                    what: format!("graph{g}"),
                    why: "it was captured before the recording began, so no call builds it".into(),
                });
            }
        }
        let kernels: Vec<KernelId> = self.kernels.keys().copied().collect();
        for (i, k) in kernels.into_iter().enumerate() {
            self.kernels.insert(k, i);
            let info = t.kernels.get(&k).ok_or_else(|| ProgramError::Unsupported {
                seq: 0,
                what: k.to_string(),
                why: "the trace does not say which module and name it is".into(),
            })?;
            if t.kernel_clusters.contains_key(&k) {
                return Err(ProgramError::Unsupported {
                    seq: 0,
                    what: t.kernel_name(k),
                    why: "it is launched in thread-block clusters (cuLaunchKernelEx), which \
                          the program does not write yet"
                        .into(),
                });
            }
            let next = self.modules.len();
            self.modules.entry(info.module.clone()).or_insert(next);
        }
        for g in t.globals.values() {
            let next = self.modules.len();
            self.modules.entry(g.module.clone()).or_insert(next);
        }
        for m in self.modules.keys() {
            if !t.module_images.contains_key(m)
                && !t.modules.iter().any(|c| &c.name == m && c.ptx.is_some())
            {
                return Err(ProgramError::NoImage {
                    module: m.clone(),
                    why: "its kernels ran on the mock, or were compiled from source without PTX \
                          kept"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// Whether call `c` can be made, noting what it needs.
    fn check(&mut self, c: &CallRecord) -> Result<(), ProgramError> {
        let refuse = |why: &str| {
            Err(ProgramError::Unsupported {
                seq: c.seq,
                what: c.call.kind().name().to_string(),
                why: why.to_string(),
            })
        };
        let s = |st: &StreamRef, g: &mut Self| {
            if let StreamRef::Id(id) = st {
                g.streams.insert(id.0);
            }
        };
        match &c.call {
            // The program makes its own context current before the first call; a launch that
            // needs a function's shared memory limit raised raises it itself; a host function
            // is the recorded program's own code, which ran on the host (no device work).
            Call::Opaque { name } if is_done_otherwise(name) => {}
            Call::Opaque { name } => {
                return refuse(&format!(
                    "the recording kept {name} by name only: what it did is not in the trace"
                ))
            }
            Call::CommUniqueId
            | Call::CommInit { .. }
            | Call::Collective { .. }
            | Call::CommDestroy { .. }
            | Call::CommGroupStart
            | Call::CommGroupEnd => {
                return refuse("collectives need every rank's program; replay the rank set with `gputape ranks --replay`")
            }
            Call::EncodeTensorMap { .. } => {
                return refuse("tensor maps are not written by the program yet")
            }
            Call::HostPtrToDevice { .. } => {
                return refuse("device aliases of pinned host memory are not written by the program yet")
            }
            Call::Launch { head: LaunchHead { kernel, stream: st, .. }, args, .. }
            | Call::LaunchTyped { head: LaunchHead { kernel, stream: st, .. }, args, .. } => {
                s(st, self);
                self.kernels.insert(*kernel, 0);
                let params = self.t.kernels.get(kernel).map_or(0, |k| k.params.len());
                if args.is_empty() && params > 0 {
                    return refuse("its arguments were not recorded (no parameter layout)");
                }
                for a in args.iter() {
                    match a {
                        Arg::TensorMap(_) => return refuse("a tensor map argument"),
                        Arg::Words(w) if !w.maps.is_empty() => {
                            return refuse("a tensor map inside a parameter")
                        }
                        _ => {}
                    }
                }
            }
            Call::CopyH2DAsync { stream: st, .. }
            | Call::CopyH2DAsyncRetained { stream: st, .. }
            | Call::CopyD2HAsync { stream: st, .. }
            | Call::CopyD2DAsync { stream: st, .. }
            | Call::MemsetAsync { stream: st, .. }
            | Call::Synchronize { stream: st }
            | Call::CopyD2HOnStream { stream: st, .. }
            | Call::BeginCapture { stream: st }
            | Call::EndCapture { stream: st }
            | Call::AbortCaptureIfActive { stream: st }
            | Call::StreamIsCapturing { stream: st } => s(st, self),
            Call::CopyD2D2DAsync { .. } => {
                return refuse("2D device copies are not written by the program yet")
            }
            Call::LaunchGraph { graph, stream: st } => {
                s(st, self);
                self.graphs.insert(graph.0);
            }
            Call::DestroyGraph { graph } => {
                self.graphs.insert(graph.0);
            }
            Call::RecordEvent { event, stream: st } | Call::StreamWaitEvent { stream: st, event } => {
                s(st, self);
                self.events.insert(event.0);
            }
            Call::EventSynchronize { event } | Call::DestroyEvent { event } => {
                self.events.insert(event.0);
            }
            _ => {}
        }
        Ok(())
    }

    /// `main`'s text.
    fn body(&mut self) -> Result<String, ProgramError> {
        let t = self.t;
        let mut s = String::new();
        let n = |x: usize| x.max(1);
        let _ = writeln!(
            s,
            "\nstatic CUdeviceptr buf[{}];\nstatic CUstream st[{}];\nstatic CUevent ev[{}];\n\
             static CUgraph graph[{}];\nstatic CUgraphExec exec[{}];\nstatic void *host[{}];\n\
             static CUmodule mod[{}];\nstatic CUfunction fn[{}];",
            n(self.buffers as usize),
            n(self
                .streams
                .iter()
                .chain(&self.pre_streams)
                .max()
                .map_or(0, |m| *m as usize + 1)),
            n(self
                .events
                .iter()
                .chain(&self.pre_events)
                .max()
                .map_or(0, |m| *m as usize + 1)),
            n(self.graphs.iter().max().map_or(0, |m| *m as usize + 1)),
            n(self.graphs.iter().max().map_or(0, |m| *m as usize + 1)),
            n(t.calls
                .iter()
                .filter_map(|c| match &c.ret {
                    Some(Ok(Value::Host(h))) => Some(h.0 as usize + 1),
                    _ => None,
                })
                .chain(self.hosts.iter().map(|h| *h as usize + 1))
                .max()
                .unwrap_or(0)),
            n(self.modules.len()),
            n(self.kernels.len()),
        );
        s.push_str(
            "\nint main(int argc, char **argv) {\n    CUresult r;\n    int dev;\n    CUcontext ctx;\n    \
             if (argc > 1) data_dir = argv[1];\n    else {\n        static char d[4096];\n        \
             const char *slash = strrchr(argv[0], '/');\n        if (slash) {\n            \
             snprintf(d, sizeof d, \"%.*s/data\", (int)(slash - argv[0]), argv[0]);\n            \
             data_dir = d;\n        }\n    }\n    \
             if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) || \
             (r = cuDevicePrimaryCtxRetain(&ctx, dev)) || (r = cuCtxSetCurrent(ctx))) {\n        \
             fprintf(stderr, \"repro: no CUDA device: %d\\n\", r);\n        return 2;\n    }\n",
        );
        // Kernels the trace looks up (`Call::Kernel`) are loaded where it does; the others,
        // and the modules of variables, before the first call.
        let looked_up: BTreeSet<KernelId> = t
            .calls
            .iter()
            .filter_map(|c| match (&c.call, &c.ret) {
                (Call::Kernel { .. }, Some(Ok(Value::Kernel(k)))) => Some(*k),
                _ => None,
            })
            .collect();
        let upfront: Vec<KernelId> = self
            .kernels
            .keys()
            .filter(|k| !looked_up.contains(k))
            .copied()
            .collect();
        for k in upfront {
            self.function(&mut s, k, "    ")?;
        }
        for (b, g) in &t.globals {
            self.buf(*b);
            self.module(&mut s, &g.module, "    ")?;
            let _ = writeln!(
                s,
                "    {{ size_t n; cuModuleGetGlobal_v2(&buf[{}], &n, mod[{}], {}); }}",
                b.0,
                self.modules[&g.module],
                c_str(&g.name)
            );
        }
        for st in &self.pre_streams {
            let _ = writeln!(
                s,
                "    cuStreamCreate(&st[{st}], 0); /* in use before the trace began */"
            );
        }
        for e in &self.pre_events {
            let _ = writeln!(s, "    cuEventCreate(&ev[{e}], 0);");
        }
        for a in &t.adopted {
            if let crate::trace::Adopted::Host { id, bytes } = a {
                let _ = writeln!(s, "    cuMemAllocHost_v2(&host[{}], {bytes});", id.0);
            }
        }
        for b in &t.initial {
            let file = self.file(b.data);
            let _ = writeln!(
                s,
                "    /* {} as it was when the recording began */\n    \
                 cuMemAlloc_v2(&buf[{}], {});\n    \
                 {{ void *p = load({}, {}); cuMemcpyHtoD_v2(buf[{}], p, {}); free(p); }}",
                b.buf,
                b.buf.0,
                b.bytes,
                c_str(&file),
                self.bytes(b.data, "an initial buffer")?.len(),
                b.buf.0,
                self.bytes(b.data, "an initial buffer")?.len(),
            );
        }
        // Async read backs, compared once a sync has completed them: (seq, host var, file,
        // bytes, stream).
        let mut pending = call::Pending::new();
        for c in &t.calls {
            self.call(&mut s, c, &mut pending)?;
        }
        // The work still running is waited for, always: a tool that judges a kernel once it
        // has finished (compute-sanitizer's racecheck) sees nothing of a kernel the exit
        // tears down, and an error the device raises late is said, not lost.
        s.push_str("    finish(cuCtxSynchronize());\n");
        for (seq, var, file, len, _) in pending.drain(..) {
            let _ = writeln!(s, "    bytes({seq}, {var}, {}, {len});", c_str(&file));
        }
        s.push_str("    return verdict();\n}\n");
        Ok(s)
    }

    /// Loads module `name` here, unless an earlier line did.
    fn module(&mut self, s: &mut String, name: &str, ind: &str) -> Result<usize, ProgramError> {
        let t = self.t;
        let i = self.modules[name];
        if !self.loaded.insert(i) {
            return Ok(i);
        }
        let (file, len) = if let Some(blob) = t.module_images.get(name) {
            let len = self.bytes(*blob, name)?.len();
            (self.file(*blob), len)
        } else {
            let ptx = t
                .modules
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.ptx.as_ref())
                .expect("checked in plan");
            let file = format!("module-{i}.ptx");
            self.ptx.insert(file.clone(), ptx.clone());
            (file, ptx.len())
        };
        let _ = writeln!(
            s,
            "{ind}{{ /* module {} */\n{ind}    void *image = load({}, {len});\n{ind}    \
             if ((r = cuModuleLoadData(&mod[{i}], image))) {{\n{ind}        \
             fprintf(stderr, \"repro: loading module {} failed: %d\\n\", r);\n{ind}        \
             return 2;\n{ind}    }}\n{ind}}}",
            comment(name),
            c_str(&file),
            comment(name).replace('"', "'"),
        );
        Ok(i)
    }

    /// Looks kernel `k` up here (its module loaded first), unless an earlier line did.
    fn function(&mut self, s: &mut String, k: KernelId, ind: &str) -> Result<(), ProgramError> {
        let t = self.t;
        let Some(&i) = self.kernels.get(&k) else {
            return Ok(());
        };
        if !self.found.insert(i) {
            return Ok(());
        }
        let info = &t.kernels[&k];
        let m = self.module(s, &info.module, ind)?;
        let _ = writeln!(
            s,
            "{ind}if ((r = cuModuleGetFunction(&fn[{i}], mod[{m}], {}))) {{ /* {} */\n{ind}    \
             fprintf(stderr, \"repro: kernel {k} not found: %d\\n\", r);\n{ind}    return 2;\n{ind}}}",
            c_str(&info.name),
            comment(&t.kernel_name(k)),
        );
        Ok(())
    }
}
