//! etcd's v2 JSON shapes: `{"action","node","prevNode"}` and error bodies.

use std::time::{Duration, UNIX_EPOCH};

use dt_rdzv_proto::etcd_v2::{Event, NodeView, V2Error};
use serde_json::{Map, Value, json};

/// 9999-12-31T23:59:59.999Z in Unix milliseconds.
const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// A node as etcd writes it (fields in etcd's order; absent ones left out).
pub(super) fn node(n: &NodeView) -> Value {
    let mut m = Map::new();
    if let Some(k) = &n.key {
        m.insert("key".into(), json!(k));
    }
    if n.dir {
        m.insert("dir".into(), json!(true));
    } else if let Some(v) = &n.value {
        m.insert("value".into(), json!(v));
    }
    if let Some(ms) = n.expiration_ms {
        // RFC 3339 stops at year 9999 (the store clamps TTLs well before; this keeps a bad
        // date from ever panicking a worker).
        let at = UNIX_EPOCH + Duration::from_millis(ms.min(LAST_RFC3339_MS));
        m.insert(
            "expiration".into(),
            json!(humantime::format_rfc3339_nanos(at).to_string()),
        );
    }
    if let Some(t) = n.ttl {
        m.insert("ttl".into(), json!(t));
    }
    if let Some(children) = &n.nodes {
        m.insert(
            "nodes".into(),
            Value::Array(children.iter().map(node).collect()),
        );
    }
    if let Some(i) = n.modified {
        m.insert("modifiedIndex".into(), json!(i));
    }
    if let Some(i) = n.created {
        m.insert("createdIndex".into(), json!(i));
    }
    Value::Object(m)
}

/// An answer or a watch's event.
pub(super) fn event(e: &Event) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("action".into(), json!(e.action.as_str()));
    m.insert("node".into(), node(&e.node));
    if let Some(p) = &e.prev {
        m.insert("prevNode".into(), node(p));
    }
    let mut body = serde_json::to_vec(&Value::Object(m)).expect("JSON");
    body.push(b'\n');
    body
}

/// An error body.
pub(super) fn error(e: &V2Error) -> Vec<u8> {
    let mut body = serde_json::to_vec(&json!({
        "errorCode": e.code.number(),
        "message": e.code.message(),
        "cause": e.cause,
        "index": e.index,
    }))
    .expect("JSON");
    body.push(b'\n');
    body
}
