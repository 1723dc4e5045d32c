//! Graphs built node by node (`cuGraphAddKernelNode`, `cuGraphAddMemcpyNode`,
//! `cuGraphAddMemsetNode`, `cuGraphAddHostNode`, and `cuGraphAddNode`'s tagged union of them),
//! and graphs changed after they were made: each node is logged when it is added, as the
//! launch, copy, memset or host function it runs, after a `NodeWork` record naming its graph
//! and its handle; new parameters for a node (`cuGraph*NodeSetParams` in a graph,
//! `cuGraphExec*NodeSetParams` in an executable) are logged the same way, as the work the node
//! runs from then on. Child graphs, clones, whole-graph updates (`cuGraphExecUpdate`) and
//! nodes turned off in an executable (`cuGraphNodeSetEnabled`) are logged as what they say.
//! An event record or wait node is logged as the event record or wait it is (on stream 0, as
//! the other nodes' work): the converter lifts those out of the graph to its launches.
//! The converter (`shimtrace::graphs`) turns a graph's nodes into a capture of them on a
//! stream of the graph's own, made where the graph is instantiated (or where a changed
//! executable is next launched), so a replay builds the same graph the way it rebuilds a
//! captured one. Nodes run in the order they were added: a node's dependencies exist before
//! it, so that order is one the graph allows (it loses only the parallelism between
//! independent nodes). Allocation, semaphore and memory-operation nodes are forwarded and
//! logged by name, not recorded.

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
const NODE_HOST: u32 = 3;
const NODE_GRAPH: u32 = 4;
const NODE_EMPTY: u32 = 5;
const NODE_WAIT_EVENT: u32 = 6;
const NODE_EVENT_RECORD: u32 = 7;

// The union's members fit its 29 words, as the driver's header lays them out.
const _: () = assert!(size_of::<KernelNodeV2>() <= 29 * 8 && size_of::<MemcpyNode>() <= 29 * 8);

/// Where a node's work goes (`Rec::NodeWork`'s `target` and `how`), and which node it is.
#[derive(Clone, Copy)]
pub struct NodeTo {
    target: u64,
    node: u64,
    how: u8,
}

impl NodeTo {
    /// A node added to `graph` with status `r`: its handle the one the driver wrote through
    /// `node` (0 where it failed, or the pointer is null).
    fn added(r: R, graph: u64, node: *const u64) -> NodeTo {
        // SAFETY: read only after the driver succeeded, when it wrote the new node's handle
        // through the caller's non-null pointer.
        let node = if r != 0 || node.is_null() {
            0
        } else {
            unsafe { *node }
        };
        NodeTo {
            target: graph,
            node,
            how: 0,
        }
    }

    /// New parameters for `node` in the graph that holds it.
    fn in_graph(node: u64) -> NodeTo {
        NodeTo {
            target: 0,
            node,
            how: 1,
        }
    }

    /// New parameters for `node` in executable `exec`.
    fn in_exec(exec: u64, node: u64) -> NodeTo {
        NodeTo {
            target: exec,
            node,
            how: 2,
        }
    }

    /// Writes the marker before one of the node's work records (`first`: its first).
    pub(super) fn mark(self, first: bool) {
        log::write(
            0,
            Rec::NodeWork {
                target: self.target,
                node: self.node,
                how: self.how,
                first,
            },
        );
    }
}

/// Logs a kernel node's launch for `to`, taken with status `r`: its function `func` (or the
/// library kernel `kern` a v2 node may name instead), after the node's marker.
///
/// # Safety
/// `p` is the node's parameters the driver just read (valid when `r` is 0).
unsafe fn log_kernel(r: R, to: NodeTo, p: &KernelNode, kern: u64) {
    // While the recording is paused a node's work would be dropped and its marker kept (a
    // marker is state): neither is written.
    if r != 0 || !log::active() {
        return;
    }
    let func = if p.func != 0 { p.func } else { kern };
    to.mark(true);
    let dims = LaunchDims::plain(p.grid, p.block, p.shared_mem, 0);
    launch::log(r, func, dims, p.params, p.extra);
}

