//! A small pickle writer (protocol 2: what torch's Flight Recorder dumps are read with,
//! `pickle.load`): None, booleans, integers, strings, lists, tuples and dicts.

/// A value to pickle.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i128),
    Str(String),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
}

impl Value {
    pub(crate) fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }
    pub(crate) fn int(n: impl Into<i128>) -> Value {
        Value::Int(n.into())
    }
    pub(crate) fn opt(n: Option<u64>) -> Value {
        n.map_or(Value::None, Value::int)
    }
}

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINUNICODE: u8 = b'X';
const MARK: u8 = b'(';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const TUPLE: u8 = b't';

/// `v` as a protocol-2 pickle.
pub(crate) fn to_bytes(v: &Value) -> Vec<u8> {
    let mut out = vec![PROTO, 2];
    write(&mut out, v);
    out.push(STOP);
    out
}

fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::None => out.push(NONE),
        Value::Bool(b) => out.push(if *b { NEWTRUE } else { NEWFALSE }),
        Value::Int(n) => match i32::try_from(*n) {
            Ok(n) => {
                out.push(BININT);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Err(_) => {
                // Two's complement, little-endian, shortest that keeps the sign.
                let b = n.to_le_bytes();
                let mut len = b.len();
                while len > 1 {
                    let (top, next) = (b[len - 1], b[len - 2]);
                    if (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0) {
                        len -= 1;
                    } else {
                        break;
                    }
                }
                out.push(LONG1);
                out.push(len as u8);
                out.extend_from_slice(&b[..len]);
            }
        },
        Value::Str(s) => {
            out.push(BINUNICODE);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Value::List(items) => {
            out.push(EMPTY_LIST);
            // APPENDS in batches, as pickle does (keeps the unpickler's stack small).
            for chunk in items.chunks(1000) {
                out.push(MARK);
                for i in chunk {
                    write(out, i);
                }
                out.push(APPENDS);
            }
        }
        Value::Tuple(items) => {
            out.push(MARK);
            for i in items {
                write(out, i);
            }
            out.push(TUPLE);
        }
        Value::Dict(items) => {
            out.push(EMPTY_DICT);
            for chunk in items.chunks(1000) {
                out.push(MARK);
                for (k, v) in chunk {
                    write(out, k);
                    write(out, v);
                }
                out.push(SETITEMS);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_are_what_python_writes() {
        // pickle.dumps(None, 2) == b'\x80\x02N.'
        assert_eq!(to_bytes(&Value::None), b"\x80\x02N.");
        // pickle.dumps(1, 2) == b'\x80\x02K\x01.' (BININT1); BININT reads the same.
        assert_eq!(to_bytes(&Value::int(1)), b"\x80\x02J\x01\x00\x00\x00.");
        // pickle.dumps(2**40, 2) == b'\x80\x02\x8a\x06\x00\x00\x00\x00\x00\x01.'
        assert_eq!(
            to_bytes(&Value::int(1u64 << 40)),
            b"\x80\x02\x8a\x06\x00\x00\x00\x00\x00\x01."
        );
        // pickle.dumps(-2**40, 2) == b'\x80\x02\x8a\x06\x00\x00\x00\x00\x00\xff.'
        assert_eq!(
            to_bytes(&Value::int(-(1i64 << 40))),
            b"\x80\x02\x8a\x06\x00\x00\x00\x00\x00\xff."
        );
        // pickle.dumps(2**63, 2): 9 bytes, a zero on top keeps it positive.
        assert_eq!(
            to_bytes(&Value::int(1u64 << 63)),
            b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00."
        );
        assert_eq!(
            to_bytes(&Value::Tuple(vec![Value::str("a"), Value::Bool(true)])),
            b"\x80\x02(X\x01\x00\x00\x00a\x88t."
        );
        assert_eq!(
            to_bytes(&Value::Dict(vec![(Value::str("k"), Value::List(vec![]))])),
            b"\x80\x02}(X\x01\x00\x00\x00k]u."
        );
    }
}
