//! Teardown that goes on past a failed release. One free that fails (a pointer the driver
//! refuses, a context a sticky fault killed, an injected failure on the mock) says nothing about
//! the others, so a model's teardown attempts every release once, keeps each failure with what
//! it was releasing, and reports them all together.

use std::fmt;
use thiserror::Error;

/// One release that failed: whose it was, what it released, and why it failed.
#[derive(Debug)]
pub struct ReleaseFailure {
    /// The owning resource's label (`ModelResource::label`, or the model's own).
    pub resource: &'static str,
    /// What was being released: `buffer q`, `tensor l0.wq`, `K pool of layer 1`...
    pub what: String,
    /// Why it failed: the backend's error, chain and all.
    pub error: anyhow::Error,
}

impl fmt::Display for ReleaseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {:#}", self.resource, self.what, self.error)
    }
}

/// Every release of a teardown that failed, each with what it was releasing; the others were
/// still made. The message's first part counts them and names the resources, then each
/// failure follows in the order it happened.
#[derive(Debug, Error)]
#[error("{} release(s) failed at teardown ({}): {}", .failures.len(), resources(.failures), list(.failures))]
pub struct TeardownError {
    /// The failed releases, in the order they were attempted; never empty.
    pub failures: Vec<ReleaseFailure>,
}

fn resources(failures: &[ReleaseFailure]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for f in failures {
        if !names.contains(&f.resource) {
            names.push(f.resource);
        }
    }
    names.join(", ")
}

fn list(failures: &[ReleaseFailure]) -> String {
    let all: Vec<String> = failures.iter().map(ToString::to_string).collect();
    all.join("; ")
}

/// The releases of one teardown, attempted one after another: each failure is kept and the
/// next release still made. `finish` reports them all.
#[derive(Debug, Default)]
pub struct Releases {
    failures: Vec<ReleaseFailure>,
}

impl Releases {
    /// A teardown with nothing attempted yet.
    pub fn new() -> Releases {
        Releases::default()
    }

    /// The outcome of releasing `what`, owned by `resource`.
    pub fn attempt(
        &mut self,
        resource: &'static str,
        what: impl fmt::Display,
        r: anyhow::Result<()>,
    ) {
        if let Err(error) = r {
            self.failures.push(ReleaseFailure {
                resource,
                what: what.to_string(),
                error,
            });
        }
    }

    /// The outcome of a whole resource's release (`ModelResource::release`, which reports its
    /// own failures as a `TeardownError`): those are taken one by one, any other error as one
    /// failure of the resource.
    pub fn resource(&mut self, resource: &'static str, r: anyhow::Result<()>) {
        match r.map_err(|e| e.downcast::<TeardownError>()) {
            Ok(()) => {}
            Err(Ok(t)) => self.failures.extend(t.failures),
            Err(Err(error)) => self.failures.push(ReleaseFailure {
                resource,
                what: "release".to_string(),
                error,
            }),
        }
    }

    /// `Ok` when every release succeeded; otherwise every failure.
    pub fn finish(self) -> Result<(), TeardownError> {
        if self.failures.is_empty() {
            Ok(())
        } else {
            Err(TeardownError {
                failures: self.failures,
            })
        }
    }
}
