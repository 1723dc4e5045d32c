//! The one place the command line turns `--on` / `--backend` into a backend. Verbs ask for
//! what they need (`Want`) and get an `Opened`: the backend as a trait object, plus the two
//! things some verbs need that the trait does not carry. Adding a backend is a folder beside
//! `mock/` and `cuda/`, a `Backend` value, its line in `Backend::props` and its arm in `open`.
//! It is also the one place an engine's own modules (`cli::main_with`) are loaded, so no verb
//! can open a backend without them.

use crate::backend::{CaptureMode, DevicePtr, GpuBackend, ModuleCode, StreamKind};
use crate::recorder::BackendDesc;
use anyhow::Result;
use std::sync::Arc;

use super::Ctx;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    #[default]
    Mock,
    Cuda,
}

/// A trace whose kernels only a GPU runs, on a machine with no CUDA driver, and no `--on`
/// given: exit status 4 (the backend it needs is not here).
#[derive(Debug, thiserror::Error)]
#[error(
    "{trace} launches kernels only a GPU runs ({kernels}: compiled code with no CPU twin here) and this machine has no CUDA driver: replay it on a GPU machine, or with --on mock to replay it with those launches skipped"
)]
pub struct NeedsGpu {
    pub trace: String,
    pub kernels: String,
}

/// A tool a verb was asked to run under is not on this machine: exit status 4.
#[derive(Debug, thiserror::Error)]
#[error("{0} was not found on this machine")]
pub struct NeedsTool(pub String);

/// The backend a verb that runs `t` uses when `--on` was not given: CUDA when the trace
/// launches kernels the mock cannot run (a driver-level recording's compiled kernels, an
/// engine's own) and a driver is present; the mock otherwise. Where the mock cannot run them
/// and there is no driver, `NeedsGpu`, rather than a replay that checks nothing.
pub fn choose(
    ctx: &Ctx,
    asked: Option<Backend>,
    t: &crate::trace::Trace,
    path: &std::path::Path,
) -> Result<Backend> {
    if let Some(b) = asked {
        return Ok(b);
    }
    let mock = open(ctx, Backend::Mock, Want::replay())?;
    let cannot = crate::replayer::Replayer::new(t).kernels_it_cannot_run(mock.gpu.as_ref())?;
    if cannot.is_empty() {
        return Ok(Backend::Mock);
    }
    let named = match cannot.len() {
        1..=3 => cannot.join(", "),
        n => format!("{} and {} more", cannot[..3].join(", "), n - 3),
    };
    if crate::cuda::driver_present() {
        eprintln!(
            "note: {} launches kernels the mock cannot run ({named}): on CUDA (--on mock skips them)",
            path.display()
        );
        return Ok(Backend::Cuda);
    }
    Err(NeedsGpu {
        trace: path.display().to_string(),
        kernels: named,
    }
    .into())
}

/// What the verbs need to know of a backend beyond the trait.
pub struct Props {
    pub name: &'static str,
    /// A device fault kills the context, and with it every later call in this process: a
    /// replay that may fault runs in a child process so the report survives. (The mock's
    /// faults are values: it goes on.)
    pub fault_poisons_process: bool,
    /// Overruns are found by scanning red zones around allocations (the mock checks every
    /// access against exact bounds instead, so it has none).
    pub has_redzones: bool,
    /// Kernels run as CPU twins: an engine's own kernels have none here, and are opaque,
    /// unless the tool was built with the engine's modules (`cli::main_with`).
    pub runs_cpu_twins: bool,
}

impl Backend {
    /// Each backend's properties, one line each: with its arm in `open`, all a new backend
    /// needs here.
    pub fn props(self) -> Props {
        let p = |name, fault_poisons_process, has_redzones, runs_cpu_twins| Props {
            name,
            fault_poisons_process,
            has_redzones,
            runs_cpu_twins,
        };
        match self {
            Backend::Mock => p("mock", false, false, true),
            Backend::Cuda => p("cuda", true, true, false),
        }
    }

    pub fn name(self) -> &'static str {
        self.props().name
    }

    pub fn fault_poisons_process(self) -> bool {
        self.props().fault_poisons_process
    }

    pub fn has_redzones(self) -> bool {
        self.props().has_redzones
    }

    pub fn runs_cpu_twins(self) -> bool {
        self.props().runs_cpu_twins
    }
}

/// What a verb asks of the backend it opens.
#[derive(Clone, Copy, Debug, Default)]
pub struct Want {
    /// Module `blas`: the workloads' and tests' kernels.
    pub blas: bool,
    /// The decode step's kernels.
    pub model: bool,
    /// Red zones of this many bytes where the backend has them and the environment set none
    /// (a planted or recorded fault is then caught at its write).
    pub redzones: Option<usize>,
    /// Programmatic dependent launch where the backend has it.
    pub pdl: bool,
    /// Stream capture mode and stream kind (the capture-table probes), else the defaults.
    pub capture: Option<(CaptureMode, StreamKind)>,
    /// For a replay: a backend that cannot load the code a trace embeds (the mock runs CPU
    /// twins instead) gets every kernel gputape's own traces use, `blas` and the model's.
    pub replay: bool,
    /// The mock's chaos mode with this seed (`replay --chaos`); other backends have none.
    pub chaos: Option<u64>,
    /// The CUDA device (a tensor-parallel rank's own GPU); the mock has one of each.
    pub device: usize,
}

