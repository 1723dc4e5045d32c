//! The flight recorder's settings (`FlightConfig`, from code or the environment) and its
//! report of what it holds (`FlightHeld`): what an engine reads and sets, apart from how the
//! store works (`flight.rs`).

use std::path::PathBuf;

/// What the flight recorder holds now ([`crate::recorder::RecordingBackend::flight_held`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlightHeld {
    /// Calls in the kept steps.
    pub calls: usize,
    /// Bytes that hold those calls: templates, the caches that find them, and the logs.
    pub call_bytes: usize,
    /// Of those, the per-step logs alone: what each further call costs.
    pub log_bytes: usize,
    /// Bytes of device state the calls replay from, in host memory: checkpoints, copied
    /// payloads, module and kernel definitions.
    pub state_bytes: usize,
    /// Bytes of device state spilled to disk (`FlightConfig::spill_blobs_over`).
    pub spilled_bytes: usize,
    /// Checkpoints put off because a stream was capturing when they fell due (each taken at
    /// the next step boundary outside any capture).
    pub deferred_checkpoints: u64,
    /// Step boundaries at which a due checkpoint was put off by `FlightConfig::budget` (in a
    /// rank set, to the next multiple of `checkpoint_every`).
    pub budget_deferrals: u64,
    /// Checkpoints taken since arming (the snapshot at arming not counted).
    pub checkpoints: u64,
    /// Bytes of device memory those checkpoints read back: the buffers written since the one
    /// before (what a checkpoint costs grows with this, not with the device's contents).
    pub checkpoint_read_bytes: u64,
    /// Times the recorder's own work (a checkpoint, a dump) failed. Not 0: see stderr, or the
    /// next dump's reason.
    pub own_failures: u64,
    /// Checkpoints are taken on the device, without a host sync (`FlightConfig::device_checkpoints`
    /// and a backend that can): false where they fell back to the host's.
    pub device_checkpoints: bool,
    /// Device checkpoints that could not take every changed chunk (the ring was full): no
    /// dump starts from them; the chunks left out are taken at the next.
    pub incomplete_checkpoints: u64,
    /// What checkpoints cost the thread that took them, in all: for device checkpoints their
    /// launches and table, for the host's the whole sync and readback.
    pub checkpoint_time: std::time::Duration,
    /// Step boundaries at which a due checkpoint waited for the one before it to be
    /// consumed.
    pub busy_deferrals: u64,
}

impl FlightHeld {
    /// Bytes per kept call, the ring's own cost, templates included.
    pub fn bytes_per_call(&self) -> f64 {
        self.call_bytes as f64 / self.calls.max(1) as f64
    }

    /// Log bytes per kept call: the cost of one more call once its template is held.
    pub fn log_bytes_per_call(&self) -> f64 {
        self.log_bytes as f64 / self.calls.max(1) as f64
    }
}

/// How the flight recorder keeps and dumps.
#[derive(Clone, Debug)]
pub struct FlightConfig {
    /// Where dumps go (created if missing).
    pub dir: PathBuf,
    /// Steps between checkpoints; a dump holds between this and twice this many steps.
    pub checkpoint_every: u64,
    /// Dumps this recorder's triggers write at most (a dead context makes every later call
    /// fail); `flight_dump` always writes.
    pub max_dumps: usize,
    /// Without step boundaries from the engine (`GpuBackend::step_boundary`), a host sync
    /// counts as the end of a step.
    pub steps_from_syncs: bool,
    /// Blobs of this many bytes or more (a large buffer's parts, weights among them) are kept
    /// in files beside the dumps instead of host memory, and read back only by a dump;
    /// `None` keeps everything in memory.
    pub spill_blobs_over: Option<usize>,
    /// Dump when a call (a sync, a blocking copy: the calls that wait) has not returned after
    /// this long: a hang. The dump is written by a thread of the recorder's own, so a stuck
    /// engine thread does not stop it. `None` (the default): off.
    pub hang_after: Option<std::time::Duration>,
    /// The share of wall time checkpoints may take (`GPUTAPE_FLIGHT_BUDGET`, default 0.02). A
    /// host checkpoint syncs the engine's streams and reads back what was written, which
    /// stalled an 8B-shaped step 0.1 s every 8 steps on the H200 (mean step 3.5x), and is
    /// priced at its own time; a device checkpoint stops nothing, and is priced at what the
    /// step it fell in took beyond the typical step (on steps of tens of microseconds its
    /// launches and the engine's wait for its gather still show). Checkpoints are
    /// accounted from the engine's first step on: one that falls due before what checkpoints
    /// have cost, plus its own estimate, fits this share of the time since is put off to the
    /// first step boundary where it does, so the mean step pays at most this share over any
    /// stretch from the first step, the first checkpoint included; the kept spans then reach
    /// further back (`FlightHeld::budget_deferrals` counts the put-offs). `None`: every
    /// `checkpoint_every` steps, whatever it costs. `new` has none, so a configuration built
    /// in code keeps its exact interval; `from_env`, which engines use in production, sets 2%.
    pub budget: Option<f64>,
    /// A checkpoint is taken regardless of the budget once the span being recorded holds this
    /// many calls, which bounds the memory the kept calls take (a few bytes each).
    pub max_span_calls: usize,
    /// Take checkpoints on the device, with no host sync (`GPUTAPE_FLIGHT_DEVICE`, default on;
    /// 0 turns it off): see `recorder/device_ckpt.rs`. A backend that cannot (no module
    /// loading, events or pinned memory) falls back to checkpoints that drain the streams.
    pub device_checkpoints: bool,
    /// The ring's size in MiB (`GPUTAPE_FLIGHT_RING_MB`, default 256): pinned host memory, and
    /// as much device memory for staging where it can be had at arming. Changed chunks that
    /// do not fit wait for a later checkpoint.
    pub ring_mb: u64,
    /// A directory every rank of a rank set can see (`GPUTAPE_FLIGHT_PEERS`): a dump of this
    /// recorder tells its peers there, and this recorder dumps when a peer of a communicator
    /// it joined says it dumped (`recorder/peers.rs`). `None` (the default): each rank dumps
    /// at its own failures only.
    pub peers: Option<PathBuf>,
    /// A due checkpoint that finds the device checkpoint before it not yet consumed waits
    /// for it (at most 30 s) instead of being put off to a later step boundary
    /// (`FlightHeld::busy_deferrals`): checkpoints on exact steps whatever the host's
    /// speed, for the engine's stall. Off by default; tests and investigations that need a
    /// dump's span to be exact turn it on.
    pub wait_for_checkpoints: bool,
}