/// Logs a memset node's work for `to`, taken with status `r`: a memset a row, each after a
/// marker.
fn log_memset(r: R, to: NodeTo, p: &MemsetNode) {
    if r != 0 || !log::active() || !matches!(p.element_size, 1 | 2 | 4) {
        return;
    }
    let on = On {
        stream: 0,
        sync: false,
    };
    for y in 0..p.height.max(1) as u64 {
        to.mark(y == 0);
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

/// `CUDA_HOST_NODE_PARAMS` (v2 adds a sync mode after these fields).
#[repr(C)]
pub struct HostNode {
    func: usize,
    data: *mut c_void,
}

/// Logs a host node's function for `to`, taken with status `r`, after the node's marker.
fn log_host(r: R, to: NodeTo, p: &HostNode) {
    if r != 0 || !log::active() {
        return;
    }
    to.mark(true);
    let func = super::record::host_function_name(p.func);
    log::write(
        r,
        Rec::HostFunc {
            stream: 0,
            func: &func,
        },
    );
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
    // SAFETY: the driver read the parameters through `p` (v2: the whole larger struct).
    unsafe { log_kernel_params::<V2>(r, NodeTo::added(r, graph, node), p) };
    r
}

/// Logs kernel node parameters `p` (`V2`: the v2/v3 struct) for `to`.
///
/// # Safety
/// `p` is null or the parameters the driver just read.
unsafe fn log_kernel_params<const V2: bool>(r: R, to: NodeTo, p: *const KernelNode) {
    if p.is_null() {
        return;
    }
    // SAFETY: the contract (v2: the whole larger struct was read).
    let kern = if V2 {
        unsafe { (*p.cast::<KernelNodeV2>()).kern }
    } else {
        0
    };
    // SAFETY: as above.
    unsafe { log_kernel(r, to, &*p, kern) };
}

/// `cuGraphKernelNodeSetParams(_v2)`: (CUgraphNode, const params*).
pub unsafe extern "C" fn set_kernel_node<const I: usize, const V2: bool>(
    node: u64,
    p: *const KernelNode,
) -> R {
    // SAFETY: entry point I is a cuGraphKernelNodeSetParams form: (CUgraphNode, params*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *const KernelNode) -> R>(I)(node, p) };
    // SAFETY: the driver read the parameters through `p`.
    unsafe { log_kernel_params::<V2>(r, NodeTo::in_graph(node), p) };
    r
}

/// `cuGraphExecKernelNodeSetParams(_v2)`: (CUgraphExec, CUgraphNode, const params*).
pub unsafe extern "C" fn exec_set_kernel_node<const I: usize, const V2: bool>(
    exec: u64,
    node: u64,
    p: *const KernelNode,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, *const KernelNode) -> R;
    // SAFETY: entry point I is a cuGraphExecKernelNodeSetParams form, whose signature F is.
    let r = unsafe { real_at::<F>(I)(exec, node, p) };
    // SAFETY: the driver read the parameters through `p`.
    unsafe { log_kernel_params::<V2>(r, NodeTo::in_exec(exec, node), p) };
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
        log_memset(r, NodeTo::added(r, graph, node), unsafe { &*p });
    }
    r
}

/// `cuGraphMemsetNodeSetParams`: (CUgraphNode, const params*).
pub unsafe extern "C" fn set_memset_node<const I: usize>(node: u64, p: *const MemsetNode) -> R {
    // SAFETY: entry point I is cuGraphMemsetNodeSetParams: (CUgraphNode, params*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *const MemsetNode) -> R>(I)(node, p) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p`.
        log_memset(r, NodeTo::in_graph(node), unsafe { &*p });
    }
    r
}

