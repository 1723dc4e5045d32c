//! The converter's calls for graphs built node by node and executables changed after they
//! were made: where a node's work goes, and the trace graphs made of nodes (a capture on a
//! stream of the graph's own), kept apart from `record`'s match (`graphs.rs` keeps the nodes).

use super::*;

impl Converter {
    /// Work `rec` of a graph node, where `to` says: held with its graph, or made an
    /// executable's (or a graph's) new parameters.
    pub(super) fn node_work(&mut self, to: NodeTo, rec: CallRecord) {
        match to {
            NodeTo::Add { graph, node } => {
                let captured = self.graph_grows(graph);
                self.built.add(graph, node, rec, captured);
            }
            NodeTo::InGraph { node, first } => {
                let head = (rec.thread, rec.site, rec.t_ns);
                match self.built.set_in_graph(node, first, rec) {
                    // Instantiations from here run the new parameters: a trace graph of their own.
                    Ok(graph) => {
                        self.graphs.remove(&graph);
                    }
                    Err(name) => {
                        *self.summary.opaque.entry(name.clone()).or_default() += 1;
                        self.place_own(head, Call::Opaque { name });
                    }
                }
            }
            NodeTo::InExec { exec, node, first } => self.built.set_in_exec(exec, node, first, rec),
        }
    }

    /// `graph` gains a node (or a child graph's): whether it was made by a capture (which the
    /// recording holds as the capture, not node by node). Otherwise a trace graph made of it
    /// before is stale: instantiations from here make another.
    pub(super) fn graph_grows(&mut self, graph: u64) -> bool {
        let captured = self.graphs.contains_key(&graph) && !self.built.built(graph);
        if !captured {
            self.graphs.remove(&graph);
        }
        captured
    }

    /// The trace graph instantiating `graph` runs: its capture's, or one made now of the nodes
    /// it was built of (where it has none yet, or its nodes changed since). None for a graph
    /// the recording does not hold.
    pub(super) fn trace_graph(&mut self, graph: u64, head: (u16, SiteId, u64)) -> Option<GraphId> {
        if !self.graphs.contains_key(&graph) && self.built.built(graph) {
            self.build_graph(graph, head);
        }
        self.graphs.get(&graph).copied()
    }

    /// Executable `exec` runs trace graph `id` from here; the graph it ran, left with no
    /// executable, is destroyed (placed at `head`).
    pub(super) fn rebind(&mut self, exec: u64, id: GraphId, head: (u16, SiteId, u64)) {
        *self.exec_count.entry(id).or_default() += 1;
        let Some(old) = self.execs.insert(exec, id) else {
            return;
        };
        if !self.unused(old) {
            return;
        }
        self.place_own(head, Call::DestroyGraph { graph: old });
    }

    /// One executable fewer runs trace graph `id`: whether it is now unused (and destroyed:
    /// the caller places the call).
    pub(super) fn unused(&mut self, id: GraphId) -> bool {
        let left = self.exec_count.entry(id).or_default();
        *left = left.saturating_sub(1);
        *left == 0 && self.dead.insert(id)
    }

    /// The trace graph a launch of `exec` runs: a new one, made here, when the executable
    /// changed since its graph was made (`cuGraphExec*NodeSetParams`, `cuGraphNodeSetEnabled`).
    pub(super) fn changed_graph(&mut self, exec: u64, r: &Record<'_>) -> Option<GraphId> {
        if let Some(work) = self.built.take_changed(exec) {
            let head = self.head(r);
            let id = self.build_from(work, head);
            self.summary.graph_changes += 1;
            self.rebind(exec, id, head);
        }
        self.execs.get(&exec).copied()
    }

    /// A graph built node by node (`handle`), as the trace says a graph: a capture of its
    /// nodes, in the order they were added, on a stream of the graph's own, made where it is
    /// first instantiated (`head`: the instantiating call's thread, site and time). A replay
    /// rebuilds it as it rebuilds a captured graph.
    pub(super) fn build_graph(&mut self, handle: u64, head: (u16, SiteId, u64)) -> GraphId {
        let work = self.built.work_of(handle);
        let id = self.build_from(work, head);
        self.graphs.insert(handle, id);
        self.summary.node_graphs += 1;
        id
    }

    /// A trace graph of `nodes`' work: a capture of it, on a stream of its own, made here.
    /// Its event nodes are not captured (an event recorded inside a capture is the capture's
    /// own, which no stream outside it may wait for): each launch of the graph waits for the
    /// events it waited for, and records those it recorded just after (`around_launch`). A
    /// wait then holds the whole graph, and a record comes after all of it: never a weaker
    /// order than the nodes had.
    pub(super) fn build_from(
        &mut self,
        nodes: Vec<CallRecord>,
        head: (u16, SiteId, u64),
    ) -> GraphId {
        let stream = StreamRef::Id(self.adopted_stream());
        let id = GraphId(self.next_graph);
        self.next_graph += 1;
        let mut events = GraphEvents::default();
        let nodes: Vec<CallRecord> = nodes
            .into_iter()
            .filter(|n| match n.call {
                Call::StreamWaitEvent { event, .. } => {
                    events.waits.push(event);
                    false
                }
                Call::RecordEvent { event, .. } => {
                    events.records.push(event);
                    false
                }
                _ => true,
            })
            .collect();
        if !events.waits.is_empty() || !events.records.is_empty() {
            self.summary.graph_event_nodes += events.waits.len() + events.records.len();
            self.graph_events.insert(id, events);
        }
        self.number(own_call(head, Call::BeginCapture { stream }, Value::Unit));
        for mut n in nodes {
            // Logged as if queued on stream 0: each node is the graph stream's work.
            n.call.operands_mut(&mut |o| {
                if let OperandMut::Stream(s, _) = o {
                    *s = stream;
                }
            });
            // A copy node writing the host writes it at each launch of the graph: a region of
            // its own, pinned, as a captured copy to the host needs in a replay.
            if let Call::CopyD2HAsync { len, dst, .. } = &mut n.call {
                if matches!(dst, HostAddr::Unknown) {
                    *dst = self.own_pinned(*len);
                }
            }
            self.number(n);
        }
        self.number(own_call(
            head,
            Call::EndCapture { stream },
            Value::Graph(id),
        ));
        id
    }

    /// Around a launch of trace graph `graph` on `stream` (at `head`): the waits for the events
    /// its event nodes waited for, placed now (before the launch), and the records of the
    /// events they recorded, queued for just after it.
    pub(super) fn around_launch(
        &mut self,
        graph: GraphId,
        stream: StreamRef,
        head: (u16, SiteId, u64),
    ) {
        let Some(events) = self.graph_events.get(&graph) else {
            return;
        };
        let (waits, records) = (events.waits.clone(), events.records.clone());
        for event in waits {
            self.place_own(head, Call::StreamWaitEvent { stream, event });
        }
        self.after.extend(
            records
                .into_iter()
                .map(|event| Call::RecordEvent { event, stream }),
        );
    }
}

/// The events a trace graph's event nodes wait for and record, in the order added.
#[derive(Clone, Debug, Default)]
pub(super) struct GraphEvents {
    waits: Vec<EventId>,
    records: Vec<EventId>,
}
