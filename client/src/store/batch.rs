//! Batching concurrent acquires into one write to Redis.
//!
//! Under load most of what a check costs Redis is not its command but the wake-up that reads
//! it (the `read`, the parse, the reply's `write`): a check sent on its own pays one of
//! those. The [`Batcher`] lets checks that arrive while an earlier call is still on its way
//! wait for it (at most [`BatchOptions::window`], or until [`BatchOptions::max`] are waiting)
//! and sends them together as one pipeline, one write, so Redis reads them in one wake-up.
//! Each check is still its own command, with its own all-or-nothing and its own reply.
//!
//! A check that finds nothing in flight and nothing waiting is never held: it is sent at
//! once, from the caller's task. On a Redis Cluster every check is sent on its own (see
//! [`Batcher::run`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::oneshot;

use super::connection::{Connection, store_error};
use super::error::StoreError;
use super::liveness::Liveness;

/// How long concurrent checks may wait to share one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// Longest a check waits for the call in flight before it is sent anyway; zero sends
    /// every check on its own (no batching). The runtime's timer counts in whole
    /// milliseconds, so a wait that runs out ends at the next millisecond tick.
    pub window: Duration,
    /// Most checks in one write: a batch that reaches it is sent at once.
    pub max: usize,
}

impl BatchOptions {
    /// The default window (`--batch-window-us`), measured by `make bench-service`.
    pub const DEFAULT_WINDOW: Duration = Duration::from_micros(200);
    /// The default largest batch (`--batch-max`).
    pub const DEFAULT_MAX: usize = 64;
    /// The largest batch accepted: bounds a write and the reply Redis builds for it.
    pub const LIMIT_MAX: usize = 1024;

    /// Every check sent on its own.
    pub const OFF: BatchOptions = BatchOptions {
        window: Duration::ZERO,
        max: 1,
    };

    fn enabled(&self) -> bool {
        !self.window.is_zero() && self.max > 1
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            window: Self::DEFAULT_WINDOW,
            max: Self::DEFAULT_MAX,
        }
    }
}

/// A check waiting for its batch: its command and where its reply goes.
struct Job {
    command: Cmd,
    reply: oneshot::Sender<Result<Value, StoreError>>,
}

/// The checks waiting for one slot (or for the one server).
#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    /// Counts the batches taken from this queue, so a window's timer knows whether the
    /// checks it was started for are still waiting.
    taken: u64,
}

#[derive(Default)]
struct State {
    /// Batches (and lone checks) sent and not answered yet.
    in_flight: usize,
    queues: HashMap<Option<u16>, Queue>,
}

/// Holds concurrent checks of one store for a shared write (see the module's doc).
pub(crate) struct Batcher {
    options: BatchOptions,
    state: Mutex<State>,
    /// Told of a batch's reply as soon as it comes, before its callers' tasks run.
    liveness: Arc<Liveness>,
}

/// What a submitted check does next.
enum Next {
    /// Send it now, alone, from the caller's task.
    Alone(Cmd),
    /// Wait for its batch's reply.
    Wait(oneshot::Receiver<Result<Value, StoreError>>),
}

