//! The cooling thread: compresses the objects a member's watch stored hot (as encoded) once
//! they have been hot for [`HOT_FOR`], off the ingest path.
//!
//! Hot objects are registered in arrival order ([`register`]); the thread compresses each in
//! place ([`super::Obj::cool`]) when its time comes, or sooner while hot objects hold more than
//! [`HOT_BUDGET`] bytes. Versions dropped before then (superseded and evicted from the event
//! ring) cost nothing more. While hot objects hold more than [`HOT_LIMIT`] bytes (the thread
//! cannot keep up), the ingest compresses new objects itself, so memory stays bounded.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::Obj;

/// How long an object stays hot before it is compressed (a modification within this time
/// spares the compression of the version it replaces only if that version also leaves the
/// event ring; the current version is compressed once this long has passed).
pub const HOT_FOR: Duration = Duration::from_millis(200);

/// Bytes of hot objects (encoded JSON) past which the thread compresses without waiting for
/// [`HOT_FOR`].
pub const HOT_BUDGET: usize = 64 << 20;

/// Bytes of hot objects past which new objects are compressed by the ingest itself.
pub const HOT_LIMIT: usize = 256 << 20;

/// Objects compressed per lock of the queue.
const BATCH: usize = 256;

struct Cooler {
    /// Hot objects in arrival order: the object, when it was registered, its encoded bytes.
    queue: Mutex<VecDeque<(Weak<Obj>, Instant, usize)>>,
    wake: Condvar,
    /// Encoded bytes of the queued objects.
    bytes: AtomicUsize,
    /// Objects compressed by the thread.
    cooled: AtomicU64,
    /// Objects dropped before their turn (never compressed).
    gone: AtomicU64,
}

fn cooler() -> &'static Cooler {
    static C: OnceLock<Cooler> = OnceLock::new();
    static STARTED: OnceLock<()> = OnceLock::new();
    let c = C.get_or_init(|| Cooler { queue: Mutex::new(VecDeque::new()), wake: Condvar::new(), bytes: AtomicUsize::new(0), cooled: AtomicU64::new(0), gone: AtomicU64::new(0) });
    STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new().name("cache-cool".into()).spawn(move || run(c));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cache: cooling thread not started; hot objects stay hot");
        }
    });
    c
}

/// Registers a hot object: the cooling thread compresses it after [`HOT_FOR`] (if it is still
/// held then).
pub fn register(obj: &Arc<Obj>) {
    let c = cooler();
    let n = obj.raw_len();
    let before = c.bytes.fetch_add(n, Ordering::Relaxed);
    let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
    let was_empty = q.is_empty();
    q.push_back((Arc::downgrade(obj), Instant::now(), n));
    drop(q);
    if was_empty || (before <= HOT_BUDGET && before + n > HOT_BUDGET) {
        c.wake.notify_one();
    }
}

/// True while hot objects hold more than [`HOT_LIMIT`] bytes (new objects are then compressed
/// by the ingest).
pub fn over_limit() -> bool {
    hot_bytes() > HOT_LIMIT
}

/// Encoded bytes of the objects waiting to be compressed (including ones dropped meanwhile and
/// not yet skipped).
pub fn hot_bytes() -> usize {
    cooler().bytes.load(Ordering::Relaxed)
}

/// Objects compressed by the cooling thread, and objects dropped before their turn, since the
/// process started.
pub fn counts() -> (u64, u64) {
    let c = cooler();
    (c.cooled.load(Ordering::Relaxed), c.gone.load(Ordering::Relaxed))
}

fn run(c: &'static Cooler) {
    let mut batch: Vec<(Weak<Obj>, usize)> = Vec::with_capacity(BATCH);
    loop {
        {
            let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let Some((_, at, _)) = q.front() else {
                    q = c.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                    continue;
                };
                let age = at.elapsed();
                if age >= HOT_FOR || c.bytes.load(Ordering::Relaxed) > HOT_BUDGET {
                    break;
                }
                q = c.wake.wait_timeout(q, HOT_FOR - age).unwrap_or_else(|e| e.into_inner()).0;
            }
            let over = c.bytes.load(Ordering::Relaxed) > HOT_BUDGET;
            let now = Instant::now();
            while batch.len() < BATCH {
                match q.front() {
                    Some((_, at, _)) if over || now.duration_since(*at) >= HOT_FOR => {
                        let (w, _, n) = q.pop_front().expect("front");
                        batch.push((w, n));
                    }
                    _ => break,
                }
            }
        }
        for (w, n) in batch.drain(..) {
            match w.upgrade() {
                Some(o) => {
                    o.cool();
                    c.cooled.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    c.gone.fetch_add(1, Ordering::Relaxed);
                }
            }
            c.bytes.fetch_sub(n, Ordering::Relaxed);
        }
    }
}
