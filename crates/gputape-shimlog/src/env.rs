//! Every environment variable gputape reads, in one table: the command line, the trait-level
//! recorder, the backends and the driver shim all read some, and a user should find each in
//! one place. The table lives in this crate because both `gputape` and the shim depend on it;
//! `gputape reference` renders it into the book (`docs/book/src/reference/environment.md`),
//! and a test fails when a `GPUTAPE_*` name appears in the source but not here.

/// Who is meant to set a variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetBy {
    /// The user, to change what gputape does.
    User,
    /// `gputape run` or `replay`, for the processes they start: listed so that a user who
    /// finds it in a program's environment knows what it is, not to be set by hand.
    Run,
}

/// One variable: its name, its value when unset, what reads it, and what it does.
#[derive(Clone, Copy, Debug)]
pub struct Var {
    /// `GPUTAPE_...`.
    pub name: &'static str,
    /// What applies when it is unset.
    pub default: &'static str,
    /// The part of gputape that reads it.
    pub read_by: &'static str,
    /// Who sets it.
    pub set_by: SetBy,
    /// What it does, in a sentence or two.
    pub what: &'static str,
}

const fn var(
    name: &'static str,
    default: &'static str,
    read_by: &'static str,
    set_by: SetBy,
    what: &'static str,
) -> Var {
    Var {
        name,
        default,
        read_by,
        set_by,
        what,
    }
}

use SetBy::{Run, User};

/// Who reads a variable, named the same way in every row.
const RUN: &str = "`gputape run`";
const SHIM: &str = "the driver shim (`gputape run`)";
const TRAIT: &str = "the trait recorder (`from_env`)";
const CUDA: &str = "the CUDA backend";
const VERBS: &str = "every verb";