/// `cuGraphExecMemsetNodeSetParams`: (CUgraphExec, CUgraphNode, const params*, CUcontext).
pub unsafe extern "C" fn exec_set_memset_node<const I: usize>(
    exec: u64,
    node: u64,
    p: *const MemsetNode,
    ctx: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, *const MemsetNode, u64) -> R;
    // SAFETY: entry point I is cuGraphExecMemsetNodeSetParams, whose signature F is.
    let r = unsafe { real_at::<F>(I)(exec, node, p, ctx) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p`.
        log_memset(r, NodeTo::in_exec(exec, node), unsafe { &*p });
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
    unsafe { log_node_copy(r, NodeTo::added(r, graph, node), p) };
    r
}

/// `cuGraphMemcpyNodeSetParams`: (CUgraphNode, const CUDA_MEMCPY3D*).
pub unsafe extern "C" fn set_memcpy_node<const I: usize>(node: u64, p: *const Memcpy3D) -> R {
    // SAFETY: entry point I is cuGraphMemcpyNodeSetParams: (CUgraphNode, CUDA_MEMCPY3D*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *const Memcpy3D) -> R>(I)(node, p) };
    // SAFETY: `p` is what the driver just read; its host sides the program's memory.
    unsafe { log_node_copy(r, NodeTo::in_graph(node), p) };
    r
}

/// `cuGraphExecMemcpyNodeSetParams`: (CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D*,
/// CUcontext).
pub unsafe extern "C" fn exec_set_memcpy_node<const I: usize>(
    exec: u64,
    node: u64,
    p: *const Memcpy3D,
    ctx: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, *const Memcpy3D, u64) -> R;
    // SAFETY: entry point I is cuGraphExecMemcpyNodeSetParams, whose signature F is.
    let r = unsafe { real_at::<F>(I)(exec, node, p, ctx) };
    // SAFETY: `p` is what the driver just read; its host sides the program's memory.
    unsafe { log_node_copy(r, NodeTo::in_exec(exec, node), p) };
    r
}

/// `cuGraphAddHostNode`: (CUgraphNode*, CUgraph, deps, size_t, const CUDA_HOST_NODE_PARAMS*).
pub unsafe extern "C" fn add_host_node<const I: usize>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    p: *const HostNode,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, *const HostNode) -> R;
    // SAFETY: entry point I is cuGraphAddHostNode, whose signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, p) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p`.
        log_host(r, NodeTo::added(r, graph, node), unsafe { &*p });
    }
    r
}

/// `cuGraphHostNodeSetParams`: (CUgraphNode, const CUDA_HOST_NODE_PARAMS*).
pub unsafe extern "C" fn set_host_node<const I: usize>(node: u64, p: *const HostNode) -> R {
    // SAFETY: entry point I is cuGraphHostNodeSetParams: (CUgraphNode, params*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *const HostNode) -> R>(I)(node, p) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p`.
        log_host(r, NodeTo::in_graph(node), unsafe { &*p });
    }
    r
}

/// `cuGraphExecHostNodeSetParams`: (CUgraphExec, CUgraphNode, const CUDA_HOST_NODE_PARAMS*).
pub unsafe extern "C" fn exec_set_host_node<const I: usize>(
    exec: u64,
    node: u64,
    p: *const HostNode,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, *const HostNode) -> R;
    // SAFETY: entry point I is cuGraphExecHostNodeSetParams, whose signature F is.
    let r = unsafe { real_at::<F>(I)(exec, node, p) };
    if !p.is_null() {
        // SAFETY: the driver read the parameters through `p`.
        log_host(r, NodeTo::in_exec(exec, node), unsafe { &*p });
    }
    r
}