impl FlightConfig {
    /// Dump into `dir` (created if missing), a checkpoint every 8 steps (no time budget), at
    /// most one dump, and host syncs taken as step ends.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FlightConfig {
            dir: dir.into(),
            checkpoint_every: 8,
            max_dumps: 1,
            steps_from_syncs: true,
            spill_blobs_over: Some(1 << 20),
            hang_after: None,
            peers: None,
            budget: None,
            max_span_calls: 4 << 20,
            device_checkpoints: true,
            ring_mb: super::device_ckpt::DEFAULT_RING_MB,
            wait_for_checkpoints: false,
        }
    }

    /// `GPUTAPE_FLIGHT_STEPS`, `GPUTAPE_FLIGHT_MAX_DUMPS`, `GPUTAPE_FLIGHT_SPILL_MB`
    /// (blobs of this many MiB or more spill to disk; 0 keeps them in memory),
    /// `GPUTAPE_FLIGHT_HANG_S` (dump when a call has not returned after this many seconds,
    /// fractions allowed; unset or 0: off) and `GPUTAPE_FLIGHT_BUDGET` (the share of wall
    /// time checkpoints may take, default 0.02; 0: no budget), `GPUTAPE_FLIGHT_DEVICE` (0:
    /// checkpoints by the host), `GPUTAPE_FLIGHT_RING_MB` and `GPUTAPE_FLIGHT_PEERS` (the rank
    /// set's shared directory) over the defaults.
    pub fn from_env(dir: impl Into<PathBuf>) -> Self {
        let mut c = Self::new(dir);
        c.budget = Some(0.02);
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = num("GPUTAPE_FLIGHT_STEPS").filter(|n| *n > 0) {
            c.checkpoint_every = n;
        }
        if let Some(n) = num("GPUTAPE_FLIGHT_MAX_DUMPS") {
            c.max_dumps = n as usize;
        }
        if let Some(n) = num("GPUTAPE_FLIGHT_DEVICE") {
            c.device_checkpoints = n != 0;
        }
        if let Some(n) = num("GPUTAPE_FLIGHT_RING_MB").filter(|n| *n > 0) {
            c.ring_mb = n.min(1 << 20);
        }
        if let Some(n) = num("GPUTAPE_FLIGHT_SPILL_MB") {
            c.spill_blobs_over = (n > 0).then(|| (n as usize).saturating_mul(1 << 20));
        }
        if let Some(b) = std::env::var("GPUTAPE_FLIGHT_BUDGET")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|b| b.is_finite() && *b >= 0.0)
        {
            c.budget = (b > 0.0 && b < 1.0).then_some(b);
        }
        let secs = std::env::var("GPUTAPE_FLIGHT_HANG_S")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok());
        if let Some(s) = secs.filter(|s| s.is_finite() && *s > 0.0) {
            c.hang_after = Some(std::time::Duration::from_secs_f64(s.min(1e9)));
        }
        c.peers = std::env::var_os("GPUTAPE_FLIGHT_PEERS")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        c
    }
}