impl Want {
    pub fn replay() -> Want {
        Want {
            replay: true,
            ..Want::default()
        }
    }
}

/// Puts a buffer at a recorded device address (`replay --fixed-addresses`).
pub type Place = Box<dyn Fn(u64, usize) -> Result<DevicePtr>>;
/// Loads a module from the code a trace embeds.
pub type LoadCode = Box<dyn Fn(&ModuleCode) -> Result<()>>;

/// A backend the CLI opened.
pub struct Opened {
    pub gpu: Arc<dyn GpuBackend>,
    /// What traces recorded on it say they were recorded on.
    pub desc: BackendDesc,
    pub place: Place,
    /// `None` where the backend runs the kernels it was given (the mock's CPU twins) and a
    /// trace's code has nothing to add.
    pub load_code: Option<LoadCode>,
    /// How many of the loaded kernels launch with programmatic dependent launch, of how many
    /// (`None` where the backend has no PDL).
    pub pdl_kernels: Option<Box<dyn Fn() -> (usize, usize)>>,
    /// The mock itself, where the backend is the mock: what its own log says
    /// (`replay --layout`).
    pub mock: Option<Arc<crate::mock::MockGpuBackend>>,
}

impl Opened {
    /// Load a module from the code a trace embeds, where the backend compiles such code; a
    /// backend that runs its own twins has nothing to load.
    pub fn load_trace_code(&self, m: &ModuleCode) -> Result<()> {
        match &self.load_code {
            Some(load) => load(m),
            None => Ok(()),
        }
    }
}

/// Open `b` as `want` asks, with the engine's own modules of `ctx` loaded after gputape's (on
/// the mock their CPU bodies then run where a replay would skip an opaque kernel; on CUDA they
/// are compiled as a trace's embedded code would be).
pub fn open(ctx: &Ctx, b: Backend, want: Want) -> Result<Opened> {
    let opened = match b {
        Backend::Mock => open_mock(want, ctx.mock_memory),
        Backend::Cuda => open_cuda(want)?,
    };
    let twins = want.replay && opened.load_code.is_none();
    if want.blas || twins {
        crate::workloads::load_kernels(opened.gpu.as_ref())?;
    }
    if want.model || twins {
        crate::model::kernels::load(opened.gpu.as_ref())?;
    }
    if twins {
        // A bf16 step's trace (model::llama) replays on the mock through its twins too.
        crate::model::llama::kernels::load_modules(opened.gpu.as_ref())?;
    }
    for m in ctx.modules {
        anyhow::Context::with_context(opened.gpu.load_module(m), || {
            format!("loading the engine's module {}", m.name)
        })?;
    }
    Ok(opened)
}

fn open_mock(want: Want, memory: Option<usize>) -> Opened {
    let mut cfg = crate::mock::MockConfig::default();
    if let Some(bytes) = memory {
        cfg.total_memory = bytes;
    }
    if let Some((mode, kind)) = want.capture {
        cfg.capture_mode = mode;
        cfg.stream_kind = kind;
    }
    cfg.chaos = want.chaos;
    let m = Arc::new(crate::mock::MockGpuBackend::new(cfg));
    let at = m.clone();
    Opened {
        gpu: m.clone(),
        desc: BackendDesc::new("mock"),
        place: Box::new(move |addr, bytes| at.alloc_at(addr, bytes)),
        load_code: None,
        pdl_kernels: None,
        mock: Some(m),
    }
}

fn open_cuda(want: Want) -> Result<Opened> {
    if !crate::cuda::driver_present() {
        return Err(crate::cuda::ProbeError::NoDriver.into());
    }
    let mut cfg = crate::cuda::CudaConfig::from_env(want.device);
    cfg.pdl |= want.pdl;
    if let Some(bytes) = want.redzones {
        if cfg.redzone.bytes == 0 {
            cfg.redzone.bytes = bytes;
        }
    }
    if let Some((mode, kind)) = want.capture {
        cfg.capture_mode = mode;
        cfg.stream_kind = kind;
    }
    let g = Arc::new(crate::cuda::CudaBackend::new(cfg)?);
    let (at, code, pdl) = (g.clone(), g.clone(), g.clone());
    Ok(Opened {
        gpu: g,
        desc: cuda_desc(want.device),
        place: Box::new(move |addr, bytes| at.place_at(addr, bytes)),
        load_code: Some(Box::new(move |m: &ModuleCode| match (&m.source, &m.ptx) {
            (Some(src), _) => code.load_source(&m.name, src),
            (None, Some(ptx)) => code.load_ptx(&m.name, ptx, None),
            (None, None) => anyhow::bail!("module {} has no code in the trace", m.name),
        })),
        pdl_kernels: Some(Box::new(move || pdl.programmatic_kernels())),
        mock: None,
    })
}

/// What a trace recorded on CUDA device `device` says it was recorded on.
fn cuda_desc(device: usize) -> BackendDesc {
    let mut d = BackendDesc::new("cuda");
    d.device_ordinal = device as u32;
    if let Ok(devs) = crate::cuda::probe() {
        if let Some(dev) = devs.get(device) {
            d.device_name = Some(dev.name.clone());
            d.driver_version = Some(dev.driver_version);
        }
    }
    d
}