/// Logs `cuGraphAddNode`'s or `cuGraph(Exec)NodeSetParams`'s node parameters for `to` by
/// their kind. A kind not recorded is logged by name, as opaque, where the work would be.
///
/// # Safety
/// `p` is null or the parameters the driver just read.
unsafe fn log_node(r: R, to: NodeTo, p: *const NodeParams) {
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
            log_kernel(r, to, &k.head, k.kern);
        },
        NODE_MEMCPY => unsafe {
            let m = union.cast::<MemcpyNode>();
            log_node_copy(r, to, &raw const (*m).copy);
        },
        NODE_MEMSET => log_memset(r, to, unsafe { &*union.cast::<MemsetNode>() }),
        NODE_HOST => log_host(r, to, unsafe { &*union.cast::<HostNode>() }),
        // A child graph added (`CUDA_CHILD_GRAPH_NODE_PARAMS` starts with the child graph).
        NODE_GRAPH if to.how == 0 => log_child(r, to.target, to.node, unsafe { *union }),
        // An empty node runs nothing; the order of the rest is the order they were added.
        NODE_EMPTY => {}
        // `CUDA_EVENT_RECORD_NODE_PARAMS` / `CUDA_EVENT_WAIT_NODE_PARAMS`: the event first.
        NODE_EVENT_RECORD => log_event(r, to, unsafe { *union }, false),
        NODE_WAIT_EVENT => log_event(r, to, unsafe { *union }, true),
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
    unsafe { log_node(r, NodeTo::added(r, graph, node), p) };
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
    unsafe { log_node(r, NodeTo::added(r, graph, node), p) };
    r
}

/// `cuGraphNodeSetParams`: (CUgraphNode, CUgraphNodeParams*).
pub unsafe extern "C" fn set_node<const I: usize>(node: u64, p: *mut NodeParams) -> R {
    // SAFETY: entry point I is cuGraphNodeSetParams: (CUgraphNode, CUgraphNodeParams*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *mut NodeParams) -> R>(I)(node, p) };
    // SAFETY: `p` is what the driver just read.
    unsafe { log_node(r, NodeTo::in_graph(node), p) };
    r
}

/// `cuGraphExecNodeSetParams`: (CUgraphExec, CUgraphNode, CUgraphNodeParams*).
pub unsafe extern "C" fn exec_set_node<const I: usize>(
    exec: u64,
    node: u64,
    p: *mut NodeParams,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, *mut NodeParams) -> R;
    // SAFETY: entry point I is cuGraphExecNodeSetParams, whose signature F is.
    let r = unsafe { real_at::<F>(I)(exec, node, p) };
    // SAFETY: `p` is what the driver just read.
    unsafe { log_node(r, NodeTo::in_exec(exec, node), p) };
    r
}

/// Logs an event node's work for `to`, taken with status `r`: the record of `event` (or, with
/// `wait`, a wait for it) on stream 0, after the node's marker.
fn log_event(r: R, to: NodeTo, event: u64, wait: bool) {
    if r != 0 || !log::active() {
        return;
    }
    to.mark(true);
    let rec = if wait {
        Rec::StreamWaitEvent { stream: 0, event }
    } else {
        Rec::EventRecord { event, stream: 0 }
    };
    log::write(r, rec);
}

/// `cuGraphAddEventRecordNode` (`WAIT` false) and `cuGraphAddEventWaitNode`: (CUgraphNode*,
/// CUgraph, deps, size_t, CUevent).
pub unsafe extern "C" fn add_event_node<const I: usize, const WAIT: bool>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    event: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, u64) -> R;
    // SAFETY: entry point I is cuGraphAddEventRecordNode or cuGraphAddEventWaitNode, whose
    // signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, event) };
    log_event(r, NodeTo::added(r, graph, node), event, WAIT);
    r
}

/// `cuGraphEventRecordNodeSetEvent` (`WAIT` false) and `cuGraphEventWaitNodeSetEvent`:
/// (CUgraphNode, CUevent).
pub unsafe extern "C" fn set_event_node<const I: usize, const WAIT: bool>(
    node: u64,
    event: u64,
) -> R {
    // SAFETY: entry point I is cuGraphEvent{Record,Wait}NodeSetEvent: (CUgraphNode, CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(node, event) };
    log_event(r, NodeTo::in_graph(node), event, WAIT);
    r
}

/// `cuGraphExecEventRecordNodeSetEvent` (`WAIT` false) and `cuGraphExecEventWaitNodeSetEvent`:
/// (CUgraphExec, CUgraphNode, CUevent).
pub unsafe extern "C" fn exec_set_event_node<const I: usize, const WAIT: bool>(
    exec: u64,
    node: u64,
    event: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, u64) -> R;
    // SAFETY: entry point I is cuGraphExecEvent{Record,Wait}NodeSetEvent, whose signature F is.
    let r = unsafe { real_at::<F>(I)(exec, node, event) };
    log_event(r, NodeTo::in_exec(exec, node), event, WAIT);
    r
}