/// Every variable, by name.
pub const VARS: &[Var] = &[
    var(
        "GPUTAPE_BLOBS",
        "where the trace was recorded",
        "the recorder and every verb that reads a trace (`--blobs`)",
        User,
        "A shared blob store: large blobs (weights, big buffers) are kept there once instead of in every trace.",
    ),
    var(
        "GPUTAPE_DEBUG_SYNC_KERNELS",
        "0",
        CUDA,
        User,
        "`1`: synchronise after every launch, so a fault is raised by the launch that caused it.",
    ),
    var(
        "GPUTAPE_FLIGHT",
        "unset",
        TRAIT,
        User,
        "A directory: arm the flight recorder (calls kept in memory, a trace dumped there at a fault, a hang or when asked).",
    ),
    var(
        "GPUTAPE_FLIGHT_BUDGET",
        "0.02",
        TRAIT,
        User,
        "The share of wall time the flight recorder's checkpoints may take (0: every `GPUTAPE_FLIGHT_STEPS` steps whatever it costs).",
    ),
    var(
        "GPUTAPE_FLIGHT_CKPT_TIMES",
        "0",
        TRAIT,
        User,
        "`1`: print what each flight checkpoint cost the engine's thread and the recorder's.",
    ),
    var(
        "GPUTAPE_FLIGHT_DEVICE",
        "1",
        TRAIT,
        User,
        "`0`: take flight checkpoints by the host (drain the streams, read whole buffers) instead of on the device.",
    ),
    var(
        "GPUTAPE_FLIGHT_HANG_S",
        "unset (no hang dumps)",
        "the trait recorder and the driver shim",
        User,
        "Seconds: dump when a host sync (or any call) has not returned after this long.",
    ),
    var(
        "GPUTAPE_FLIGHT_MAX_DUMPS",
        "1",
        TRAIT,
        User,
        "How many dumps one process may write.",
    ),
    var(
        "GPUTAPE_FLIGHT_PEERS",
        "unset",
        TRAIT,
        User,
        "A directory every rank of a rank set can see: a dump of one rank asks the others for theirs.",
    ),
    var(
        "GPUTAPE_FLIGHT_RING_MB",
        "256",
        "the trait recorder and the driver shim",
        User,
        "The flight recorder's ring, in MiB: what is kept of the calls and bytes since the last checkpoint.",
    ),
    var(
        "GPUTAPE_FLIGHT_SPILL_MB",
        "1",
        TRAIT,
        User,
        "Blobs of a checkpoint at least this large are spilled to disk (0 keeps them in memory).",
    ),
    var(
        "GPUTAPE_FLIGHT_STEPS",
        "8",
        TRAIT,
        User,
        "Steps between flight checkpoints.",
    ),
    var(
        "GPUTAPE_LIBRARY_FRAMES",
        "torch/, triton/, and the other libraries gputape knows",
        "the converter of `gputape run -o` and every verb that prints a site",
        User,
        "Comma-separated directories whose Python frames are libraries: a call's site is the innermost frame outside them.",
    ),
    var(
        "GPUTAPE_LINES",
        "1",
        SHIM,
        User,
        "`0`: record no Python lines and no native call sites.",
    ),
    var(
        "GPUTAPE_LOG",
        "warnings",
        VERBS,
        User,
        "A log filter (`gputape=debug`), as RUST_LOG; `-v`, `-vv` and `-q` set it from the command line.",
    ),
    var(
        "GPUTAPE_MOCK_COMM_TIMEOUT_S",
        "10",
        "the mock",
        User,
        "Seconds a mock rank waits for its peers at a collective before failing it (instead of hanging).",
    ),
    var(
        "GPUTAPE_NATIVE_FRAMES",
        "unset (the program's own frame)",
        SHIM,
        User,
        "Keep N native frames for every call whatever library they are in (0: none); also for Python threads without frames.",
    ),
    var(
        "GPUTAPE_NCCL_LIB",
        "libnccl.so.2, then libnccl.so, found by the loader",
        CUDA,
        User,
        "The NCCL library to open for collectives.",
    ),
    var(
        "GPUTAPE_OOM_WATCHDOG_MB",
        "unset (off)",
        CUDA,
        User,
        "Three readings in a row of less free device memory than this many MiB end the process with status 1.",
    ),
    var(
        "GPUTAPE_OOM_WATCHDOG_MS",
        "1000",
        CUDA,
        User,
        "How often the OOM watchdog reads free memory, in milliseconds.",
    ),
    var(
        "GPUTAPE_PDL",
        "0",
        CUDA,
        User,
        "`1`: launch with programmatic dependent launch allowed (the same as `replay --pdl`).",
    ),
    var(
        "GPUTAPE_PREFAULT",
        "1",
        "the trace writer",
        User,
        "`0`: grow a trace file on the recording thread instead of on a helper thread.",
    ),
    var(
        "GPUTAPE_REAL_LIBCUDA",
        "found by search (the loader's paths, CUDA's usual places)",
        "`gputape run`, the driver shim",
        User,
        "The real driver library the shim forwards to.",
    ),
    var(
        "GPUTAPE_RECORD",
        "unset",
        TRAIT,
        User,
        "A path: record every call from now on into this trace.",
    ),
    var(
        "GPUTAPE_REDZONE",
        "0 (off)",
        CUDA,
        User,
        "Bytes of guard after every allocation, checked at free and at sync: an overrun names the buffer.",
    ),
    var(
        "GPUTAPE_REDZONE_FILL",
        "238 (0xEE)",
        CUDA,
        User,
        "The guard byte red zones are filled with, in decimal.",
    ),
    var(
        "GPUTAPE_REDZONE_MIN_IDX",
        "0",
        CUDA,
        User,
        "Guard only allocations from this creation index on.",
    ),
    var(
        "GPUTAPE_REDZONE_TRACE_IDX",
        "unset",
        CUDA,
        User,
        "Log a backtrace where the allocation of this creation index is made.",
    ),
    var(
        "GPUTAPE_REPLAY_DEADLINE_S",
        "10x the recorded time + 60 s (a hang's dump: 2x + 10 s)",
        "`replay` and `minimize` on CUDA",
        User,
        "Seconds a replay's child may run before it is killed and judged hung.",
    ),
    var(
        "GPUTAPE_REPLAY_PROGRESS_FILE",
        "unset",
        "a replay's child",
        Run,
        "Where a replay's child says which call it is in, for its parent's hang verdict (set by `replay`, not by hand).",
    ),
    var(
        "GPUTAPE_SHIM_COUNTS",
        "unset",
        SHIM,
        Run,
        "Where each process appends its counts of driver calls (set by `gputape run`).",
    ),
    var(
        "GPUTAPE_SHIM_DIR",
        "the shim beside the binary, else the one built into it",
        RUN,
        User,
        "A directory holding a driver shim of your own, as `libcuda.so.1`.",
    ),
    var(
        "GPUTAPE_SHIM_FLIGHT_AT_EXIT",
        "0",
        SHIM,
        User,
        "`1`: under `gputape run --flight`, each process also dumps at exit, whether or not anything faulted.",
    ),
    var(
        "GPUTAPE_SHIM_FLIGHT_DIR",
        "unset",
        SHIM,
        Run,
        "Where the shim's flight recorder dumps (set by `gputape run --flight DIR`).",
    ),
    var(
        "GPUTAPE_SHIM_LOG_DIR",
        "unset",
        SHIM,
        Run,
        "Where each process writes its call log (set by `gputape run -o`).",
    ),
    var(
        "GPUTAPE_SHIM_RUN",
        "unset",
        SHIM,
        Run,
        "The run's id, which names its processes' dumps and peers (set by `gputape run`).",
    ),
    var(
        "GPUTAPE_SHIM_SELFTIME",
        "0",
        SHIM,
        User,
        "`1`: each process says at exit how long its threads spent in the recorder's own code.",
    ),
    var(
        "GPUTAPE_UNDER_DEBUGGER",
        "unset",
        "`replay --debug`",
        Run,
        "Marks the replay cuda-gdb runs, so it replays in place instead of starting the debugger again (set by `replay --debug`, not by hand).",
    ),
];

/// The row of `name`, if gputape reads it.
pub fn find(name: &str) -> Option<&'static Var> {
    VARS.iter().find(|v| v.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_each_name_is_listed_once() {
        for w in VARS.windows(2) {
            assert!(w[0].name < w[1].name, "{} then {}", w[0].name, w[1].name);
        }
        assert!(VARS.iter().all(|v| v.name.starts_with("GPUTAPE_")));
    }
}
