//! The runtime remote stores' clients run on, and the bridge the synchronous store traits
//! cross it by. The traits are called from actix's blocking threads, the history writer's
//! arbiter and the planner's: a tokio `block_on` would panic on an arbiter thread, so a call
//! is spawned here and its caller waits on a channel, bounded by a timeout — a store that
//! does not answer becomes [`StoreError::Unavailable`], never a hang.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::StoreError;

/// How long one store call may take, round trips and pool waits included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Built once and never dropped: a tokio runtime must not be dropped on an async thread,
/// and the stores that use it live as long as the process.
static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The store runtime (two worker threads: the clients' I/O, not the gateway's work).
pub fn runtime() -> Result<&'static Runtime, StoreError> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("specgate-store")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| StoreError::Open(format!("the store runtime: {e}")))
}

/// Run `fut` on the store runtime and wait for it, at most `timeout`.
pub fn call<T, E>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, E>> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let out = match tokio::time::timeout(timeout, fut).await {
            Ok(out) => out,
            Err(_) => Err(StoreError::Unavailable(format!("no answer within {timeout:?}")).into()),
        };
        let _ = tx.send(out);
    });
    rx.recv()
        .map_err(|_| StoreError::Unavailable("the store runtime stopped".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_never_answers_times_out_as_unavailable() {
        let slow = call::<(), StoreError>(Duration::from_millis(50), async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        });
        assert!(matches!(slow, Err(StoreError::Unavailable(_))), "{slow:?}");
        assert_eq!(
            call::<_, StoreError>(CALL_TIMEOUT, async { Ok(7) }).unwrap(),
            7
        );
    }

    #[actix_web::test]
    async fn a_call_from_an_async_thread_does_not_panic() {
        // The planner and the history writer call stores from actix arbiters.
        assert_eq!(
            call::<_, StoreError>(CALL_TIMEOUT, async { Ok(1) }).unwrap(),
            1
        );
    }
}
