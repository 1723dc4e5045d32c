//! Graphs the program built node by node, and executables it changed after instantiating
//! them: which work each node runs, kept here by the node's handle until the converter makes a
//! trace graph of it (where a graph is instantiated, or where a changed executable is next
//! launched).
//!
//! A CUDA executable graph is a copy of its graph as it was at instantiation: new parameters
//! for a node in the graph (`cuGraph*NodeSetParams`) reach instantiations made later, new
//! parameters in an executable (`cuGraphExec*NodeSetParams`, `cuGraphNodeSetEnabled`) reach
//! only that executable, and `cuGraphExecUpdate` gives an executable another graph's nodes and
//! parameters. This keeps the same copies, so each launch replays the work that launch ran.
//!
//! A captured graph's calls are its node list too, by the node each became (`CapturedNode`), so
//! new parameters for a captured node are followed the same way. What it cannot follow it says,
//! per executable: new parameters for a node it does not know (a capture made while another
//! was open, or logged before this build named captured nodes), a child graph it has no nodes
//! of. Such an executable's launches are not replayed as the old graph (which would run the
//! wrong work without a word) but kept by name with the reason.

use std::collections::{HashMap, HashSet};

use crate::trace::{Call, CallRecord};

/// Where a thread's next work record goes: a `NodeWork` (or older `GraphNode`) marker read.
#[derive(Clone, Copy, Debug)]
pub(super) enum NodeTo {
    /// A node added to `graph`.
    Add { graph: u64, node: u64 },
    /// New work for `node` in the graph that holds it (`first`: its first record).
    InGraph { node: u64, first: bool },
    /// New work for `node` in executable `exec`.
    InExec { exec: u64, node: u64, first: bool },
}

impl NodeTo {
    /// The marker's fields as the log has them (`how` 0 add, 1 in a graph, 2 in an
    /// executable); None for a kind this build does not know.
    pub(super) fn of(target: u64, node: u64, how: u8, first: bool) -> Option<NodeTo> {
        match how {
            0 => Some(NodeTo::Add {
                graph: target,
                node,
            }),
            1 => Some(NodeTo::InGraph { node, first }),
            2 => Some(NodeTo::InExec {
                exec: target,
                node,
                first,
            }),
            _ => None,
        }
    }
}

/// One record of a node's work, by the node's handle (0: not known). A memset of several rows
/// is several records of one node.
#[derive(Clone)]
struct Work {
    node: u64,
    rec: CallRecord,
}

/// An executable's own copy of its graph's nodes.
#[derive(Default)]
struct Exec {
    work: Vec<Work>,
    /// Nodes turned off (`cuGraphNodeSetEnabled`).
    disabled: HashSet<u64>,
    /// Changed since the trace's graph for it was made.
    changed: bool,
}

#[derive(Default)]
pub(super) struct Graphs {
    /// Graphs built node by node (and their clones): their work so far, in the order added.
    graphs: HashMap<u64, Vec<Work>>,
    /// The graph each known node handle is in.
    node_graph: HashMap<u64, u64>,
    /// Graphs holding work the recording could not follow, and why.
    lost_graphs: HashMap<u64, String>,
    /// Executables made from a graph built node by node: their own copies.
    execs: HashMap<u64, Exec>,
    /// Executables changed in a way the recording could not follow, and why.
    lost_execs: HashMap<u64, String>,
}

/// The entry point that gives a node new work of `call`'s kind (`exec`: in an executable).
fn set_params_name(call: &Call, exec: bool) -> String {
    let kind = match call {
        Call::Launch { .. } => "KernelNodeSetParams",
        Call::MemsetAsync { .. } | Call::Memset { .. } => "MemsetNodeSetParams",
        Call::HostFunc { .. } => "HostNodeSetParams",
        Call::RecordEvent { .. } => "EventRecordNodeSetEvent",
        Call::StreamWaitEvent { .. } => "EventWaitNodeSetEvent",
        _ => "MemcpyNodeSetParams",
    };
    let exec = if exec { "Exec" } else { "" };
    format!("cuGraph{exec}{kind}")
}

/// Puts `rec`, work of `node`, in `work`: the node's first record replaces what the node ran
/// (at its place), a later one goes after the node's last. None when the node is not there.
fn replace(work: &mut Vec<Work>, node: u64, first: bool, rec: CallRecord) -> Option<()> {
    if node == 0 {
        return None;
    }
    let at = if first {
        let at = work.iter().position(|w| w.node == node)?;
        work.retain(|w| w.node != node);
        at
    } else {
        work.iter().rposition(|w| w.node == node)? + 1
    };
    work.insert(at, Work { node, rec });
    Some(())
}

impl Graphs {
    /// Whether `graph` was built node by node (its work is here).
    pub(super) fn built(&self, graph: u64) -> bool {
        self.graphs.contains_key(&graph)
    }

