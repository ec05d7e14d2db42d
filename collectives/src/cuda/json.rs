//! [`CudaStatus::to_json`]: the status as one JSON object (what the C ABI hands out).

use std::fmt::Write;

use super::status::{CudaStatus, LibStatus};

impl CudaStatus {
    /// The status as a JSON object with the fields' names: `usable`, `reason`,
    /// `device_count`, `built_with_cuda`, `cuda_api`, and `driver` and `nccl`, each an object
    /// of [`LibStatus`]'s fields (`found`, `path`, `version`, `source`, `error`, `features`,
    /// `tried`). Absent values are `null`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        out.push_str("\"usable\":");
        out.push_str(if self.usable { "true" } else { "false" });
        out.push_str(",\"reason\":");
        opt_str(&mut out, self.reason.as_deref());
        out.push_str(",\"device_count\":");
        match self.device_count {
            Some(n) => {
                let _ = write!(out, "{n}");
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"built_with_cuda\":");
        out.push_str(if self.built_with_cuda {
            "true"
        } else {
            "false"
        });
        out.push_str(",\"cuda_api\":");
        opt_str(&mut out, self.cuda_api.as_deref());
        out.push_str(",\"driver\":");
        lib(&mut out, &self.driver);
        out.push_str(",\"nccl\":");
        lib(&mut out, &self.nccl);
        out.push('}');
        out
    }
}

fn lib(out: &mut String, lib: &LibStatus) {
    out.push_str("{\"found\":");
    out.push_str(if lib.found { "true" } else { "false" });
    for (key, value) in [
        ("path", &lib.path),
        ("version", &lib.version),
        ("source", &lib.source),
        ("error", &lib.error),
    ] {
        let _ = write!(out, ",\"{key}\":");
        opt_str(out, value.as_deref());
    }
    for (key, list) in [("features", &lib.features), ("tried", &lib.tried)] {
        let _ = write!(out, ",\"{key}\":[");
        for (i, item) in list.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            string(out, item);
        }
        out.push(']');
    }
    out.push('}');
}

fn opt_str(out: &mut String, value: Option<&str>) {
    match value {
        Some(s) => string(out, s),
        None => out.push_str("null"),
    }
}

/// A JSON string: quotes, backslashes and control characters escaped.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_nulls() {
        let status = CudaStatus::from_parts(
            LibStatus {
                found: false,
                error: Some("a \"b\"\\c\nd\u{1}".into()),
                tried: vec!["x: y: z".into()],
                ..LibStatus::default()
            },
            LibStatus {
                found: true,
                path: Some("/l/libnccl.so.2".into()),
                version: Some("2.30.7".into()),
                features: vec!["ncclSend".into(), "ncclRecv".into()],
                ..LibStatus::default()
            },
            None,
        );
        let json = status.to_json();
        assert!(json.starts_with("{\"usable\":false,\"reason\":\"a \\\"b\\\"\\\\c\\nd\\u0001\""));
        assert!(json.contains(",\"device_count\":null,"));
        assert!(json.contains(
            "\"driver\":{\"found\":false,\"path\":null,\"version\":null,\"source\":null,\
             \"error\":\"a \\\"b\\\"\\\\c\\nd\\u0001\",\"features\":[],\"tried\":[\"x: y: z\"]}"
        ));
        assert!(json.contains(
            "\"nccl\":{\"found\":true,\"path\":\"/l/libnccl.so.2\",\"version\":\"2.30.7\",\
             \"source\":null,\"error\":null,\"features\":[\"ncclSend\",\"ncclRecv\"],\"tried\":[]}}"
        ));
    }
}
