//! The shared storage on etcd v3 (`--backend etcd://h1:2379,h2:2379,h3:2379`), through
//! `etcd-client`: a lease per server, claims as transactions (`create_revision == 0`), and
//! plain keys. TLS (a CA, a client certificate for `--client-cert-auth`) and etcd's own users
//! (`auth enable`) as [`Access`] says. Every call is bounded by the server's storage timeout; an etcd that does not
//! answer in time (down, partitioned, electing a leader) is [`StorageError::Unreachable`].

use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, PutOptions, TlsOptions, Txn,
    TxnOp, TxnOpResponse,
};
use futures_util::future::{BoxFuture, FutureExt};

use super::{Access, Claim, LeaseId, Storage, StorageError};

/// See the module docs.
pub(crate) struct EtcdStorage {
    client: Client,
    endpoints: String,
    timeout: Duration,
}

impl EtcdStorage {
    /// Connects to the comma-separated `host:port` list (`http://` or `https://` optional;
    /// `https://` by default with a CA in `access`), as `access` says.
    pub(crate) async fn connect(
        list: &str,
        timeout: Duration,
        access: &Access,
    ) -> Result<Self, StorageError> {
        let scheme = if access.cacert.is_some() || access.cert.is_some() {
            "https"
        } else {
            "http"
        };
        let endpoints: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| {
                if e.contains("://") {
                    e.to_string()
                } else {
                    format!("{scheme}://{e}")
                }
            })
            .collect();
        let describe = format!("etcd://{list}");
        if endpoints.is_empty() {
            return Err(StorageError::Config(format!("{describe}: no endpoint")));
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_keep_alive(Duration::from_secs(1), timeout);
        if let Some(tls) = tls_options(&describe, access)? {
            if let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://")) {
                return Err(StorageError::Config(format!(
                    "{describe}: {plain} is plaintext but a CA or client certificate is given: \
                     write https:// or leave the scheme out"
                )));
            }
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &access.user {
            // etcd's tokens expire (`--auth-token-ttl`, 300 s): get a new one when told so.
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let client = tokio::time::timeout(timeout, Client::connect(&endpoints, Some(options)))
            .await
            .map_err(|_| StorageError::Unreachable {
                endpoints: describe.clone(),
                why: format!("no connection within {timeout:?}"),
            })?
            .map_err(|e| classify(&describe, e))?;
        let s = Self {
            client,
            endpoints: describe,
            timeout,
        };
        // A connection is not an answer: ask for something.
        s.get("/dt-rdzv/.probe").await?;
        Ok(s)
    }

    /// Runs `f` on a clone of the client within the timeout.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, StorageError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        match tokio::time::timeout(self.timeout, f(self.client.clone())).await {
            Ok(r) => r.map_err(|e| classify(&self.endpoints, e)),
            Err(_) => Err(StorageError::Unreachable {
                endpoints: self.endpoints.clone(),
                why: format!("no answer within {:?}", self.timeout),
            }),
        }
    }
}

/// The TLS settings `access` asks for (`None`: plaintext), its files read now so that a
/// missing or unreadable one is named at start.
fn tls_options(describe: &str, access: &Access) -> Result<Option<TlsOptions>, StorageError> {
    if access.cacert.is_none() && access.cert.is_none() {
        return Ok(None);
    }
    let read = |what: &str, p: &std::path::Path| {
        std::fs::read(p)
            .map_err(|e| StorageError::Config(format!("{describe}: {what} {}: {e}", p.display())))
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &access.cacert {
        tls = tls.ca_certificate(Certificate::from_pem(read("--backend-cacert", ca)?));
    }
    if let Some((cert, key)) = &access.cert {
        tls = tls.identity(Identity::from_pem(
            read("--backend-cert", cert)?,
            read("--backend-key", key)?,
        ));
    }
    Ok(Some(tls))
}

/// Transport failures and etcd's "unavailable" answers are outages; the rest are errors.
fn classify(endpoints: &str, e: etcd_client::Error) -> StorageError {
    use etcd_client::Error as E;
    let why = e.to_string();
    let outage = match &e {
        E::TransportError(_) | E::IoError(_) => true,
        E::GRpcStatus(s) => {
            let code = format!("{:?}", s.code());
            matches!(
                code.as_str(),
                "Unavailable" | "DeadlineExceeded" | "Cancelled" | "Unknown"
            )
        }
        _ => false,
    };
    let endpoints = endpoints.to_string();
    if outage {
        StorageError::Unreachable { endpoints, why }
    } else {
        StorageError::Failed { endpoints, why }
    }
}

impl Storage for EtcdStorage {
    fn describe(&self) -> String {
        self.endpoints.clone()
    }

    fn grant(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId, StorageError>> {
        let secs = ttl.as_secs().max(1) as i64;
        async move {
            self.call(|mut c| async move { c.lease_grant(secs, None).await })
                .await
                .map(|r| r.id())
        }
        .boxed()
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<Option<Duration>, StorageError>> {
        async move {
            let ttl = self
                .call(|mut c| async move {
                    let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
                    keeper.keep_alive().await?;
                    Ok(stream.message().await?.map_or(0, |m| m.ttl()))
                })
                .await?;
            Ok((ttl > 0).then(|| Duration::from_secs(ttl as u64)))
        }
        .boxed()
    }

    fn revoke(&self, lease: LeaseId) -> BoxFuture<'_, Result<(), StorageError>> {
        async move {
            self.call(|mut c| async move { c.lease_revoke(lease).await })
                .await
                .map(drop)
        }
        .boxed()
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        lease: LeaseId,
    ) -> BoxFuture<'a, Result<Claim, StorageError>> {
        async move {
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    value,
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key, None)]);
            let r = self.call(|mut c| async move { c.txn(txn).await }).await?;
            if r.succeeded() {
                return Ok(Claim::Mine);
            }
            let held = r
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                    _ => None,
                })
                .unwrap_or_default();
            Ok(if held == value {
                Claim::Mine
            } else {
                Claim::Held(held)
            })
        }
        .boxed()
    }

    fn delete_if<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, StorageError>> {
        async move {
            let txn = Txn::new()
                .when([Compare::value(key, CompareOp::Equal, value)])
                .and_then([TxnOp::delete(key, None)]);
            self.call(|mut c| async move { c.txn(txn).await })
                .await
                .map(|r| r.succeeded())
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, value: &'a [u8]) -> BoxFuture<'a, Result<(), StorageError>> {
        async move {
            self.call(|mut c| async move { c.put(key, value, None).await })
                .await
                .map(drop)
        }
        .boxed()
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>> {
        async move {
            self.call(|mut c| async move { c.get(key, None).await })
                .await
                .map(|r| r.kvs().first().map(|kv| kv.value().to_vec()))
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        async move {
            self.call(|mut c| async move { c.delete(key, None).await })
                .await
                .map(drop)
        }
        .boxed()
    }
}