    /// `graph`'s work, in the order added.
    pub(super) fn work_of(&self, graph: u64) -> Vec<CallRecord> {
        let work = self.graphs.get(&graph).map(Vec::as_slice).unwrap_or(&[]);
        work.iter().map(|w| w.rec.clone()).collect()
    }

    /// `graph`, made by a capture, ran `work`: each call by the node it became (0: not known).
    pub(super) fn captured(&mut self, graph: u64, work: Vec<(u64, CallRecord)>) {
        for &(node, _) in &work {
            if node != 0 {
                self.node_graph.insert(node, graph);
            }
        }
        let work = work
            .into_iter()
            .map(|(node, rec)| Work { node, rec })
            .collect();
        self.graphs.insert(graph, work);
        self.lost_graphs.remove(&graph);
    }

    /// Work `rec` of node `node`, added to `graph`; `captured`: the graph was made by a
    /// capture, whose nodes the recording holds as the capture, not here.
    pub(super) fn add(&mut self, graph: u64, node: u64, rec: CallRecord, captured: bool) {
        if captured {
            self.lose_graph(graph, "a node added to it after its capture");
            return;
        }
        if node != 0 {
            self.node_graph.insert(node, graph);
        }
        self.graphs
            .entry(graph)
            .or_default()
            .push(Work { node, rec });
    }

    /// New work `rec` for `node` in the graph holding it: that graph's handle (its trace graph,
    /// if made, no longer what a new instantiation runs), or the entry point's name with why
    /// it cannot be followed.
    pub(super) fn set_in_graph(
        &mut self,
        node: u64,
        first: bool,
        rec: CallRecord,
    ) -> Result<u64, String> {
        let name = set_params_name(&rec.call, false);
        let graph = self.node_graph.get(&node).copied();
        let done = graph
            .and_then(|g| self.graphs.get_mut(&g))
            .and_then(|work| replace(work, node, first, rec));
        match (graph, done) {
            (Some(g), Some(())) => Ok(g),
            _ => Err(format!("{name} (a node the recording does not know)")),
        }
    }

    /// New work `rec` for `node` in executable `exec`, from its next launch.
    pub(super) fn set_in_exec(&mut self, exec: u64, node: u64, first: bool, rec: CallRecord) {
        let name = set_params_name(&rec.call, true);
        let done = self
            .execs
            .get_mut(&exec)
            .and_then(|e| {
                e.changed = true;
                replace(&mut e.work, node, first, rec)
            })
            .is_some();
        if !done {
            self.lose_exec(
                exec,
                format!("after {name} on a node the recording does not know"),
            );
        }
    }

    /// Node `node` of executable `exec` runs at its launches from here, or not.
    pub(super) fn set_enabled(&mut self, exec: u64, node: u64, enabled: bool) {
        let known = self
            .execs
            .get(&exec)
            .is_some_and(|e| e.work.iter().any(|w| w.node == node && node != 0));
        match self.execs.get_mut(&exec) {
            Some(e) if known => {
                e.changed = if enabled {
                    e.disabled.remove(&node)
                } else {
                    e.disabled.insert(node)
                } || e.changed;
            }
            // Turning on a node of a graph the recording has no nodes of changes nothing it
            // replays; turning one off does.
            _ if enabled => {}
            _ => self.lose_exec(
                exec,
                "after cuGraphNodeSetEnabled on a node the recording does not know".into(),
            ),
        }
    }

    /// Node `node` of `graph` runs `child`'s nodes (as they are now).
    pub(super) fn child(&mut self, graph: u64, node: u64, child: u64, captured_parent: bool) {
        let Some(work) = self.graphs.get(&child).filter(|_| !captured_parent) else {
            let why = if captured_parent {
                "a child graph added to it after its capture"
            } else {
                "a child graph the recording has no nodes of"
            };
            self.lose_graph(graph, why);
            return;
        };
        let work: Vec<Work> = work
            .iter()
            .map(|w| Work {
                node,
                rec: w.rec.clone(),
            })
            .collect();
        if let Some(why) = self.lost_graphs.get(&child).cloned() {
            self.lose_graph(graph, &why);
        }
        if node != 0 {
            self.node_graph.insert(node, graph);
        }
        self.graphs.entry(graph).or_default().extend(work);
    }

    /// Node `node` is gone from the graph holding it (`cuGraphDestroyNode`): that graph's
    /// handle (its trace graph, if made, no longer what a new instantiation runs), or None for
    /// a node the recording does not know. Executables made before keep it, as the driver's do.
    pub(super) fn destroy_node(&mut self, node: u64) -> Option<u64> {
        let graph = self.node_graph.remove(&node).filter(|_| node != 0)?;
        self.graphs.get_mut(&graph)?.retain(|w| w.node != node);
        Some(graph)
    }

