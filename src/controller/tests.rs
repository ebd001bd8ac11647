//! The controller loop on tokio's paused clock: every time below is virtual and exact.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::backoff::ErrorBackoffConfig;
use super::queue::QueueConfig;
use super::{Controller, Handle, Next, Stopped};

type Key = &'static str;

#[derive(Debug, thiserror::Error)]
#[error("the engine is down")]
struct EngineDown;

type Outcome = Result<Next, EngineDown>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn queue_config(max_running: usize, debounce: Duration) -> QueueConfig {
    QueueConfig {
        max_running: NonZeroUsize::new(max_running).expect("non-zero"),
        debounce,
    }
}

/// 1 s doubling to 4 s, no jitter, so delays are exact.
fn errors() -> ErrorBackoffConfig {
    ErrorBackoffConfig::new(secs(1), secs(4), 0).expect("valid")
}

/// What the fake reconciler saw: which key started when (since the test began), how many
/// ran at once at most, how many finished.
#[derive(Default)]
struct Record {
    starts: Mutex<Vec<(Key, Duration)>>,
    running: AtomicUsize,
    most_running: AtomicUsize,
    finished: AtomicUsize,
}

impl Record {
    fn starts(&self) -> Vec<(Key, Duration)> {
        self.starts.lock().expect("not poisoned").clone()
    }
}

/// A fake reconcile: records its start, takes `takes`, then returns what `outcome` says for
/// the n-th run (0-based, over all keys).
fn reconciler(
    record: Arc<Record>,
    start: Instant,
    takes: Duration,
    outcome: impl Fn(usize) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Key) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>> {
    let outcome = Arc::new(outcome);
    move |key| {
        let record = Arc::clone(&record);
        let outcome = Arc::clone(&outcome);
        Box::pin(async move {
            let run = {
                let mut starts = record.starts.lock().expect("not poisoned");
                starts.push((key, start.elapsed()));
                starts.len() - 1
            };
            let now = record.running.fetch_add(1, Ordering::SeqCst) + 1;
            record.most_running.fetch_max(now, Ordering::SeqCst);
            sleep(takes).await;
            record.running.fetch_sub(1, Ordering::SeqCst);
            record.finished.fetch_add(1, Ordering::SeqCst);
            outcome(run)
        })
    }
}

/// Start a controller with the fake reconciler; returns its handle, the token that stops it
/// and the task to await.
fn start_controller(
    queue: QueueConfig,
    record: &Arc<Record>,
    takes: Duration,
    outcome: impl Fn(usize) -> Outcome + Send + Sync + 'static,
) -> (Handle<Key>, CancellationToken, JoinHandle<()>) {
    let start = Instant::now();
    let controller = Controller::new(queue, errors());
    let handle = controller.handle();
    let shutdown = CancellationToken::new();
    let reconcile = reconciler(Arc::clone(record), start, takes, outcome);
    let task = tokio::spawn(controller.run(reconcile, shutdown.clone()));
    (handle, shutdown, task)
}

async fn stop(shutdown: CancellationToken, task: JoinHandle<()>) {
    shutdown.cancel();
    task.await.expect("the controller loop does not panic");
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_running_keys_run_at_once() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(2, ms(0)), &record, secs(10), |_| {
            Ok(Next::AwaitChange)
        });
    for key in ["a", "b", "c"] {
        handle.schedule(key).expect("running");
    }
    sleep(secs(60)).await;
    stop(shutdown, task).await;
    assert_eq!(record.most_running.load(Ordering::SeqCst), 2);
    assert_eq!(
        record.starts(),
        [("a", secs(0)), ("b", secs(0)), ("c", secs(10))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_scheduled_while_it_runs_runs_once_more_after() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(4, ms(100)), &record, secs(10), |_| {
            Ok(Next::AwaitChange)
        });
    handle.schedule("a").expect("running");
    sleep(secs(5)).await;
    for _ in 0..3 {
        handle.schedule("a").expect("running");
    }
    handle.schedule_after("a", secs(1)).expect("running");
    sleep(secs(3600)).await;
    stop(shutdown, task).await;
    // Never two at once; the second run starts as the first ends.
    assert_eq!(record.most_running.load(Ordering::SeqCst), 1);
    assert_eq!(record.starts(), [("a", ms(100)), ("a", ms(10_100))]);
}

