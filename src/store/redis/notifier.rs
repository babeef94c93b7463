//! Change notifications over Redis pub/sub, on one channel per deployment prefix. The
//! subscriber reconnects on its own; after any gap it reports [`Change::All`], since
//! messages published meanwhile are gone.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::{unavailable, Redis, COMMAND_TIMEOUT};
use crate::store::changes::{Change, Notifier, OnChange};
use crate::store::runtime;

pub struct RedisNotifier {
    redis: Arc<Redis>,
}

impl RedisNotifier {
    pub fn new(redis: Arc<Redis>) -> Self {
        Self { redis }
    }

    fn channel(&self) -> String {
        self.redis.key(&["changes"])
    }
}

impl Notifier for RedisNotifier {
    fn publish(&self, change: &Change) {
        let redis = Arc::clone(&self.redis);
        let (channel, message) = (self.channel(), change.encode());
        let sent = runtime::call(COMMAND_TIMEOUT * 2, async move {
            let mut conn = redis.conn().await?;
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query_async::<i64>(&mut conn)
                .await
                .map_err(unavailable)
        });
        if let Err(e) = sent {
            metrics::counter!("specgate_change_publish_failures_total").increment(1);
            eprintln!("specgate: announcing a change failed (replicas re-read within their cache TTL): {e}");
        }
    }

    fn subscribe(&self, on_change: OnChange) {
        let (redis, channel) = (Arc::clone(&self.redis), self.channel());
        let Ok(rt) = runtime::runtime() else { return };
        rt.spawn(async move {
            loop {
                if let Ok(mut pubsub) = redis.client.get_async_pubsub().await {
                    if pubsub.subscribe(&channel).await.is_ok() {
                        on_change(&Change::All);
                        let mut messages = pubsub.on_message();
                        while let Some(msg) = messages.next().await {
                            let payload: String = msg.get_payload().unwrap_or_default();
                            on_change(&Change::decode(&payload));
                        }
                    }
                }
                metrics::counter!("specgate_change_subscription_gaps_total").increment(1);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
}
