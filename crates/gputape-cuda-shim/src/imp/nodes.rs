//! Graphs built node by node (`cuGraphAddKernelNode`, `cuGraphAddMemcpyNode`,
//! `cuGraphAddMemsetNode`, and `cuGraphAddNode`'s tagged union of them): each node is logged
//! when it is added, as the launch, copy or memset it runs, after a `GraphNode` record naming
//! its graph. The converter turns a graph's nodes into a capture of them on a stream of the
//! graph's own, made where the graph is instantiated, so a replay builds the same graph the way
//! it rebuilds a captured one. Nodes run in the order they were added: a node's dependencies
//! exist before it, so that order is one the graph allows (it loses only the parallelism
//! between independent nodes). Other node kinds (host functions, child graphs, events,
//! allocations) are forwarded and counted by name, not recorded.

use core::ffi::c_void;

use gputape_shimlog::{On, Rec};

use super::copies::{Memcpy3D, log_node_copy};
use super::launch::{self, LaunchDims};
use super::log;
use super::record::{R, real_at};

/// `CUDA_KERNEL_NODE_PARAMS` (v1), and the head of v2/v3 (which add a `CUkernel` and a context
/// after these fields, read only through `KernelNodeV2`).
#[repr(C)]
pub struct KernelNode {
    func: u64,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2`/`_v3`: v1's fields, then the library kernel a node may name
/// instead of a function, and a context.
#[repr(C)]
pub struct KernelNodeV2 {
    head: KernelNode,
    kern: u64,
    ctx: u64,
}

/// `CUDA_MEMSET_NODE_PARAMS` (v2 adds a context after these fields).
#[repr(C)]
pub struct MemsetNode {
    dst: u64,
    pitch: usize,
    value: u32,
    element_size: u32,
    width: usize,
    height: usize,
}

/// `CUDA_MEMCPY_NODE_PARAMS`, as `cuGraphAddNode`'s union holds it.
#[repr(C)]
struct MemcpyNode {
    flags: i32,
    reserved: i32,
    ctx: u64,
    copy: Memcpy3D,
}

/// `CUgraphNodeParams`: a type, padding, then a 232-byte union of each kind's parameters.
#[repr(C)]
pub struct NodeParams {
    kind: u32,
    reserved: [i32; 3],
    params: [u64; 29],
    reserved2: i64,
}

/// `CUgraphNodeType`'s kinds the recording understands.
const NODE_KERNEL: u32 = 0;
const NODE_MEMCPY: u32 = 1;
const NODE_MEMSET: u32 = 2;
const NODE_EMPTY: u32 = 5;

// The union's members fit its 29 words, as the driver's header lays them out.
const _: () = assert!(size_of::<KernelNodeV2>() <= 29 * 8 && size_of::<MemcpyNode>() <= 29 * 8);

/// Logs a kernel node of `graph` added with status `r`: its launch, its function `func` (or
/// the library kernel `kern` a v2 node may name instead), after the node's marker.
///
/// # Safety
/// `p` is the node's parameters the driver just read (valid when `r` is 0).
unsafe fn log_kernel(r: R, graph: u64, p: &KernelNode, kern: u64) {
    // While the recording is paused a node's work would be dropped and its marker kept (a
    // marker is state): neither is written.
    if r != 0 || !log::active() {
        return;
    }
    let func = if p.func != 0 { p.func } else { kern };
    log::write(0, Rec::GraphNode { graph });
    let dims = LaunchDims::plain(p.grid, p.block, p.shared_mem, 0);
    launch::log(r, func, dims, p.params, p.extra);
}

/// Logs a memset node of `graph` added with status `r`: a memset a row, each after a marker.
fn log_memset(r: R, graph: u64, p: &MemsetNode) {
    if r != 0 || !log::active() || !matches!(p.element_size, 1 | 2 | 4) {
        return;
    }
    let on = On {
        stream: 0,
        sync: false,
    };
    for y in 0..p.height.max(1) as u64 {
        log::write(0, Rec::GraphNode { graph });
        let rec = Rec::Memset {
            dst: p.dst.wrapping_add(y.wrapping_mul(p.pitch as u64)),
            value: p.value,
            elem: p.element_size as u8,
            count: p.width as u64,
            on,
        };
        log::write(r, rec);
    }
}

/// `cuGraphAddKernelNode` (`V2` false: v1 parameters) and `cuGraphAddKernelNode_v2`:
/// (CUgraphNode*, CUgraph, const CUgraphNode* deps, size_t, const params*).
pub unsafe extern "C" fn add_kernel_node<const I: usize, const V2: bool>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    p: *const KernelNode,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, *const KernelNode) -> R;
    // SAFETY: entry point I is a cuGraphAddKernelNode form, whose signature F is (v2 passes a
    // pointer to the larger struct, whose head is `KernelNode`).
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, p) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p` (v2: the whole larger struct).
        let kern = if V2 {
            unsafe { (*p.cast::<KernelNodeV2>()).kern }
        } else {
            0
        };
        // SAFETY: as above.
        unsafe { log_kernel(r, graph, &*p, kern) };
    }
    r
}

