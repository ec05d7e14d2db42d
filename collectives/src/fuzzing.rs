//! What the fuzz targets (`fuzz/fuzz_targets/data_plane_decode.rs`) drive: the data plane's
//! decoders on arbitrary bytes, each with the invariants it must keep asserted here (so a
//! violation is a crash the fuzzer reports). Not an API: hidden from the docs.

use crate::transport::control::{self, Control, ControlError};
use crate::transport::frame::{self, HEADER_LEN};

/// A data frame header from the first 32 bytes: whatever decodes re-encodes to exactly those
/// bytes (the header has no slack a sender could fill differently).
pub fn frame_header(bytes: &[u8]) {
    let Some(h) = bytes.get(..HEADER_LEN) else {
        return;
    };
    let h: [u8; HEADER_LEN] = h.try_into().expect("32 bytes");
    if let Ok((call, len)) = frame::decode(&h) {
        assert_eq!(
            frame::encode(&call, len),
            h,
            "{call:?} re-encoded differently"
        );
    }
}

/// What a control stream decodes to: the messages, then the error or the bytes left waiting.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    messages: Vec<Control>,
    end: Result<Vec<u8>, ControlError>,
}

/// Decodes `chunks` as they arrive, as TCP's control socket reader does with its buffer.
fn decode_stream<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let (mut messages, mut buf) = (Vec::new(), Vec::new());
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match control::decode(&buf) {
                Ok(Some((m, n))) => {
                    assert!(n > 0 && n <= buf.len(), "took {n} of {} bytes", buf.len());
                    // A message re-encodes to its bytes unless its reason was not UTF-8 or was
                    // longer than a sender sends.
                    let again = m.encode();
                    if again != buf[..n] {
                        assert!(
                            matches!(&m, Control::Abort { reason, .. }
                                if reason.contains('\u{fffd}') || n > again.len()),
                            "{m:?} re-encoded differently"
                        );
                    }
                    messages.push(m);
                    buf.drain(..n);
                }
                Ok(None) => break,
                Err(e) => {
                    return Outcome {
                        messages,
                        end: Err(e),
                    };
                }
            }
        }
    }
    Outcome {
        messages,
        end: Ok(buf),
    }
}

/// A control stream (`bytes[1..]`) read whole and in segments of `bytes[0]` + 1 bytes: the
/// same messages, the same error or the same bytes left over (the decoder keeps no state).
pub fn control_stream(bytes: &[u8]) {
    let Some((&cut, stream)) = bytes.split_first() else {
        return;
    };
    let whole = decode_stream([stream]);
    let pieces = decode_stream(stream.chunks(cut as usize + 1));
    assert_eq!(whole, pieces);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CallDesc, OpKind};
    use crate::dtype::DType;

    #[test]
    fn valid_inputs_pass_the_checks() {
        let call = CallDesc {
            op: OpKind::AllReduce,
            dtype: DType::F32,
            redop: None,
            count: 9,
            root: None,
            seq: 4,
        };
        frame_header(&frame::encode(&call, 36));
        frame_header(&[0; 40]);
        let mut s = vec![3];
        for m in [
            Control::Goodbye,
            Control::Abort {
                origin: 1,
                lost: Some(0),
                reason: "gone".into(),
            },
        ] {
            s.extend(m.encode());
        }
        s.extend([b'S', 1, 2]);
        control_stream(&s);
        control_stream(&[0, b'G', b'Z', b'G']);
    }
}