/// `cuGraphAddChildGraphNode`: (CUgraphNode*, CUgraph, deps, size_t, CUgraph child).
pub unsafe extern "C" fn add_child_node<const I: usize>(
    node: *mut u64,
    graph: u64,
    deps: *const u64,
    n: usize,
    child: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const u64, usize, u64) -> R;
    // SAFETY: entry point I is cuGraphAddChildGraphNode, whose signature F is.
    let r = unsafe { real_at::<F>(I)(node, graph, deps, n, child) };
    log_child(r, graph, NodeTo::added(r, graph, node).node, child);
    r
}

/// `cuGraphDestroyNode`: (CUgraphNode).
pub unsafe extern "C" fn destroy_node<const I: usize>(node: u64) -> R {
    // SAFETY: entry point I is cuGraphDestroyNode: (CUgraphNode).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(node) };
    if r == 0 && log::active() {
        log::write(r, Rec::NodeDestroyed { node });
    }
    r
}

/// `cuGraphExecChildGraphNodeSetParams`: (CUgraphExec, CUgraphNode, CUgraph child).
pub unsafe extern "C" fn exec_set_child_node<const I: usize>(
    exec: u64,
    node: u64,
    child: u64,
) -> R {
    // SAFETY: entry point I is cuGraphExecChildGraphNodeSetParams: (CUgraphExec, CUgraphNode,
    // CUgraph).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, u64) -> R>(I)(exec, node, child) };
    if r == 0 && log::active() {
        log::write(r, Rec::ExecChildGraph { exec, node, child });
    }
    r
}

/// Logs node `node` of `graph`, added with status `r`, as running graph `child`'s nodes.
fn log_child(r: R, graph: u64, node: u64, child: u64) {
    if r == 0 && log::active() {
        log::write(r, Rec::ChildGraph { graph, node, child });
    }
}

/// `cuGraphClone`: (CUgraph* clone, CUgraph original).
pub unsafe extern "C" fn clone<const I: usize>(clone: *mut u64, original: u64) -> R {
    // SAFETY: entry point I is cuGraphClone: (CUgraph*, CUgraph).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u64) -> R>(I)(clone, original) };
    if r == 0 && !clone.is_null() {
        // SAFETY: on success the driver wrote the clone through the caller's pointer.
        let clone = unsafe { *clone };
        log::write(r, Rec::GraphClone { clone, original });
    }
    r
}

/// `cuGraphExecUpdate` (CUgraphExec, CUgraph, CUgraphNode* error node, result*) and
/// `cuGraphExecUpdate_v2` (CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*): the hook
/// passes on four integer-class arguments (the `_v2` form ignores the last; SysV x86-64, the
/// caller cleans up).
pub unsafe extern "C" fn exec_update<const I: usize>(exec: u64, graph: u64, a: u64, b: u64) -> R {
    // SAFETY: entry point I is a cuGraphExecUpdate form, whose arguments are integer-class
    // and at most four (above); they are passed on as they came.
    let r =
        unsafe { real_at::<unsafe extern "C" fn(u64, u64, u64, u64) -> R>(I)(exec, graph, a, b) };
    // An update the driver refused changed nothing.
    if r == 0 {
        log::write(r, Rec::GraphUpdate { exec, graph });
    }
    r
}

/// `cuGraphNodeSetEnabled`: (CUgraphExec, CUgraphNode, unsigned isEnabled).
pub unsafe extern "C" fn set_enabled<const I: usize>(exec: u64, node: u64, on: u32) -> R {
    // SAFETY: entry point I is cuGraphNodeSetEnabled: (CUgraphExec, CUgraphNode, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32) -> R>(I)(exec, node, on) };
    if r == 0 {
        let enabled = on != 0;
        log::write(
            r,
            Rec::NodeEnabled {
                exec,
                node,
                enabled,
            },
        );
    }
    r
}
