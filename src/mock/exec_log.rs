//! What the mock did, in the order it did it: allocations and frees, and each unit of device
//! work as it ran, on its stream, with the events recorded and waited for between them. It
//! is what a snapshot of a replay's allocation and ordering is taken from
//! (`replayer::replay_layout`): read off the device the replay ran on, not re-rendered from
//! the trace, so a replay that allocated or ordered differently from its recording shows.
//! Off unless asked for (`MockGpuBackend::log_execution`); under chaos, work is logged when
//! the scheduler runs it, so the log holds the order the seed chose.

/// One thing the mock did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Executed {
    /// Device memory allocated (`alloc`, `alloc_managed`, `alloc_at`).
    Alloc { base: u64, size: usize },
    /// Device memory freed.
    Free { base: u64 },
    /// Device work run on `stream` (a graph's nodes on the stream that launched it).
    Ran { stream: u64, work: Ran },
    /// `record_event` on `stream`.
    Recorded { event: u64, stream: u64 },
    /// `stream_wait_event`: `stream` waits for `event`.
    Waited { stream: u64, event: u64 },
}

/// A unit of device work as it ran: device addresses as the mock has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ran {
    Launch {
        kernel: String,
        grid: [u32; 3],
        block: [u32; 3],
    },
    H2D {
        dst: u64,
        len: usize,
    },
    D2H {
        src: u64,
        len: usize,
    },
    D2D {
        src: u64,
        dst: u64,
        len: usize,
    },
    Memset {
        dst: u64,
        value: u8,
        len: usize,
    },
    Graph {
        graph: u64,
    },
    Collective,
}

/// Entries kept at most: a long replay logs its first million things and counts the rest.
pub(crate) const MAX_LOGGED: usize = 1 << 20;

/// The log as the mock keeps it.
#[derive(Default)]
pub(crate) struct ExecLog {
    pub entries: Vec<Executed>,
    pub dropped: u64,
}

impl ExecLog {
    pub fn push(&mut self, e: Executed) {
        if self.entries.len() < MAX_LOGGED {
            self.entries.push(e);
        } else {
            self.dropped += 1;
        }
    }
}