/// `cuGraphAddMemsetNode`: (CUgraphNode*, CUgraph, deps, size_t, const params*, CUcontext).
pub unsafe extern "C" fn add_memset_node<const I: usize>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    p: *const MemsetNode,
    ctx: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, *const MemsetNode, u64) -> R;
    // SAFETY: entry point I is cuGraphAddMemsetNode, whose signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, p, ctx) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p`.
        log_memset(r, graph, unsafe { &*p });
    }
    r
}

/// `cuGraphAddMemcpyNode`: (CUgraphNode*, CUgraph, deps, size_t, const CUDA_MEMCPY3D*,
/// CUcontext).
pub unsafe extern "C" fn add_memcpy_node<const I: usize>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    p: *const Memcpy3D,
    ctx: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, *const Memcpy3D, u64) -> R;
    // SAFETY: entry point I is cuGraphAddMemcpyNode, whose signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, p, ctx) };
    // SAFETY: `p` is what the driver just read; its host sides the program's memory.
    unsafe { log_node_copy(r, graph, p) };
    r
}

/// Logs a `cuGraphAddNode` node of `graph` by its kind.
///
/// # Safety
/// `p` is null or the parameters the driver just read.
unsafe fn log_node(r: R, graph: u64, p: *const NodeParams) {
    if p.is_null() {
        return;
    }
    // SAFETY: non-null and read by the driver (the contract).
    let p = unsafe { &*p };
    let union = p.params.as_ptr();
    // SAFETY (each arm): the union holds the member its kind names, as the driver read it.
    match p.kind {
        NODE_KERNEL => unsafe {
            let k = &*union.cast::<KernelNodeV2>();
            log_kernel(r, graph, &k.head, k.kern);
        },
        NODE_MEMCPY => unsafe {
            let m = union.cast::<MemcpyNode>();
            log_node_copy(r, graph, &raw const (*m).copy);
        },
        NODE_MEMSET => log_memset(r, graph, unsafe { &*union.cast::<MemsetNode>() }),
        // An empty node runs nothing; the order of the rest is the order they were added.
        NODE_EMPTY => {}
        _ => {
            log::write(
                r,
                Rec::Opaque {
                    name: b"cuGraphAddNode (a node kind not recorded)",
                },
            );
        }
    }
}

/// `cuGraphAddNode`: (CUgraphNode*, CUgraph, deps, size_t, CUgraphNodeParams*).
pub unsafe extern "C" fn add_node<const I: usize>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    p: *mut NodeParams,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, *mut NodeParams) -> R;
    // SAFETY: entry point I is cuGraphAddNode, whose signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, p) };
    // SAFETY: `p` is what the driver just read.
    unsafe { log_node(r, graph, p) };
    r
}

/// `cuGraphAddNode_v2`: `cuGraphAddNode`'s, with each dependency's edge data after the
/// dependencies: (CUgraphNode*, CUgraph, deps, const CUgraphEdgeData*, size_t, params*).
pub unsafe extern "C" fn add_node_v2<const I: usize>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    edges: *const c_void,
    n: usize,
    p: *mut NodeParams,
) -> R {
    type F =
        unsafe extern "C" fn(*mut u64, u64, *const u64, *const c_void, usize, *mut NodeParams) -> R;
    // SAFETY: entry point I is cuGraphAddNode_v2, whose signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, edges, n, p) };
    // SAFETY: `p` is what the driver just read.
    unsafe { log_node(r, graph, p) };
    r
}