    /// Child-graph node `node` of executable `exec` runs `child`'s nodes from its next launch
    /// (`cuGraphExecChildGraphNodeSetParams`), in the place of the ones it ran.
    pub(super) fn exec_child(&mut self, exec: u64, node: u64, child: u64) {
        let work: Option<Vec<Work>> = self.graphs.get(&child).map(|w| {
            w.iter()
                .map(|w| Work {
                    node,
                    rec: w.rec.clone(),
                })
                .collect()
        });
        let lost = self.lost_graphs.get(&child).cloned();
        let done = match (self.execs.get_mut(&exec), work, lost) {
            (Some(e), Some(work), None) if node != 0 => {
                match e.work.iter().position(|w| w.node == node) {
                    Some(at) => {
                        e.work.retain(|w| w.node != node);
                        e.work.splice(at..at, work);
                        e.changed = true;
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        };
        if !done {
            self.lose_exec(
                exec,
                "after cuGraphExecChildGraphNodeSetParams with a node or graph the recording does not know".into(),
            );
        }
    }

    /// `clone` is a copy of `original`, built node by node (its nodes' handles are the
    /// clone's own, which the log does not name: new parameters for them are not followed).
    pub(super) fn clone_graph(&mut self, clone: u64, original: u64) {
        if let Some(work) = self.graphs.get(&original) {
            let work = work
                .iter()
                .map(|w| Work {
                    node: 0,
                    rec: w.rec.clone(),
                })
                .collect();
            self.graphs.insert(clone, work);
        }
        match self.lost_graphs.get(&original).cloned() {
            Some(why) => self.lose_graph(clone, &why),
            None => {
                self.lost_graphs.remove(&clone);
            }
        }
    }

    /// Executable `exec` made from (or updated to) `graph`: a copy of its nodes where it was
    /// built node by node; what the recording could not follow in it, the executable's too.
    pub(super) fn instantiate(&mut self, exec: u64, graph: u64) {
        match self.graphs.get(&graph) {
            Some(work) => {
                let e = Exec {
                    work: work.clone(),
                    ..Exec::default()
                };
                self.execs.insert(exec, e);
            }
            None => {
                self.execs.remove(&exec);
            }
        }
        match self.lost_graphs.get(&graph).cloned() {
            Some(why) => self.lose_exec(exec, format!("made from a graph with {why}")),
            None => {
                self.lost_execs.remove(&exec);
            }
        }
    }

    /// Executable `exec` updated to `graph` (`cuGraphExecUpdate`): it runs `graph`'s nodes
    /// and parameters from here, and the driver pairs them with the executable's own nodes by
    /// the graphs' shared shape, so the executable's node handles still name them (paired here
    /// by the order the nodes were added, where both are known and as many).
    pub(super) fn update(&mut self, exec: u64, graph: u64) {
        let handles: Option<Vec<u64>> = self
            .execs
            .get(&exec)
            .map(|e| e.work.iter().map(|w| w.node).collect());
        self.instantiate(exec, graph);
        if let (Some(handles), Some(e)) = (handles, self.execs.get_mut(&exec)) {
            if handles.len() == e.work.len() {
                for (w, h) in e.work.iter_mut().zip(handles) {
                    w.node = h;
                }
            }
        }
    }

    /// Why `exec`'s launches cannot be replayed, if they cannot.
    pub(super) fn lost(&self, exec: u64) -> Option<&str> {
        self.lost_execs.get(&exec).map(String::as_str)
    }

    /// Marks `exec` as not replayable from here, and why.
    pub(super) fn lose_exec(&mut self, exec: u64, why: String) {
        self.lost_execs.entry(exec).or_insert(why);
    }

    fn lose_graph(&mut self, graph: u64, why: &str) {
        self.lost_graphs
            .entry(graph)
            .or_insert_with(|| why.to_string());
    }

    /// The work `exec` runs now, if it changed since its trace graph was made (the nodes
    /// turned off left out); it is then that graph's.
    pub(super) fn take_changed(&mut self, exec: u64) -> Option<Vec<CallRecord>> {
        let e = self.execs.get_mut(&exec).filter(|e| e.changed)?;
        e.changed = false;
        let on = e.work.iter().filter(|w| !e.disabled.contains(&w.node));
        Some(on.map(|w| w.rec.clone()).collect())
    }

    /// Forgets `exec` (a handle the driver may hand out again).
    pub(super) fn destroy_exec(&mut self, exec: u64) {
        self.execs.remove(&exec);
        self.lost_execs.remove(&exec);
    }

    /// Forgets `graph` and its nodes.
    pub(super) fn destroy_graph(&mut self, graph: u64) {
        self.graphs.remove(&graph);
        self.lost_graphs.remove(&graph);
        self.node_graph.retain(|_, g| *g != graph);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DevAddr, SiteId, Value};

    fn memset(value: u8) -> CallRecord {
        CallRecord {
            seq: 0,
            thread: 0,
            site: SiteId(0),
            t_ns: 0,
            dur_ns: Some(0),
            call: Call::Memset {
                dst: DevAddr::Null,
                value,
                len: 4,
            },
            ret: Some(Ok(Value::Unit)),
        }
    }

    fn values(recs: &[CallRecord]) -> Vec<u8> {
        recs.iter()
            .map(|r| match r.call {
                Call::Memset { value, .. } => value,
                _ => 0,
            })
            .collect()
    }

    /// An executable keeps its graph as it was when made: new parameters in the graph reach
    /// only later instantiations, new parameters in the executable only that one; a node of
    /// several records is replaced whole; a node turned off is left out.
    #[test]
    fn executables_keep_their_own_copy_of_the_graph() {
        let mut g = Graphs::default();
        g.add(1, 10, memset(1), false);
        g.add(1, 11, memset(2), false);
        g.add(1, 11, memset(3), false);
        g.instantiate(100, 1);
        assert!(g.take_changed(100).is_none(), "not changed yet");
        assert_eq!(g.set_in_graph(11, true, memset(4)), Ok(1));
        g.instantiate(101, 1);
        g.set_in_exec(100, 10, true, memset(5));
        assert_eq!(values(&g.take_changed(100).unwrap()), [5, 2, 3]);
        assert_eq!(values(&g.work_of(1)), [1, 4]);
        g.set_enabled(101, 11, false);
        assert_eq!(values(&g.take_changed(101).unwrap()), [1]);
        g.set_enabled(101, 11, true);
        assert_eq!(values(&g.take_changed(101).unwrap()), [1, 4]);
        assert!(g.lost(100).is_none() && g.lost(101).is_none());
    }

    /// What cannot be followed is said, per executable, and a child graph's nodes are copied
    /// into its parent.
    #[test]
    fn a_destroyed_node_leaves_later_instantiations_and_a_new_child_one_executable() {
        let mut g = Graphs::default();
        g.add(1, 11, memset(1), false);
        g.add(1, 12, memset(2), false);
        g.instantiate(100, 1);
        assert_eq!(g.destroy_node(12), Some(1));
        assert_eq!(values(&g.work_of(1)), [1]);
        // The executable made before keeps the node, as the driver's does.
        assert_eq!(g.take_changed(100), None);
        g.instantiate(101, 1);
        assert_eq!(g.destroy_node(99), None);
        // A child node given another graph in one executable.
        g.add(2, 21, memset(5), false);
        g.add(3, 31, memset(7), false);
        g.child(4, 41, 2, false);
        g.instantiate(102, 4);
        g.exec_child(102, 41, 3);
        assert_eq!(values(&g.take_changed(102).unwrap()), [7]);
        assert_eq!(values(&g.work_of(4)), [5]);
        g.exec_child(102, 99, 3);
        assert!(g.lost(102).is_some());
    }

    #[test]
    fn what_cannot_be_followed_loses_the_executable_and_says_why() {
        let mut g = Graphs::default();
        g.add(1, 10, memset(1), false);
        g.add(2, 20, memset(7), false);
        g.child(1, 12, 2, false);
        g.instantiate(100, 1);
        assert_eq!(
            values(&g.take_changed(100).unwrap_or_default()),
            [] as [u8; 0]
        );
        assert_eq!(values(&g.work_of(1)), [1, 7]);
        // A captured graph's executable: its nodes have no handles here.
        g.instantiate(200, 9);
        g.set_in_exec(200, 90, true, memset(2));
        assert_eq!(
            g.lost(200),
            Some("after cuGraphExecMemsetNodeSetParams on a node the recording does not know")
        );
        assert!(g.set_in_graph(90, true, memset(2)).is_err());
        g.child(3, 30, 9, false);
        g.instantiate(300, 3);
        assert!(
            g.lost(300).unwrap().contains("child graph"),
            "{:?}",
            g.lost(300)
        );
        g.clone_graph(4, 3);
        g.instantiate(400, 4);
        assert!(g.lost(400).is_some());
        // Updated to a clone (whose nodes the log does not name), an executable's own node
        // handles still name its nodes.
        g.clone_graph(5, 1);
        g.update(100, 5);
        g.set_in_exec(100, 10, true, memset(8));
        assert_eq!(values(&g.take_changed(100).unwrap()), [8, 7]);
        // Updated to a graph it can follow: replayable again.
        g.instantiate(200, 1);
        assert!(g.lost(200).is_none());
    }
}
