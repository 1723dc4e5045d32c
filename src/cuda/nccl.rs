//! Collectives on CUDA through NCCL, opened at run time by gputape itself: `GPUTAPE_NCCL_LIB`
//! when set, else `libnccl.so.2` (then `libnccl.so`) by the loader's search. The only file
//! besides the driver layer that calls into a CUDA library, with a `// SAFETY:` line per call.
//! The C types are cudarc's NCCL bindings'.
//!
//! Why not cudarc's own loader: it searches names of its own (`libnccl.so`, `libnccl.so.13`,
//! ...; never `libnccl.so.2`), so on a machine with a second NCCL elsewhere it opened that
//! one beside the one `GPUTAPE_NCCL_LIB` named, and the H200 answered the first all-reduce with
//! "corrupted comm object" (run 79). One handle, opened once, every entry point looked up in
//! it, and the path and version said in every error.
//!
//! A trace names a communicator by a 16-byte `CommUniqueId`; NCCL's unique id is 128 bytes.
//! The 128 bytes are kept in a process-wide table under a 16-byte key derived from them, so
//! ranks that are threads of one process (as gputape's rank sets are: `replay_ranks`, the
//! tests) find the real id from the key. Ranks in other processes would need the 128 bytes
//! passed themselves: not supported, and `comm_init` says so.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

use crate::backend::{CollDtype, Collective, CommHandle, CommUniqueId, DevicePtr, ReduceOp};

/// A full path to `libnccl.so.2`, opened instead of searching by name.
pub const ENV_NCCL_LIB: &str = "GPUTAPE_NCCL_LIB";

/// NCCL's ids by the key a trace keeps.
static IDS: Mutex<Option<HashMap<[u8; 16], ncclUniqueId>>> = Mutex::new(None);

type Stream = *mut c_void;
type Reduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    ncclComm_t,
    Stream,
) -> ncclResult_t;
type Gather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclComm_t,
    Stream,
) -> ncclResult_t;
type Bcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    c_int,
    ncclComm_t,
    Stream,
) -> ncclResult_t;
type Peer = unsafe extern "C" fn(
    *mut c_void,
    usize,
    ncclDataType_t,
    c_int,
    ncclComm_t,
    Stream,
) -> ncclResult_t;

/// The one NCCL this process uses: where it came from and its entry points.
struct Nccl {
    path: String,
    version: c_int,
    get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> ncclResult_t,
    comm_init_rank:
        unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> ncclResult_t,
    comm_destroy: unsafe extern "C" fn(ncclComm_t) -> ncclResult_t,
    group_start: unsafe extern "C" fn() -> ncclResult_t,
    group_end: unsafe extern "C" fn() -> ncclResult_t,
    all_reduce: Reduce,
    reduce_scatter: Reduce,
    all_gather: Gather,
    broadcast: Bcast,
    send: Peer,
    recv: Peer,
    error_string: unsafe extern "C" fn(ncclResult_t) -> *const c_char,
    last_error: Option<unsafe extern "C" fn(ncclComm_t) -> *const c_char>,
}

/// Opens `name` (a path, or a name for the loader's search); `None` when it does not open.
fn open(name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; opening NCCL runs its constructors, which is what using
    // it means.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    (!h.is_null()).then_some(h)
}

/// Looks `name` up in `lib` as a function of type `F` (a function pointer type).
fn sym<F: Copy>(lib: *mut c_void, path: &str, name: &str) -> Result<F> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let c = CString::new(name).expect("entry point names hold no NUL");
    // SAFETY: `lib` is a handle dlopen returned and never closed; the name is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        bail!("{path} has no {name}: not an NCCL 2.x library");
    }
    // SAFETY: `F` is the C signature NCCL's header gives `name`, a pointer-sized fn type.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn load() -> Result<Nccl, String> {
    let tried: Vec<String> = match std::env::var(ENV_NCCL_LIB) {
        Ok(p) => vec![p],
        Err(_) => vec!["libnccl.so.2".into(), "libnccl.so".into()],
    };
    let (lib, path) = tried
        .iter()
        .find_map(|n| open(n).map(|h| (h, n.clone())))
        .ok_or_else(|| {
            format!(
                "NCCL was not found (tried {}): put libnccl.so.2 on the loader's path or set \
                 {ENV_NCCL_LIB} to its full path (PyTorch's Python keeps one in \
                 site-packages/nvidia/nccl/lib)",
                tried.join(", ")
            )
        })?;
    let s = |e: anyhow::Error| e.to_string();
    let get_version: unsafe extern "C" fn(*mut c_int) -> ncclResult_t =
        sym(lib, &path, "ncclGetVersion").map_err(s)?;
    let mut version = 0;
    // SAFETY: a valid out-pointer to a local.
    unsafe { get_version(&mut version) };
    Ok(Nccl {
        get_unique_id: sym(lib, &path, "ncclGetUniqueId").map_err(s)?,
        comm_init_rank: sym(lib, &path, "ncclCommInitRank").map_err(s)?,
        comm_destroy: sym(lib, &path, "ncclCommDestroy").map_err(s)?,
        group_start: sym(lib, &path, "ncclGroupStart").map_err(s)?,
        group_end: sym(lib, &path, "ncclGroupEnd").map_err(s)?,
        all_reduce: sym(lib, &path, "ncclAllReduce").map_err(s)?,
        reduce_scatter: sym(lib, &path, "ncclReduceScatter").map_err(s)?,
        all_gather: sym(lib, &path, "ncclAllGather").map_err(s)?,
        broadcast: sym(lib, &path, "ncclBroadcast").map_err(s)?,
        send: sym(lib, &path, "ncclSend").map_err(s)?,
        recv: sym(lib, &path, "ncclRecv").map_err(s)?,
        error_string: sym(lib, &path, "ncclGetErrorString").map_err(s)?,
        last_error: sym(lib, &path, "ncclGetLastError").ok(),
        path,
        version,
    })
}