impl Batcher {
    pub(crate) fn new(options: BatchOptions, liveness: Arc<Liveness>) -> Arc<Self> {
        let options = BatchOptions {
            window: options.window,
            max: options.max.clamp(1, BatchOptions::LIMIT_MAX),
        };
        Arc::new(Self {
            options,
            state: Mutex::new(State::default()),
            liveness,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one still has consistent counts.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `command` (for a key in `slot`) on `connection`, alone or in a batch: its own
    /// reply, which may be an error reply (`Value::ServerError`) for the caller to read.
    pub(crate) async fn run(
        self: &Arc<Self>,
        connection: &Connection,
        slot: Option<u16>,
        command: Cmd,
    ) -> Result<Value, StoreError> {
        // A Redis Cluster's connection is not batched: a pipeline that writes is sent there
        // one command at a time, each following its own redirect (during a failover or a
        // slot's migration some of a pipeline's commands may run and the rest be redirected;
        // see `Connection::pipeline`), so a batch would save no round trip.
        if !self.options.enabled() || matches!(connection, Connection::Cluster(_)) {
            return connection
                .query_raw(&command)
                .await
                .map_err(|error| store_error(&error));
        }
        match self.submit(connection, slot, command) {
            Next::Alone(command) => {
                let guard = InFlight(Arc::clone(self), connection.clone());
                let reply = connection
                    .query_raw(&command)
                    .await
                    .map_err(|error| store_error(&error));
                drop(guard);
                reply
            }
            Next::Wait(receiver) => receiver.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the batch of this check was dropped".into(),
                ))
            }),
        }
    }

    fn submit(self: &Arc<Self>, connection: &Connection, slot: Option<u16>, command: Cmd) -> Next {
        let mut state = self.lock();
        let idle = state.in_flight == 0;
        let queue = state.queues.entry(slot).or_default();
        if idle && queue.jobs.is_empty() {
            state.in_flight = state.in_flight.saturating_add(1);
            return Next::Alone(command);
        }
        let (reply, receiver) = oneshot::channel();
        queue.jobs.push(Job { command, reply });
        if queue.jobs.len() >= self.options.max {
            let jobs = std::mem::take(&mut queue.jobs);
            queue.taken = queue.taken.wrapping_add(1);
            state.in_flight = state.in_flight.saturating_add(1);
            drop(state);
            self.send(connection.clone(), slot, jobs);
        } else if queue.jobs.len() == 1 {
            let taken = queue.taken;
            drop(state);
            self.start_window(connection.clone(), slot, taken);
        }
        Next::Wait(receiver)
    }

    /// After the window, sends the checks of `slot` that are still waiting since batch
    /// `taken` (if the call in flight has not been answered by then).
    fn start_window(self: &Arc<Self>, connection: Connection, slot: Option<u16>, taken: u64) {
        let batcher = Arc::clone(self);
        spawn(async move {
            tokio::time::sleep(batcher.options.window).await;
            let jobs = {
                let mut state = batcher.lock();
                let Some(queue) = state.queues.get_mut(&slot) else {
                    return;
                };
                if queue.taken != taken || queue.jobs.is_empty() {
                    return;
                }
                queue.taken = queue.taken.wrapping_add(1);
                let jobs = std::mem::take(&mut queue.jobs);
                state.in_flight = state.in_flight.saturating_add(1);
                jobs
            };
            batcher.send(connection, slot, jobs);
        });
    }

    /// Sends `jobs` as one pipeline, from a task of its own (so that no caller giving up
    /// cancels the others' replies), and hands each its reply.
    fn send(self: &Arc<Self>, connection: Connection, slot: Option<u16>, jobs: Vec<Job>) {
        let guard = InFlight(Arc::clone(self), connection.clone());
        spawn(async move {
            // The commands move into the pipeline (no copy of each); the replies' senders
            // stay, in the same order.
            let count = jobs.len();
            let mut pipeline = redis::Pipeline::with_capacity(count);
            let mut replies = Vec::with_capacity(count);
            for job in jobs {
                pipeline.add_command(job.command);
                replies.push(job.reply);
            }
            let replies_or_error = connection.pipeline(&pipeline, count, true).await;
            if replies_or_error.is_ok() {
                guard.0.liveness.heard(slot);
            }
            match replies_or_error {
                Ok(values) if values.len() == count => {
                    for (reply, value) in replies.into_iter().zip(values) {
                        let _ = reply.send(Ok(value));
                    }
                }
                Ok(values) => {
                    let error = StoreError::Server(format!(
                        "unexpected reply: {} replies to a batch of {count}",
                        values.len()
                    ));
                    for reply in replies {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
                Err(error) => {
                    let error = store_error(&error);
                    for reply in replies {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
            drop(guard);
        });
    }

    /// A call was answered: when nothing else is in flight, the checks waiting meanwhile
    /// go now, one batch per slot.
    fn answered(self: &Arc<Self>, connection: &Connection) {
        let batches: Vec<(Option<u16>, Vec<Job>)> = {
            let mut state = self.lock();
            state.in_flight = state.in_flight.saturating_sub(1);
            if state.in_flight > 0 {
                return;
            }
            let mut batches = Vec::new();
            for (slot, queue) in state.queues.iter_mut() {
                if !queue.jobs.is_empty() {
                    queue.taken = queue.taken.wrapping_add(1);
                    batches.push((*slot, std::mem::take(&mut queue.jobs)));
                }
            }
            state.in_flight = batches.len();
            batches
        };
        for (slot, jobs) in batches {
            self.send(connection.clone(), slot, jobs);
        }
    }
}

/// Spawns `task` on the runtime in use; outside one (a store dropped after its runtime)
/// the task is dropped, and with it the replies it owed, which their callers see as an
/// outage.
fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

/// A call in flight: counted down when it is answered or given up (dropped).
struct InFlight(Arc<Batcher>, Connection);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.answered(&self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_bounded() {
        let batcher = Batcher::new(
            BatchOptions {
                window: Duration::from_micros(100),
                max: 1_000_000,
            },
            Arc::default(),
        );
        assert_eq!(batcher.options.max, BatchOptions::LIMIT_MAX);
        assert!(!BatchOptions::OFF.enabled());
        assert!(BatchOptions::default().enabled());
        let zero = Batcher::new(
            BatchOptions {
                window: Duration::from_micros(100),
                max: 0,
            },
            Arc::default(),
        );
        assert!(!zero.options.enabled());
    }
}
