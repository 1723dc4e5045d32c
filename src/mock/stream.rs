//! Streams, events and graphs, for the mock's `GpuBackend` methods (the trait impl in
//! `backend.rs` calls each `NAME_impl` here): stream creation and synchronisation, events
//! (recorded inside a capture they fork and join streams), beginning a capture, and launching
//! and destroying graphs. The capture emulation itself is `capture.rs`.

use super::*;

impl MockGpuBackend {
    #[track_caller]
    pub(super) fn synchronize_impl(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::chaos_wait(&mut st, Until::Stream(stream)))?;
        mock_try!(Self::tick(&mut st, CallKind::Synchronize, site))?;
        mock_try!(Self::check_stream(&st, stream, "synchronize", site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::StreamSync,
            Some(stream),
            "synchronize",
            site
        ))?;
        Ok(())
    }

    #[track_caller]
    pub(super) fn create_stream_impl(&self) -> anyhow::Result<u64> {
        self.create_stream_of(self.cfg.stream_kind)
    }

    /// A new stream of `kind`.
    #[track_caller]
    pub(super) fn create_stream_of(&self, kind: crate::backend::StreamKind) -> anyhow::Result<u64> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CreateStream, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::HostOnly,
            None,
            "create_stream",
            site
        ))?;
        let s = st.next_stream;
        st.next_stream += 1;
        st.streams.insert(s, kind);
        Ok(s)
    }

    #[track_caller]
    pub(super) fn create_event_impl(&self) -> anyhow::Result<u64> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CreateEvent, site))?;
        let e = st.next_event;
        st.next_event += 1;
        st.events.insert(e, EventState::default());
        Ok(e)
    }

    #[track_caller]
    pub(super) fn record_event_impl(&self, event: u64, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::RecordEvent, site))?;
        if !st.events.contains_key(&event) {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "record_event",
                what: "event",
                id: event,
                site,
            }));
        }
        mock_try!(Self::check_stream(&st, stream, "record_event", site))?;
        let into = mock_try!(Self::judge(
            &mut st,
            CaptureOp::EventRecord,
            Some(stream),
            "record_event",
            site
        ))?;
        let in_capture = into.map(|ci| {
            let n = st.stream_ops.get(&stream).copied().unwrap_or(0);
            (st.captures[ci].origin, stream, n)
        });
        let chaos_at = match into {
            None => mock_try!(Self::chaos_record(&mut st, stream))?,
            Some(_) => None,
        };
        st.events.insert(
            event,
            EventState {
                in_capture,
                chaos_at,
            },
        );
        if into.is_none() {
            Self::log_record(&mut st, event, stream, chaos_at);
        }
        Ok(())
    }

    #[track_caller]
    pub(super) fn stream_wait_event_impl(&self, stream: u64, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::StreamWaitEvent, site))?;
        let Some(ev) = st.events.get(&event).copied() else {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "stream_wait_event",
                what: "event",
                id: event,
                site,
            }));
        };
        mock_try!(Self::check_stream(&st, stream, "stream_wait_event", site))?;
        let op = if ev.in_capture.is_some() {
            CaptureOp::WaitCapturedEvent
        } else {
            CaptureOp::WaitExternalEvent
        };
        let into = mock_try!(Self::judge(
            &mut st,
            op,
            Some(stream),
            "stream_wait_event",
            site
        ))?;
        let mut queued = false;
        if let (None, Some(at)) = (into, ev.chaos_at) {
            queued = mock_try!(Self::chaos_stream_wait(&mut st, stream, event, at))?;
        }
        if let (Some(ci), Some((_, rec_stream, ops_at_record))) = (into, ev.in_capture) {
            let c = &mut st.captures[ci];
            if c.streams.insert(stream) {
                // A fork: the stream now captures and must be joined back before the end.
                c.unjoined.insert(stream);
            }
            // The origin waiting on the tail of a forked stream joins that stream back.
            let now = st.stream_ops.get(&rec_stream).copied().unwrap_or(0);
            let c = &mut st.captures[ci];
            if stream == c.origin && rec_stream != c.origin && now == ops_at_record {
                c.unjoined.remove(&rec_stream);
            }
        }
        if into.is_none() && !queued {
            st.log(|| Executed::Waited { stream, event });
        }
        Ok(())
    }

    #[track_caller]
    pub(super) fn event_synchronize_impl(&self, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        if let Some((s, n)) = st.events.get(&event).and_then(|e| e.chaos_at) {
            mock_try!(Self::chaos_wait(&mut st, Until::Mark(s, n)))?;
        }
        mock_try!(Self::tick(&mut st, CallKind::EventSynchronize, site))?;
        let Some(ev) = st.events.get(&event).copied() else {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "event_synchronize",
                what: "event",
                id: event,
                site,
            }));
        };
        let op = if ev.in_capture.is_some() {
            CaptureOp::SyncCapturedEvent
        } else {
            CaptureOp::SyncExternalEvent
        };
        let stream = ev.in_capture.map(|(_, s, _)| s);
        mock_try!(Self::judge(&mut st, op, stream, "event_synchronize", site))?;
        Ok(())
    }

    #[track_caller]
    pub(super) fn destroy_event_impl(&self, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::DestroyEvent, site))?;
        match st.events.remove(&event) {
            Some(_) => Ok(()),
            None => mock_try!(Err(MockError::UnknownHandle {
                op: "destroy_event",
                what: "event",
                id: event,
                site,
            })),
        }
    }

    #[track_caller]
    pub(super) fn begin_capture_impl(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::BeginCapture, site))?;
        mock_try!(Self::check_stream(&st, stream, "begin_capture", site))?;
        // Against the captures already running (touching the legacy stream kills a blocking
        // one), then against the stream's own state.
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::BeginCapture,
            Some(stream),
            "begin_capture",
            site
        ))?;
        let relation = if stream == LEGACY_STREAM {
            Relation::Legacy
        } else if st.captures.iter().any(|c| c.streams.contains(&stream)) {
            Relation::Capturing
        } else {
            Relation::Other
        };
        let kind = st.streams[&stream];
        let rule = decide(
            CaptureOp::BeginCapture,
            CaptureContext {
                relation,
                kind,
                mode: self.cfg.capture_mode,
                same_thread: true,
            },
        );
        if let Verdict::Fails { .. } = rule.verdict {
            return mock_try!(Err(capture_err("begin_capture", site, rule)));
        }
        st.captures.push(Capture {
            origin: stream,
            streams: BTreeSet::from([stream]),
            unjoined: BTreeSet::new(),
            mode: self.cfg.capture_mode,
            kind,
            thread: std::thread::current().id(),
            work: Vec::new(),
            invalidated: None,
        });
        Ok(())
    }

    #[track_caller]
    pub(super) fn launch_graph_impl(&self, graph: GraphHandle, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::LaunchGraph, site))?;
        if !st.graphs.contains_key(&graph.0) {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "launch_graph",
                what: "graph",
                id: graph.0,
                site,
            }));
        }
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            Work::Graph(graph.0),
            "launch_graph",
            site
        ))
    }

    #[track_caller]
    pub(super) fn destroy_graph_impl(&self, graph: GraphHandle) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        // A queued launch of the graph still needs it (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::All))?;
        mock_try!(Self::tick(&mut st, CallKind::DestroyGraph, site))?;
        match st.graphs.remove(&graph.0) {
            Some(_) => Ok(()),
            None => mock_try!(Err(MockError::UnknownHandle {
                op: "destroy_graph",
                what: "graph",
                id: graph.0,
                site,
            })),
        }
    }

    #[track_caller]
    pub(super) fn abort_capture_if_active_impl(&self, stream: u64) {
        let mut st = self.state.lock();
        if let Some(ci) = st.captures.iter().position(|c| c.streams.contains(&stream)) {
            let c = st.captures.remove(ci);
            for e in st.events.values_mut() {
                if e.in_capture.is_some_and(|(o, _, _)| o == c.origin) {
                    e.in_capture = None;
                }
            }
        }
    }
}
