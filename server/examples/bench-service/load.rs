//! Open-loop HTTP load through Envoy: request `i` is due at `i / rate` s from the start and
//! goes out on the first of several keep-alive HTTP/1.1 connections that is free, whatever
//! is still pending, so a path that falls behind is charged the queueing in its latency.

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use redis_ratelimit_testkit::http::HttpConnection;

/// One request of a run: when it was due, sent and answered, and its status (`None`: the
/// connection failed).
pub struct Answer {
    pub due: Instant,
    pub sent: Instant,
    pub answered: Instant,
    pub status: Option<u16>,
}

/// A run's answers (in the order they were due) and the wall clock at its first due instant,
/// to place them in the limit's windows.
pub struct Load {
    pub answers: Vec<Answer>,
    pub started: Instant,
    pub started_wall: SystemTime,
    pub elapsed: Duration,
}

impl Load {
    /// `at` in seconds since the Unix epoch (as the limit's windows are counted).
    pub fn unix_seconds(&self, at: Instant) -> f64 {
        let since_start = at.saturating_duration_since(self.started).as_secs_f64();
        self.started_wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |epoch| epoch.as_secs_f64())
            + since_start
    }
}

/// `rate` GETs a second with `headers` to `127.0.0.1:port` for `seconds`, over
/// `connections` keep-alive connections opened first. The pending requests are at most the
/// run's `rate × seconds`.
pub fn open_loop(
    port: u16,
    headers: &[(&str, &str)],
    rate: f64,
    seconds: f64,
    connections: usize,
) -> Result<Load, String> {
    let total = (rate * seconds).round() as usize;
    let mut opened = Vec::with_capacity(connections);
    for _ in 0..connections {
        opened.push(HttpConnection::connect(port, headers)?);
    }
    let (due_tx, due_rx) = channel::<Instant>();
    let due_rx = Arc::new(Mutex::new(due_rx));
    let workers: Vec<_> = opened
        .into_iter()
        .map(|connection| {
            let due_rx = Arc::clone(&due_rx);
            std::thread::spawn(move || send_when_due(connection, &due_rx))
        })
        .collect();
    let started = Instant::now();
    let started_wall = SystemTime::now();
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        if due_tx.send(due).is_err() {
            break;
        }
    }
    drop(due_tx);
    let mut answers = Vec::with_capacity(total);
    for worker in workers {
        answers.extend(worker.join().unwrap());
    }
    let elapsed = started.elapsed();
    answers.sort_by_key(|answer| answer.due);
    Ok(Load {
        answers,
        started,
        started_wall,
        elapsed,
    })
}

/// One connection's part of a run: takes the next due request until the run's last.
fn send_when_due(mut connection: HttpConnection, due_rx: &Mutex<Receiver<Instant>>) -> Vec<Answer> {
    let mut answers = Vec::new();
    loop {
        let due = match due_rx.lock().unwrap().recv() {
            Ok(due) => due,
            Err(_) => return answers,
        };
        let sent = Instant::now();
        let status = connection.get().ok();
        answers.push(Answer {
            due,
            sent,
            answered: Instant::now(),
            status,
        });
    }
}

/// The most a warm-up waits for a `200`.
const WARM_UP_LIMIT: Duration = Duration::from_secs(10);

/// Pause between warm-up requests: a new RLQS bucket is assigned within a round trip to
/// the service.
const WARM_UP_PAUSE: Duration = Duration::from_millis(5);

/// Sends GETs with `headers` one at a time until one is answered `200` (an RLQS bucket's
/// first assignment applied): how long that took and how many were answered otherwise.
pub fn warm_up(port: u16, headers: &[(&str, &str)]) -> Result<(Duration, usize), String> {
    let mut http = HttpConnection::connect(port, headers)?;
    let started = Instant::now();
    let mut refused = 0;
    while started.elapsed() < WARM_UP_LIMIT {
        if http.get()? == 200 {
            return Ok((started.elapsed(), refused));
        }
        refused += 1;
        std::thread::sleep(WARM_UP_PAUSE);
    }
    Err(format!(
        "no 200 within {} s ({refused} requests refused)",
        WARM_UP_LIMIT.as_secs()
    ))
}
