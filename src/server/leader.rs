//! Leader election for the federation controllers on an etcd lease (etcd's election API).
//!
//! Every `fedctl server` replica serves the API; only the leader runs the controllers. A
//! replica campaigns under the election name with a lease of `ttl`; once elected it runs the
//! controllers future and keeps the lease alive every `ttl/3`. If the lease is lost, or no
//! keep-alive succeeded within `2/3 ttl` of sending the last successful one (etcd may be
//! unreachable: then the lease expires there at `ttl` at the earliest), the controllers
//! future is dropped at once (controllers are level-triggered, so stopping anywhere is safe)
//! and the replica campaigns again. On shutdown the leader
//! resigns and revokes its lease, so a successor takes over immediately instead of after
//! `ttl`. Mirrors client-go's leaderelection (lease duration, renew, release on cancel),
//! with etcd's election service as the lock.

use std::future::Future;
use std::time::Duration;

use etcd_client::Client;

/// Errors of one election round (each is retried by [`run`]).
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// etcd refused or could not be reached.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// The lease's keep-alive stream ended or returned TTL 0 (the lease expired).
    #[error("lease {0:x} lost")]
    LeaseLost(i64),
}

/// Election settings.
#[derive(Clone, Debug)]
pub struct Election {
    /// etcd client URLs.
    pub endpoints: Vec<String>,
    /// Election name (an etcd key prefix), e.g. `/fedctl/leader/controllers`.
    pub name: String,
    /// This replica's identity (hostname + listen address: unique and stable across restarts).
    pub identity: String,
    /// Lease time to live; a dead leader is replaced after at most this long.
    pub ttl: Duration,
}

/// Campaigns forever; while leader, runs `work()` (a fresh future per term). Returns once
/// `stop` turns true, after revoking its lease.
///
/// A candidate that finds the election held by its own identity under another lease
/// (its previous run, killed while leading) revokes that lease first, so a restarted
/// replica with a stable identity does not wait out its own stale lease.
pub async fn run<W, Fut>(election: Election, work: W, mut stop: tokio::sync::watch::Receiver<bool>)
where
    W: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut delay = Duration::from_millis(200);
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = term(&election, &work, stop.clone()).await {
            tracing::warn!(error = %e, election = %election.name, "leader election round ended; campaigning again");
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// One term: lease, campaign, lead until the lease is lost, work ends or `stop` turns true.
async fn term<W, Fut>(e: &Election, work: &W, mut stop: tokio::sync::watch::Receiver<bool>) -> Result<(), LeaderError>
where
    W: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut client = Client::connect(&e.endpoints, None).await?;
    let ttl = e.ttl.as_secs().max(2) as i64;
    let lease = client.lease_grant(ttl, None).await?.id();
    let (mut keeper, mut acks) = client.lease_keep_alive(lease).await?;
    // keep the lease alive while campaigning too
    // Leadership ends when no renewal succeeded within 2/3 of the TTL: by then another
    // replica may soon be elected, so this one must already have stopped its controllers.
    let keepalive = async {
        let period = Duration::from_secs((ttl / 3).max(1) as u64);
        let deadline = Duration::from_millis(ttl as u64 * 2000 / 3);
        let mut last_ok = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            // a renewal that hangs must not carry this replica past the deadline
            let left = deadline.saturating_sub(last_ok.elapsed());
            if left.is_zero() {
                return Err::<(), LeaderError>(LeaderError::LeaseLost(lease));
            }
            // etcd extends the lease when it receives the request: count from the send
            let sent = tokio::time::Instant::now();
            let renewed = tokio::time::timeout(period.min(left), async {
                keeper.keep_alive().await?;
                Ok::<_, LeaderError>(matches!(acks.message().await?, Some(r) if r.ttl() > 0))
            })
            .await;
            match renewed {
                Ok(Ok(true)) => last_ok = sent,
                Ok(Ok(false)) => return Err(LeaderError::LeaseLost(lease)),
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => tracing::warn!("lease renewal timed out"),
            }
            if last_ok.elapsed() >= deadline {
                return Err(LeaderError::LeaseLost(lease));
            }
        }
    };
    let mut election = client.election_client();
    // a previous incarnation of this replica (same identity) that died while leading would
    // hold the election until its lease expires; that lease is ours to end
    if let Ok(current) = election.leader(e.name.clone()).await {
        if let Some(kv) = current.kv().filter(|kv| kv.value() == e.identity.as_bytes() && kv.lease() != lease) {
            tracing::info!(election = %e.name, identity = %e.identity, "revoking the lease of this replica's previous run");
            let _ = client.lease_revoke(kv.lease()).await;
        }
    }
    let lead = async {
        election.campaign(e.name.clone(), e.identity.clone(), lease).await?;
        tracing::info!(election = %e.name, identity = %e.identity, "became leader");
        work().await;
        Ok::<_, LeaderError>(())
    };
    let outcome = tokio::select! {
        r = keepalive => r,
        r = lead => r,
        _ = stop.wait_for(|s| *s) => Ok(()),
    };
    // step down: revoking the lease deletes our campaign key, so a successor is elected at
    // once instead of after the TTL
    let _ = tokio::time::timeout(Duration::from_secs(2), client.lease_revoke(lease)).await;
    outcome.map(|_| ())
}

/// A default identity: `<hostname>-<pid>`.
pub fn default_identity() -> String {
    format!("{}-{}", gethostname::gethostname().to_string_lossy(), std::process::id())
}