#[tokio::test(start_paused = true)]
async fn a_requeue_runs_again_at_the_asked_time() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(4, ms(100)), &record, secs(2), |run| {
            Ok(match run {
                0 => Next::Requeue(secs(30)),
                _ => Next::AwaitChange,
            })
        });
    handle.schedule("a").expect("running");
    sleep(secs(3600)).await;
    stop(shutdown, task).await;
    // Ends at 2.1 s, asks for 30 s more.
    assert_eq!(record.starts(), [("a", ms(100)), ("a", ms(32_100))]);
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_100_schedules_is_one_run() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(4, ms(200)), &record, ms(0), |_| {
            Ok(Next::AwaitChange)
        });
    for _ in 0..100 {
        handle.schedule("a").expect("running");
        sleep(ms(1)).await;
    }
    sleep(secs(3600)).await;
    stop(shutdown, task).await;
    assert_eq!(record.starts(), [("a", ms(200))]);
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_doubling_to_the_cap_and_a_success_resets() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(4, ms(0)), &record, ms(0), |run| match run {
            4 => Ok(Next::Requeue(secs(10))),
            6 => Ok(Next::AwaitChange),
            _ => Err(EngineDown),
        });
    handle.schedule("a").expect("running");
    sleep(secs(3600)).await;
    stop(shutdown, task).await;
    let times: Vec<u64> = record.starts().iter().map(|(_, at)| at.as_secs()).collect();
    // Fails at 0, 1, 3, 7 (waits 1, 2, 4, 4: capped); succeeds at 11 and asks for 10 s;
    // fails at 21 and waits 1 s again, not 8; succeeds at 22 and waits for a change.
    assert_eq!(times, [0, 1, 3, 7, 11, 21, 22]);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_reconcile_is_retried_like_an_error() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(4, ms(0)), &record, ms(0), |run| match run {
            0 => panic!("a bug in the reconciler"),
            _ => Ok(Next::AwaitChange),
        });
    handle.schedule("a").expect("running");
    sleep(secs(3600)).await;
    stop(shutdown, task).await;
    assert_eq!(record.starts(), [("a", secs(0)), ("a", secs(1))]);
}

#[tokio::test(start_paused = true)]
async fn cancellation_drains_running_reconciles_and_returns() {
    let begin = Instant::now();
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(2, ms(0)), &record, secs(60), |_| {
            Ok(Next::Requeue(secs(1)))
        });
    for key in ["a", "b", "c"] {
        handle.schedule(key).expect("running");
    }
    sleep(secs(5)).await;
    stop(shutdown, task).await;
    // Returned when the two running reconciles ended, not before, and started nothing more
    // (neither the waiting "c" nor the requeues).
    assert_eq!(begin.elapsed(), secs(60));
    assert_eq!(record.finished.load(Ordering::SeqCst), 2);
    assert_eq!(record.starts(), [("a", secs(0)), ("b", secs(0))]);
    assert_eq!(handle.schedule("a"), Err(Stopped));
}

#[tokio::test(start_paused = true)]
async fn the_loop_keeps_requeues_going_after_every_handle_is_dropped() {
    let record = Arc::new(Record::default());
    let (handle, shutdown, task) =
        start_controller(queue_config(4, ms(0)), &record, ms(0), |run| {
            Ok(match run {
                0..3 => Next::Requeue(secs(10)),
                _ => Next::AwaitChange,
            })
        });
    handle.schedule("a").expect("running");
    drop(handle);
    sleep(secs(3600)).await;
    stop(shutdown, task).await;
    let times: Vec<u64> = record.starts().iter().map(|(_, at)| at.as_secs()).collect();
    assert_eq!(times, [0, 10, 20, 30]);
}

/// The controller's crash-loop pacing through the planner: a member that exits again at
/// once is restarted at once, then each restart is held (10 s, 20 s, 40 s) by the plan
/// itself, and the reconcile that finds it still waiting changes nothing.
#[tokio::test(start_paused = true)]
async fn a_crash_looping_member_is_restarted_at_once_then_held_by_the_plan() {
    use super::backoff::CrashLoopConfig;
    use super::daemon::Restarts;
    use crate::plan::tests::{in_sync, member, want};
    use crate::plan::{ContainerOp, ContainerState, PlanOptions, plan};
    use std::time::SystemTime;

    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.containers[0].state = ContainerState::Exited { code: 3 };
    let mut restarts = Restarts::default();
    let start = Instant::now();
    let epoch = SystemTime::UNIX_EPOCH + secs(1_800_000_000);
    // One reconcile of team `t` at the (paused) time it runs: what it planned for `a`.
    let reconcile = |restarts: &mut Restarts| {
        let now = Instant::now();
        let wall = epoch + (now - start);
        let opts = PlanOptions {
            deferred: restarts.holds("t", now, wall),
            ..PlanOptions::default()
        };
        let p = plan(&d, &o, opts);
        let began = restarts.record(&p, CrashLoopConfig::default(), now);
        let at = (now - start).as_secs();
        match (&p.actions[..], &p.deferred[..]) {
            ([a], []) if matches!(a.container_op(), Some(ContainerOp::Start { .. })) => {
                (format!("{at}: restart"), None, began)
            }
            ([], [held]) => {
                let wait = held.until.duration_since(wall).expect("in the future");
                (format!("{at}: held {}s", wait.as_secs()), Some(wait), began)
            }
            other => panic!("{at}: {other:?}"),
        }
    };
    let mut seen = Vec::new();
    for _ in 0..6 {
        let (what, wait, began) = reconcile(&mut restarts);
        seen.push(what);
        match wait {
            // It runs 1 s, and exits again.
            None => sleep(secs(1)).await,
            Some(wait) => {
                assert_eq!(began.len(), 1, "{seen:?}");
                assert_eq!(restarts.waiting(), ["t/a"]);
                // An event 2 s later: still held, until the same time, and no new wait.
                sleep(secs(2)).await;
                let (_, again, began) = reconcile(&mut restarts);
                assert_eq!(again, Some(wait - secs(2)));
                assert!(began.is_empty());
                sleep(wait - secs(2)).await;
            }
        }
    }
    assert_eq!(
        seen,
        [
            "0: restart",
            "1: held 10s",
            "11: restart",
            "12: held 20s",
            "32: restart",
            "33: held 40s"
        ]
    );
    assert_eq!(restarts.waiting(), ["t/a"]);
}
