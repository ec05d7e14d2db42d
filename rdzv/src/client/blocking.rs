//! `TcpStoreClient`: a blocking client of the TCPStore protocol with a deadline on every wait.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dt_rdzv_proto::tcpstore::reply::{Reply, ReplyShape, decode_reply};
use dt_rdzv_proto::tcpstore::{Request, STOP_WAITING, VALIDATE_MAGIC, WAIT_CANCELED};

use super::endpoint::parse_endpoint;
use crate::store::{Store, StoreError};

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How long to keep retrying the connection (the server may start after the client).
    pub connect_timeout: Duration,
    /// Deadline for any single reply that is not a wait (a server that stops answering).
    pub op_timeout: Duration,
    /// After a wait times out, how long to wait for the server to confirm CANCEL_WAIT.
    pub cancel_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(60),
            op_timeout: Duration::from_secs(300),
            cancel_timeout: Duration::from_secs(30),
        }
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// A connection to a TCPStore server. Thread-safe: one request at a time, like torch's client.
pub struct TcpStoreClient {
    endpoint: String,
    options: ClientOptions,
    conn: Mutex<Conn>,
}

impl std::fmt::Debug for TcpStoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStoreClient")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// How a wait ended.
enum Waited {
    Released,
    TimedOut,
}

impl TcpStoreClient {
    /// Connects to `host:port`, retrying until `timeout`, then validates and pings.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<Self, StoreError> {
        Self::connect_with(
            endpoint,
            ClientOptions {
                connect_timeout: timeout,
                ..ClientOptions::default()
            },
        )
    }

    /// Connects with explicit options.
    pub fn connect_with(endpoint: &str, options: ClientOptions) -> Result<Self, StoreError> {
        let start = Instant::now();
        let deadline = start + options.connect_timeout;
        let (host, port) = parse_endpoint(endpoint).map_err(StoreError::InvalidArgument)?;
        let mut backoff = Duration::from_millis(50);
        loop {
            match Self::try_connect(&host, port, deadline) {
                Ok(stream) => {
                    let client = Self {
                        endpoint: endpoint.to_owned(),
                        options,
                        conn: Mutex::new(Conn {
                            stream,
                            buf: Vec::with_capacity(256),
                        }),
                    };
                    client.handshake(deadline)?;
                    return Ok(client);
                }
                Err(e) => {
                    let now = Instant::now();
                    if now + backoff >= deadline {
                        return Err(StoreError::Connect {
                            endpoint: endpoint.to_owned(),
                            waited: now - start,
                            source: e,
                        });
                    }
                    tracing::debug!(endpoint, error = %e, "store not reachable yet; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 3 / 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    fn try_connect(host: &str, port: u16, deadline: Instant) -> std::io::Result<TcpStream> {
        let mut last = std::io::Error::new(ErrorKind::NotFound, "no address");
        for addr in (host, port).to_socket_addrs()? {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn handshake(&self, deadline: Instant) -> Result<(), StoreError> {
        let nonce = std::process::id();
        let mut bytes = Request::Validate {
            magic: VALIDATE_MAGIC,
        }
        .encode();
        Request::Ping { nonce }.encode_into(&mut bytes);
        let mut c = self.lock();
        self.write(&mut c, &bytes, "handshake")?;
        match self.read_reply(&mut c, ReplyShape::U32, deadline, "handshake")? {
            Some(Reply::U32(n)) if n == nonce => Ok(()),
            Some(other) => Err(self.protocol("handshake", format!("PING echoed {other:?}"))),
            None => Err(self.io(
                "handshake",
                std::io::Error::new(ErrorKind::TimedOut, "no PING reply before the deadline"),
            )),
        }
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends one raw request (keys exactly as on the wire) and returns its reply.
    /// Not for WAIT or BARRIER, which park: use [`Store::wait`].
    pub fn request(&self, req: &Request) -> Result<Reply, StoreError> {
        let op = req.query_type().name();
        let mut c = self.lock();
        self.write(&mut c, &req.encode(), op)?;
        let deadline = Instant::now() + self.options.op_timeout;
        self.read_reply(&mut c, req.reply_shape(), deadline, op)?
            .ok_or_else(|| {
                self.io(
                    op,
                    std::io::Error::new(
                        ErrorKind::TimedOut,
                        format!("no reply within {:?}", self.options.op_timeout),
                    ),
                )
            })
    }

    /// Every raw key in the server's KV map (LIST_KEYS).
    pub fn list_raw_keys(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        match self.request(&Request::ListKeys)? {
            Reply::KeyList(k) => Ok(k),
            other => Err(self.protocol("LIST_KEYS", format!("unexpected {other:?}"))),
        }
    }

    /// Deletes a raw key; true if it existed.
    pub fn delete_raw_key(&self, key: &[u8]) -> Result<bool, StoreError> {
        match self.request(&Request::DeleteKey { key: key.to_vec() })? {
            Reply::I64(n) => Ok(n == 1),
            other => Err(self.protocol("DELETE_KEY", format!("unexpected {other:?}"))),
        }
    }

    /// Adds to a raw key's counter (`init/` and other keys without torch's `/`).
    pub fn add_raw(&self, key: &[u8], delta: i64) -> Result<i64, StoreError> {
        match self.request(&Request::Add {
            key: key.to_vec(),
            delta,
        })? {
            Reply::I64(n) => Ok(n),
            other => Err(self.protocol("ADD", format!("unexpected {other:?}"))),
        }
    }

    /// BARRIER: counts this caller at `key` and waits until `world_size` have arrived.
    pub fn barrier(&self, key: &str, world_size: i64, timeout: Duration) -> Result<(), StoreError> {
        let req = Request::Barrier {
            key: wire(key),
            world_size,
        };
        match self.park(&req, timeout, "BARRIER")? {
            Waited::Released => Ok(()),
            Waited::TimedOut => Err(StoreError::Timeout {
                op: "barrier",
                missing: vec![key.to_owned()],
                waited: timeout,
            }),
        }
    }

    /// Sends a parking request (WAIT, BARRIER) and waits for `00` until `timeout`; on timeout
    /// cancels, as torch's client does, and drains the server's confirmation.
    fn park(
        &self,
        req: &Request,
        timeout: Duration,
        op: &'static str,
    ) -> Result<Waited, StoreError> {
        let mut c = self.lock();
        self.write(&mut c, &req.encode(), op)?;
        let deadline = Instant::now() + timeout;
        match self.read_reply(&mut c, ReplyShape::Byte, deadline, op)? {
            Some(Reply::Byte(STOP_WAITING)) => return Ok(Waited::Released),
            Some(other) => return Err(self.protocol(op, format!("unexpected {other:?}"))),
            None => {}
        }
        self.write(&mut c, &Request::CancelWait.encode(), "CANCEL_WAIT")?;
        let cancel_deadline = Instant::now() + self.options.cancel_timeout;
        let mut released = false;
        loop {
            match self.read_reply(&mut c, ReplyShape::Byte, cancel_deadline, "CANCEL_WAIT")? {
                Some(Reply::Byte(STOP_WAITING)) => released = true,
                Some(Reply::Byte(WAIT_CANCELED)) => break,
                Some(other) => {
                    return Err(self.protocol("CANCEL_WAIT", format!("unexpected {other:?}")));
                }
                None => {
                    return Err(self.io(
                        "CANCEL_WAIT",
                        std::io::Error::new(
                            ErrorKind::TimedOut,
                            format!("no confirmation within {:?}", self.options.cancel_timeout),
                        ),
                    ));
                }
            }
        }
        Ok(if released {
            Waited::Released
        } else {
            Waited::TimedOut
        })
    }

    fn lock(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self, c: &mut Conn, bytes: &[u8], op: &'static str) -> Result<(), StoreError> {
        c.stream
            .set_write_timeout(Some(self.options.op_timeout))
            .and_then(|()| c.stream.write_all(bytes))
            .map_err(|e| self.io(op, e))
    }

    /// Reads one reply of `shape`; `Ok(None)` if the deadline passed first.
    fn read_reply(
        &self,
        c: &mut Conn,
        shape: ReplyShape,
        deadline: Instant,
        op: &'static str,
    ) -> Result<Option<Reply>, StoreError> {
        loop {
            match decode_reply(shape, &c.buf) {
                Ok(Some((reply, used))) => {
                    c.buf.drain(..used);
                    return Ok(Some(reply));
                }
                Ok(None) => {}
                Err(e) => return Err(self.protocol(op, e.to_string())),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            c.stream
                .set_read_timeout(Some(left))
                .map_err(|e| self.io(op, e))?;
            let mut chunk = [0u8; 4096];
            match c.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(self.io(
                        op,
                        std::io::Error::new(
                            ErrorKind::UnexpectedEof,
                            "server closed the connection",
                        ),
                    ));
                }
                Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(op, e)),
            }
        }
    }

    fn io(&self, op: &'static str, source: std::io::Error) -> StoreError {
        StoreError::Io {
            endpoint: self.endpoint.clone(),
            op,
            source,
        }
    }

    fn protocol(&self, op: &'static str, detail: String) -> StoreError {
        StoreError::Protocol {
            endpoint: self.endpoint.clone(),
            op,
            detail,
        }
    }

    fn expect_bytes(&self, op: &'static str, r: Reply) -> Result<Vec<u8>, StoreError> {
        match r {
            Reply::Bytes(b) => Ok(b),
            other => Err(self.protocol(op, format!("unexpected {other:?}"))),
        }
    }

    fn check_limits(key: &str) -> Result<(), StoreError> {
        if key.len() + 1 > 8192 {
            return Err(StoreError::InvalidArgument(format!(
                "key of {} bytes exceeds the 8192-byte limit",
                key.len() + 1
            )));
        }
        Ok(())
    }
}

/// torch's client puts `/` in front of every user key.
fn wire(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(b'/');
    k.extend_from_slice(key.as_bytes());
    k
}

fn wires(keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
    keys.iter()
        .map(|k| TcpStoreClient::check_limits(k).map(|()| wire(k)))
        .collect()
}

impl Store for TcpStoreClient {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        Self::check_limits(key)?;
        self.request(&Request::Set {
            key: wire(key),
            value: value.to_vec(),
        })
        .map(drop)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        self.wait(&[key], timeout)?;
        let r = self.request(&Request::Get { key: wire(key) })?;
        self.expect_bytes("GET", r)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        Self::check_limits(key)?;
        self.add_raw(&wire(key), delta)
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        Self::check_limits(key)?;
        let r = self.request(&Request::CompareSet {
            key: wire(key),
            expected: expected.to_vec(),
            desired: desired.to_vec(),
        })?;
        self.expect_bytes("COMPARE_SET", r)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let req = Request::Wait { keys: wires(keys)? };
        match self.park(&req, timeout, "WAIT")? {
            Waited::Released => Ok(()),
            Waited::TimedOut => {
                let mut missing = Vec::new();
                for k in keys {
                    if !self.check(&[k])? {
                        missing.push((*k).to_owned());
                    }
                }
                Err(StoreError::Timeout {
                    op: "wait",
                    missing,
                    waited: timeout,
                })
            }
        }
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        match self.request(&Request::Check { keys: wires(keys)? })? {
            Reply::Byte(b) => Ok(b == dt_rdzv_proto::tcpstore::READY),
            other => Err(self.protocol("CHECK", format!("unexpected {other:?}"))),
        }
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.delete_raw_key(&wire(key))
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        Self::check_limits(key)?;
        self.request(&Request::Append {
            key: wire(key),
            value: value.to_vec(),
        })
        .map(drop)
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        match self.request(&Request::GetNumKeys)? {
            Reply::I64(n) => Ok(n),
            other => Err(self.protocol("GETNUMKEYS", format!("unexpected {other:?}"))),
        }
    }

    fn multi_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        self.wait(keys, timeout)?;
        match self.request(&Request::MultiGet { keys: wires(keys)? })? {
            Reply::ManyBytes(v) => Ok(v),
            other => Err(self.protocol("MULTI_GET", format!("unexpected {other:?}"))),
        }
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        if keys.len() != values.len() {
            return Err(StoreError::InvalidArgument(format!(
                "multi_set: {} keys but {} values",
                keys.len(),
                values.len()
            )));
        }
        let pairs = wires(keys)?
            .into_iter()
            .zip(values.iter().map(|v| v.to_vec()))
            .collect();
        self.request(&Request::MultiSet { pairs }).map(drop)
    }
}
