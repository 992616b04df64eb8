//! Batches read on reader threads of ours, for a consumer on one thread: a bounded channel
//! ([`BatchStream`]) that the readers stop feeding once it is dropped, reader threads whose panic
//! or failed start ends the stream with an error (a short read never passes for a whole one), and
//! one paimon-rust batch stream driven on a reader's own runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use duckdb::arrow::record_batch::RecordBatch as Batch60;
use futures::StreamExt;

use super::arrow_bridge::to_arrow60;
use super::site::{Site, REMOTE_TIMEOUT};
use crate::core::error::{Error, Result};

/// Batches read by reader threads, in the order they arrive. Dropping it stops the readers
/// (they notice at their next batch); nothing waits for them.
pub struct BatchStream<T> {
    rx: Receiver<Result<T>>,
    cancel: Arc<AtomicBool>,
    pub(super) failed: Option<Error>,
}

impl<T> BatchStream<T> {
    pub(super) fn channel(capacity: usize) -> (Sender<T>, BatchStream<T>) {
        let (tx, rx) = sync_channel(capacity);
        let cancel = Arc::new(AtomicBool::new(false));
        (Sender { tx, cancel: cancel.clone() }, BatchStream { rx, cancel, failed: None })
    }
}

impl<T> Iterator for BatchStream<T> {
    type Item = Result<T>;
    fn next(&mut self) -> Option<Result<T>> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        self.rx.recv().ok()
    }
}

impl<T> Drop for BatchStream<T> {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

pub(super) struct Sender<T> {
    tx: SyncSender<Result<T>>,
    cancel: Arc<AtomicBool>,
}

impl<T> Sender<T> {
    /// Hands one item on; false when the consumer is gone or cancelled.
    pub(super) fn send(&self, item: Result<T>) -> bool {
        !self.cancel.load(Ordering::Relaxed) && self.tx.send(item).is_ok()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender { tx: self.tx.clone(), cancel: self.cancel.clone() }
    }
}

/// Starts a reader thread that sends into `tx`. A thread that cannot start is reported as the
/// stream's first item, so a short read never passes for a complete one.
pub(super) fn spawn_reader<T: Send + 'static>(
    place: &Site,
    stream: &mut BatchStream<T>,
    tx: Sender<T>,
    work: impl FnOnce(Sender<T>) + Send + 'static,
) {
    // A reader that panics must end the stream with an error: a thread that just stopped would
    // close the channel like a finished read, and a short read would pass for a whole one.
    let guard = tx.clone();
    let site = place.clone();
    let started = std::thread::Builder::new().name("streamhouse-lake".into()).spawn(move || {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(tx))) {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            guard.send(Err(site.err(format!("internal error in a reader thread (please report): {what}"))));
        }
    });
    if let Err(e) = started {
        stream.failed.get_or_insert_with(|| place.err(format!("cannot start a reader thread: {e}")));
    }
}

/// Drives one paimon-rust batch stream on a fresh current-thread runtime, sending each batch
/// (converted to Arrow 60 and mapped by `wrap`) to the consumer. False when the reader should
/// stop: the consumer is gone or cancelled, or an error was sent.
pub(super) fn run_stream<T>(
    place: &Site,
    remote: bool,
    tx: &Sender<T>,
    wrap: impl Fn(Batch60) -> Result<T>,
    open: impl std::future::Future<Output = paimon::Result<paimon::table::ArrowRecordBatchStream>>,
) -> bool {
    let send = |item: Result<T>| tx.send(item);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            send(Err(place.err(e)));
            return false;
        }
    };
    rt.block_on(async {
        let opened = if remote {
            match tokio::time::timeout(REMOTE_TIMEOUT, open).await {
                Ok(r) => r,
                Err(_) => {
                    send(Err(place.err(format!("object storage did not answer within {}s", REMOTE_TIMEOUT.as_secs()))));
                    return false;
                }
            }
        } else {
            open.await
        };
        let mut batches = match opened {
            Ok(s) => s,
            Err(e) => {
                send(Err(place.paimon_err(e)));
                return false;
            }
        };
        while let Some(batch) = batches.next().await {
            let item = match batch {
                Ok(b) if b.num_rows() == 0 => continue,
                Ok(b) => to_arrow60(&b).map_err(|e| place.err(e)).and_then(&wrap),
                Err(e) => Err(place.paimon_err(e)),
            };
            let failed = item.is_err();
            if !send(item) || failed {
                return false;
            }
        }
        true
    })
}
