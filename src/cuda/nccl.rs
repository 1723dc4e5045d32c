//! Collectives on CUDA through NCCL, loaded at run time through cudarc's bindings
//! (`libnccl.so.2` on the loader's path, or `GPUTAPE_NCCL_LIB`, opened first so the by-name load
//! finds it). The only file besides the driver layer that calls into a CUDA library, with a
//! `// SAFETY:` line per call.
//!
//! A trace names a communicator by a 16-byte `CommUniqueId`; NCCL's unique id is 128 bytes.
//! The 128 bytes are kept in a process-wide table under a 16-byte key derived from them, so
//! ranks that are threads of one process (as gputape's rank sets are: `replay_ranks`, the
//! tests) find the real id from the key. Ranks in other processes would need the 128 bytes
//! passed themselves: not supported, and `comm_init` says so.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use cudarc::nccl::sys;

use crate::backend::{CollDtype, Collective, CommHandle, CommUniqueId, DevicePtr, ReduceOp};

/// A full path to `libnccl.so.2`, loaded before the by-name search.
pub const ENV_NCCL_LIB: &str = "GPUTAPE_NCCL_LIB";

/// NCCL's ids by the key a trace keeps.
static IDS: Mutex<Option<HashMap<[u8; 16], sys::ncclUniqueId>>> = Mutex::new(None);

/// Whether NCCL can be loaded (asked once; cudarc's loader panics when it is absent, so it is
/// not touched unless this says yes).
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        if let Some(p) = std::env::var_os(ENV_NCCL_LIB) {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = std::ffi::CString::new(p.as_bytes()) {
                // SAFETY: a NUL-terminated path; loading NCCL runs its constructors, which is
                // what using it means. RTLD_GLOBAL so cudarc's load by soname finds this copy.
                let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
                if h.is_null() {
                    tracing::warn!("{ENV_NCCL_LIB}={}: dlopen failed", p.to_string_lossy());
                }
            }
        }
        // SAFETY: only asks the loader whether a library of NCCL's names opens.
        unsafe { sys::is_culib_present() }
    })
}

fn ensure() -> Result<()> {
    if available() {
        Ok(())
    } else {
        bail!(
            "NCCL was not found: put libnccl.so.2 on the loader's path or set {ENV_NCCL_LIB} to \
             its full path (PyTorch's Python keeps one in site-packages/nvidia/nccl/lib)"
        )
    }
}

fn check(what: &str, r: sys::ncclResult_t) -> Result<()> {
    if r == sys::ncclResult_t::ncclSuccess {
        Ok(())
    } else {
        Err(anyhow!("{what} failed: {r:?}"))
    }
}

/// A new NCCL unique id, kept under the key returned.
pub fn unique_id() -> Result<CommUniqueId> {
    ensure()?;
    // SAFETY: a plain C struct of bytes; NCCL overwrites it.
    let mut id: sys::ncclUniqueId = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer to a local that outlives the call.
    check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut id) })?;
    let bytes: Vec<u8> = id.internal.iter().map(|c| *c as u8).collect();
    let hash = blake3::hash(&bytes);
    let mut key = [0u8; 16];
    key.copy_from_slice(&hash.as_bytes()[..16]);
    IDS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, id);
    Ok(CommUniqueId(key))
}

/// Joins communicator `id` as `rank` of `nranks`, on the calling thread's current context.
pub fn init(id: CommUniqueId, nranks: u32, rank: u32) -> Result<CommHandle> {
    ensure()?;
    let real = IDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&id.0).copied())
        .ok_or_else(|| {
            anyhow!(
                "communicator {id} was not made in this process: NCCL ranks of a gputape rank \
                 set are threads of one process"
            )
        })?;
    let mut comm: sys::ncclComm_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; `real` is an id NCCL made; every rank of `nranks` must
    // call this (the trait's contract), or it waits.
    check("ncclCommInitRank", unsafe {
        sys::ncclCommInitRank(&mut comm, nranks as i32, real, rank as i32)
    })
    .with_context(|| format!("joining communicator {id} as rank {rank} of {nranks}"))?;
    Ok(CommHandle(comm as u64))
}

fn dtype(d: CollDtype) -> sys::ncclDataType_t {
    use sys::ncclDataType_t as T;
    match d {
        CollDtype::F32 => T::ncclFloat32,
        CollDtype::Bf16 => T::ncclBfloat16,
        CollDtype::F16 => T::ncclFloat16,
        CollDtype::I32 => T::ncclInt32,
        CollDtype::U8 => T::ncclUint8,
    }
}

fn op(o: ReduceOp) -> sys::ncclRedOp_t {
    use sys::ncclRedOp_t as O;
    match o {
        ReduceOp::Sum => O::ncclSum,
        ReduceOp::Prod => O::ncclProd,
        ReduceOp::Max => O::ncclMax,
        ReduceOp::Min => O::ncclMin,
    }
}

/// Enqueues collective `c` on `stream`.
///
/// # Safety
/// `comm` came from [`init`] and is not destroyed; `stream` is a live stream of the context
/// the communicator was made on (or 0); `send` and `recv` hold the bytes
/// `Collective::send_bytes` and `recv_bytes` say, for as long as the stream runs it.
pub unsafe fn collective(
    comm: CommHandle,
    c: Collective,
    send: DevicePtr,
    recv: DevicePtr,
    count: u64,
    d: CollDtype,
    stream: u64,
) -> Result<()> {
    let (comm, s) = (comm.0 as sys::ncclComm_t, stream as sys::cudaStream_t);
    let (sb, rb) = (send.0 as *const _, recv.0 as *mut _);
    let (n, t) = (count as usize, dtype(d));
    // SAFETY (each call): the function's contract gives live buffers of the sizes NCCL reads
    // and writes for this collective, a live communicator and a stream of its context.
    let r = unsafe {
        match c {
            Collective::AllReduce(o) => sys::ncclAllReduce(sb, rb, n, t, op(o), comm, s),
            Collective::AllGather => sys::ncclAllGather(sb, rb, n, t, comm, s),
            Collective::ReduceScatter(o) => sys::ncclReduceScatter(sb, rb, n, t, op(o), comm, s),
            Collective::Broadcast { root } => {
                sys::ncclBroadcast(sb, rb, n, t, root as i32, comm, s)
            }
            Collective::Send { peer } => sys::ncclSend(sb, n, t, peer as i32, comm, s),
            Collective::Recv { peer } => sys::ncclRecv(rb, n, t, peer as i32, comm, s),
        }
    };
    check(&format!("nccl {}", c.name()), r)
}

/// Leaves communicator `comm`.
///
/// # Safety
/// `comm` came from [`init`] and is used no more.
pub unsafe fn destroy(comm: CommHandle) -> Result<()> {
    // SAFETY: the function's contract.
    check("ncclCommDestroy", unsafe {
        sys::ncclCommDestroy(comm.0 as sys::ncclComm_t)
    })
}
