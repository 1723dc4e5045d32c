//! Random delays on a replay's streams (`replay --chaos` on CUDA): a kernel that holds its
//! stream for a while, enqueued before a launch at random. A stream whose work is held lets
//! another stream's work that should have waited for it (a missing event) run first, as it
//! might in production under other timing. On the mock the twin does nothing: its chaos is its
//! executor's (queued work run out of order).

use crate::backend::{GpuBackend, HostBody, KernelArg, KernelDesc, KernelHandle, ModuleDesc};
use crate::backend::{ParamAccess, ParamInfo};
use std::sync::Arc;

/// The module's name; nothing a trace records is called this.
pub const MODULE: &str = "gputape_delay";
/// The delay kernel's name.
pub const KERNEL: &str = "gputape_delay";

/// One thread spins on the SM's clock until `ns` nanoseconds have passed (`__nanosleep` in
/// steps, so the SM stays available to other work).
const SOURCE: &str = r#"
extern "C" __global__ void gputape_delay(unsigned long long ns) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    for (;;) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start >= ns) break;
        __nanosleep(1000);
    }
}
"#;

/// The module, its twin a no-op.
pub fn module() -> ModuleDesc {
    let body: HostBody = Arc::new(|_| Ok(()));
    ModuleDesc {
        name: MODULE.into(),
        source: Some(SOURCE.into()),
        kernels: vec![KernelDesc::new(
            KERNEL,
            ParamInfo::packed(&[(8, ParamAccess::Value)]),
            Some(body),
        )],
    }
}

/// Seeded delays: before each launch, with probability 1/2, hold its stream for up to
/// `max_ns`. The same seed gives the same delays.
pub struct Delays {
    handle: KernelHandle,
    state: u64,
    max_ns: u64,
    /// Delays enqueued so far.
    pub count: u64,
}

impl Delays {
    /// Load the delay kernel on `gpu`.
    pub fn new(gpu: &dyn GpuBackend, seed: u64, max_ns: u64) -> anyhow::Result<Delays> {
        gpu.load_module(&module())?;
        Ok(Delays {
            handle: gpu.kernel(MODULE, KERNEL)?,
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            max_ns: max_ns.max(1),
            count: 0,
        })
    }

    /// splitmix64: small, seeded, the same everywhere.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Maybe hold `stream` before the next launch on it.
    pub fn before_launch(&mut self, gpu: &dyn GpuBackend, stream: u64) -> anyhow::Result<()> {
        let r = self.next();
        if r & 1 == 0 {
            return Ok(());
        }
        let ns = (r >> 1) % self.max_ns;
        let b = ns.to_le_bytes();
        gpu.launch_typed(
            self.handle,
            [1, 1, 1],
            [1, 1, 1],
            0,
            stream,
            &[KernelArg::Bytes(&b)],
        )?;
        self.count += 1;
        Ok(())
    }
}