fn nccl() -> Result<&'static Nccl> {
    static LIB: OnceLock<Result<Nccl, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| anyhow!("{e}"))
}

/// Whether NCCL opens here.
pub fn available() -> bool {
    nccl().is_ok()
}

/// Which NCCL is in use: its path and version (`2.28.3`), for logs and reports.
pub fn describe() -> Result<String> {
    let n = nccl()?;
    let v = n.version;
    let (major, minor, patch) = if v >= 10000 {
        (v / 10000, v / 100 % 100, v % 100)
    } else {
        (v / 1000, v / 100 % 10, v % 100)
    };
    Ok(format!("NCCL {major}.{minor}.{patch} from {}", n.path))
}

fn check(n: &Nccl, what: &str, r: ncclResult_t, comm: Option<ncclComm_t>) -> Result<()> {
    if r == ncclResult_t::ncclSuccess {
        return Ok(());
    }
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: NCCL returns NUL-terminated static or per-thread strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: plain lookups of NCCL's messages; `comm` is the live communicator of the call.
    let (msg, last) = unsafe {
        (
            text((n.error_string)(r)),
            n.last_error
                .map(|f| text(f(comm.unwrap_or(std::ptr::null_mut())))),
        )
    };
    let last = last.filter(|l| !l.is_empty()).map(|l| format!(" ({l})"));
    Err(anyhow!(
        "{what} failed: {r:?}: {msg}{} [{}]",
        last.unwrap_or_default(),
        describe().unwrap_or_default()
    ))
}

/// A new NCCL unique id, kept under the key returned.
pub fn unique_id() -> Result<CommUniqueId> {
    let n = nccl()?;
    // SAFETY: a plain C struct of bytes; NCCL overwrites it.
    let mut id: ncclUniqueId = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer to a local that outlives the call.
    check(
        n,
        "ncclGetUniqueId",
        unsafe { (n.get_unique_id)(&mut id) },
        None,
    )?;
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
    let n = nccl()?;
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
    let mut comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; `real` is an id NCCL made; every rank of `nranks` must
    // call this (the trait's contract), or it waits.
    let r = unsafe { (n.comm_init_rank)(&mut comm, nranks as c_int, real, rank as c_int) };
    check(n, "ncclCommInitRank", r, None)
        .with_context(|| format!("joining communicator {id} as rank {rank} of {nranks}"))?;
    Ok(CommHandle(comm as u64))
}

fn dtype(d: CollDtype) -> ncclDataType_t {
    use ncclDataType_t as T;
    match d {
        CollDtype::F32 => T::ncclFloat32,
        CollDtype::Bf16 => T::ncclBfloat16,
        CollDtype::F16 => T::ncclFloat16,
        CollDtype::I32 => T::ncclInt32,
        CollDtype::U8 => T::ncclUint8,
    }
}

fn op(o: ReduceOp) -> ncclRedOp_t {
    use ncclRedOp_t as O;
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
    let n = nccl()?;
    let (comm, s) = (comm.0 as ncclComm_t, stream as Stream);
    let (sb, rb) = (send.0 as *const c_void, recv.0 as *mut c_void);
    let (k, t) = (count as usize, dtype(d));
    // SAFETY (each call): the function's contract gives live buffers of the sizes NCCL reads
    // and writes for this collective, a live communicator and a stream of its context.
    let r = unsafe {
        match c {
            Collective::AllReduce(o) => (n.all_reduce)(sb, rb, k, t, op(o), comm, s),
            Collective::AllGather => (n.all_gather)(sb, rb, k, t, comm, s),
            Collective::ReduceScatter(o) => (n.reduce_scatter)(sb, rb, k, t, op(o), comm, s),
            Collective::Broadcast { root } => (n.broadcast)(sb, rb, k, t, root as c_int, comm, s),
            Collective::Send { peer } => (n.send)(sb as *mut c_void, k, t, peer as c_int, comm, s),
            Collective::Recv { peer } => (n.recv)(rb, k, t, peer as c_int, comm, s),
        }
    };
    check(n, &format!("nccl {}", c.name()), r, Some(comm))
}

/// Opens a group on this thread (`ncclGroupStart`).
pub fn group_start() -> Result<()> {
    let n = nccl()?;
    // SAFETY: takes nothing; NCCL keeps the group per thread.
    let r = unsafe { (n.group_start)() };
    check(n, "ncclGroupStart", r, None)
}

/// Closes this thread's group (`ncclGroupEnd`): the outermost end issues its collectives.
pub fn group_end() -> Result<()> {
    let n = nccl()?;
    // SAFETY: takes nothing; NCCL answers a thread without an open group with an error.
    let r = unsafe { (n.group_end)() };
    check(n, "ncclGroupEnd", r, None)
}

/// Leaves communicator `comm`.
///
/// # Safety
/// `comm` came from [`init`] and is used no more.
pub unsafe fn destroy(comm: CommHandle) -> Result<()> {
    let n = nccl()?;
    // SAFETY: the function's contract.
    let r = unsafe { (n.comm_destroy)(comm.0 as ncclComm_t) };
    check(n, "ncclCommDestroy", r, None)
}
