//! Configuration of a `CudaBackend`, read from the environment once at construction: its own
//! room because launchers and tests build it without touching the driver.

use crate::backend::{CaptureMode, StreamKind};

/// Red-zone settings: guard bands after allocations, to catch kernels that write past the end
/// of a buffer (which CUDA itself does not notice when the neighbour is another allocation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedzoneConfig {
    /// Guard band size in bytes, rounded up to 16; 0 disables red zones.
    pub bytes: usize,
    /// Guard only allocations whose creation index is at least this (weights come first and are
    /// read-only to kernels, so skipping them keeps the cost down).
    pub min_idx: usize,
    /// Log a backtrace when the allocation with this creation index is made, so a bisected
    /// index becomes a source line.
    pub trace_idx: Option<usize>,
    /// The fill byte. Running twice with different fills separates out-of-bounds reads (the
    /// results change) from writes (the scan reports them).
    pub fill: u8,
}

impl RedzoneConfig {
    /// From `GPUTAPE_REDZONE`, `GPUTAPE_REDZONE_MIN_IDX`, `GPUTAPE_REDZONE_TRACE_IDX` and
    /// `GPUTAPE_REDZONE_FILL`, read once when a backend is built.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
        RedzoneConfig {
            bytes: num("GPUTAPE_REDZONE").map_or(0, |n| n.next_multiple_of(16)),
            min_idx: num("GPUTAPE_REDZONE_MIN_IDX").unwrap_or(0),
            trace_idx: num("GPUTAPE_REDZONE_TRACE_IDX"),
            fill: get("GPUTAPE_REDZONE_FILL")
                .and_then(|v| v.trim().parse::<u8>().ok())
                .unwrap_or(0xEE),
        }
    }
}

#[derive(Clone, Debug)]
pub struct CudaConfig {
    pub ordinal: usize,
    /// The mode `begin_capture` passes to `cuStreamBeginCapture`.
    pub capture_mode: CaptureMode,
    /// Flags of every stream this backend creates, the default stream included.
    pub stream_kind: StreamKind,
    pub redzone: RedzoneConfig,
    /// `GPUTAPE_DEBUG_SYNC_KERNELS=1`: synchronise after every launch.
    pub debug_sync_kernels: bool,
    /// Pinned staging ring for `copy_h2d_async`.
    pub staging_bytes: usize,
    /// Pinned arena for `copy_h2d_async` sources captured into graphs (kept until drop).
    pub capture_staging_bytes: usize,
    /// Programmatic dependent launch: launch every kernel whose PTX waits on its grid
    /// dependency (`griddepcontrol.wait`) with programmatic stream serialization, so that it may
    /// start while the kernel before it finishes. Kernels without the wait are launched the
    /// ordinary way: for them an early start would be a race. Off by default (an engine's
    /// kernels decide whether they are written for it); `GPUTAPE_PDL=1` or `replay --pdl`.
    pub pdl: bool,
    /// Start the OOM watchdog with this threshold in MiB (`GPUTAPE_OOM_WATCHDOG_MB`): three
    /// readings in a row of less free device memory than this end the process. One per
    /// process: the first backend asked starts it, and it stops when that backend is dropped.
    pub oom_watchdog_mb: Option<usize>,
    /// How often the watchdog reads free memory (`GPUTAPE_OOM_WATCHDOG_MS`, default 1000).
    pub oom_watchdog_interval: std::time::Duration,
}

impl CudaConfig {
    pub fn from_env(ordinal: usize) -> Self {
        CudaConfig {
            ordinal,
            capture_mode: CaptureMode::Global,
            stream_kind: StreamKind::Blocking,
            redzone: RedzoneConfig::from_env(),
            debug_sync_kernels: std::env::var("GPUTAPE_DEBUG_SYNC_KERNELS").as_deref() == Ok("1"),
            staging_bytes: 8 << 20,
            capture_staging_bytes: 4 << 20,
            pdl: std::env::var("GPUTAPE_PDL").as_deref() == Ok("1"),
            oom_watchdog_mb: env_num("GPUTAPE_OOM_WATCHDOG_MB"),
            oom_watchdog_interval: std::time::Duration::from_millis(
                env_num("GPUTAPE_OOM_WATCHDOG_MS").unwrap_or(1000) as u64,
            ),
        }
    }
}

fn env_num(k: &str) -> Option<usize> {
    std::env::var(k).ok().and_then(|v| v.trim().parse().ok())
}
