//! The native rendezvous' settings, with provenance: explicit values, then `DTCOMM_RDZV_*`,
//! then OCI Data Science's variables, then defaults. One copy of these rules for every front
//! end (Python's `dtcomm._native.settings`, the C ABI's `dtcomm_comm_init`, `dtrun` and the
//! torchrun handler call it).

use std::time::Duration;

use super::super::{NATIVE_PORT, STORE_PORT, Sourced, join_host_port, s, split_host_port};

/// What a caller passes explicitly (each `None` falls back to the environment).
#[derive(Debug, Clone, Default)]
pub struct NativeExplicit {
    /// `host[:port]`, several comma-separated.
    pub endpoint: Option<String>,
    /// The job (run id).
    pub job: Option<String>,
    /// `(min, max)` members.
    pub members: Option<(u32, u32)>,
    /// The server's token or the job's.
    pub token: Option<String>,
    /// `sha256:...` of the server's certificate.
    pub fingerprint: Option<String>,
    /// A CA certificate file.
    pub cacert: Option<String>,
    /// `host:port` of the server's TCPStore port.
    pub store: Option<String>,
    /// Seconds to wait for more members once `min` are there.
    pub last_call: Option<f64>,
    /// Seconds a round may take to form.
    pub join_timeout: Option<f64>,
}

/// Everything needed to connect to the native port and join a job.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeSettings {
    /// Endpoints, comma-separated, each `host:port`.
    pub endpoint: Sourced<String>,
    /// The token (empty: a server with `--no-auth`). Never printed.
    pub token: Sourced<String>,
    /// The pinned certificate fingerprint.
    pub fingerprint: Sourced<Option<String>>,
    /// The CA certificate file.
    pub cacert: Sourced<Option<String>>,
    /// The server's TCPStore port (the store path only).
    pub store: Sourced<String>,
    /// The job.
    pub job: Sourced<String>,
    /// This member's id.
    pub member: Sourced<String>,
    /// This member's node.
    pub node: Sourced<String>,
    /// Whether it joins as the job's main member.
    pub main: Sourced<bool>,
    /// `(min, max)` members.
    pub members: Sourced<(u32, u32)>,
    /// Seconds to wait for more members once `min` are there.
    pub last_call: Sourced<f64>,
    /// Seconds a round may take to form.
    pub join_timeout: Sourced<f64>,
    /// Whether the job ends when its main member leaves.
    pub ephemeral: Sourced<bool>,
    /// Rounds the job may start because a member was lost.
    pub max_restarts: Sourced<Option<u32>>,
    /// Seconds a member keeps reconnecting when the server goes away (0: never).
    pub reconnect: Sourced<f64>,
    /// The name sent in the TLS handshake.
    pub server_name: String,
}

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn set(env: Env<'_>, var: &str) -> Option<String> {
    env(var)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// OCI's loose booleans: `1`, `true`, `yes`, `on` (any case) are true.
pub fn loose_bool(text: &str) -> bool {
    matches!(
        text.trim().to_lowercase().as_str(),
        "1" | "true" | "t" | "yes" | "y" | "on"
    )
}

/// `N` or `MIN:MAX` as `(min, max)`; `var` names the source in errors.
pub fn parse_members(text: &str, var: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{var}={text:?}: expected N or MIN:MAX");
    let (lo, hi) = match text.split_once(':') {
        Some((lo, hi)) => (lo, Some(hi)),
        None => (text, None),
    };
    let mn: u32 = lo.trim().parse().map_err(|_| bad())?;
    let mx: u32 = match hi {
        Some(h) => h.trim().parse().map_err(|_| bad())?,
        None => mn,
    };
    if mn < 1 || mx < mn {
        return Err(format!("{var}={text:?}: need 1 <= MIN <= MAX"));
    }
    Ok((mn, mx))
}

fn seconds(env: Env<'_>, var: &str) -> Result<Option<f64>, String> {
    let Some(t) = set(env, var) else {
        return Ok(None);
    };
    let v: f64 = t
        .parse()
        .map_err(|_| format!("{var}={t:?} is not a number of seconds"))?;
    dtcomm::secs::limit(v).map_err(|e| format!("{var}={t:?}: {e}"))?;
    Ok(Some(v))
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer of its length; gethostname NUL-terminates within it or truncates.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".into()
    }
}

impl NativeSettings {
    /// Resolves the settings from `ex` and `env`. Errors name the variable and its value.
    pub fn resolve(ex: &NativeExplicit, env: Env<'_>) -> Result<NativeSettings, String> {
        let (ep_text, ep_src) = match &ex.endpoint {
            Some(e) => (e.clone(), "explicit"),
            None => (
                set(env, "DTCOMM_RDZV_ENDPOINT").ok_or(
                    "the native rendezvous needs DTCOMM_RDZV_ENDPOINT=host:29401".to_owned(),
                )?,
                "DTCOMM_RDZV_ENDPOINT",
            ),
        };
        // Several servers may be given, comma-separated: the first that answers is used and a
        // member whose server goes silent rejoins through the next.
        let entries = ep_text
            .split(',')
            .filter(|e| !e.trim().is_empty())
            .map(|e| split_host_port(e, NATIVE_PORT))
            .collect::<Result<Vec<_>, _>>()?;
        let Some((host, _)) = entries.first().cloned() else {
            return Err(format!("rendezvous endpoint {ep_text:?}: no host"));
        };
        let endpoint = s(
            entries
                .iter()
                .map(|(h, p)| join_host_port(h, *p))
                .collect::<Vec<_>>()
                .join(","),
            ep_src,
        );

        let token = if let Some(t) = &ex.token {
            s(t.clone(), "explicit")
        } else if let Some(t) = env("DTCOMM_RDZV_TOKEN") {
            s(t.trim().to_owned(), "DTCOMM_RDZV_TOKEN")
        } else if let Some(f) = set(env, "DTCOMM_RDZV_TOKEN_FILE") {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| format!("DTCOMM_RDZV_TOKEN_FILE={f:?}: {e}"))?;
            s(
                text.lines().next().unwrap_or("").trim().to_owned(),
                "DTCOMM_RDZV_TOKEN_FILE",
            )
        } else {
            s(String::new(), "none (a server with --no-auth)")
        };

        let fingerprint = match &ex.fingerprint {
            Some(f) if !f.is_empty() => s(Some(f.clone()), "explicit"),
            _ => s(
                set(env, "DTCOMM_RDZV_FINGERPRINT"),
                "DTCOMM_RDZV_FINGERPRINT",
            ),
        };
        let cacert = match &ex.cacert {
            Some(c) if !c.is_empty() => s(Some(c.clone()), "explicit"),
            _ => s(set(env, "DTCOMM_RDZV_CACERT"), "DTCOMM_RDZV_CACERT"),
        };
        match (&fingerprint.value, &cacert.value) {
            (Some(_), Some(_)) => {
                return Err("set DTCOMM_RDZV_FINGERPRINT or DTCOMM_RDZV_CACERT, not both".into());
            }
            (None, None) => {
                return Err(format!(
                    "native rendezvous at {}: say how to trust the server: \
                     DTCOMM_RDZV_FINGERPRINT=sha256:... (printed by `dt-rdzv serve` as \
                     'dt-rdzv listening native=ADDR fingerprint=...') or DTCOMM_RDZV_CACERT=ca.pem",
                    endpoint.value
                ));
            }
            _ => {}
        }

        let store = if let Some(st) = &ex.store {
            s(st.clone(), "explicit")
        } else if let Some(st) = set(env, "DTCOMM_RDZV_STORE") {
            let (h, p) = split_host_port(&st, STORE_PORT)?;
            s(join_host_port(&h, p), "DTCOMM_RDZV_STORE")
        } else {
            s(
                join_host_port(&host, STORE_PORT),
                format!("native host, port {STORE_PORT}"),
            )
        };

        let oci_mode = set(env, "OCI__MODE").unwrap_or_default().to_uppercase();
        let job = match &ex.job {
            Some(j) => s(j.clone(), "explicit"),
            None => {
                let mut vars = vec!["DTCOMM_RUN_ID", "TORCHELASTIC_RUN_ID"];
                if !oci_mode.is_empty() {
                    vars.push("JOB_OCID");
                }
                vars.iter()
                    .find_map(|v| set(env, v).map(|x| s(x, *v)))
                    .unwrap_or_else(|| s("dtcomm".into(), "default"))
            }
        };
        let node = match set(env, "DTCOMM_RDZV_NODE") {
            Some(n) => s(n, "DTCOMM_RDZV_NODE"),
            None => s(host_name(), "host name"),
        };
        let member = match set(env, "DTCOMM_RDZV_MEMBER") {
            Some(m) => s(m, "DTCOMM_RDZV_MEMBER"),
            None => s(format!("{}:{}", node.value, std::process::id()), "node:pid"),
        };
        let main = s(
            oci_mode == "MAIN",
            if oci_mode.is_empty() {
                "default"
            } else {
                "OCI__MODE"
            },
        );

        let members = if let Some(m) = ex.members {
            s(m, "explicit")
        } else if let Some(m) = set(env, "DTCOMM_RDZV_MEMBERS") {
            s(
                parse_members(&m, "DTCOMM_RDZV_MEMBERS")?,
                "DTCOMM_RDZV_MEMBERS",
            )
        } else if oci_mode == "MAIN" || oci_mode == "WORKER" {
            match set(env, "OCI__WORKER_COUNT") {
                Some(c) => {
                    let n: u32 = c
                        .parse()
                        .map_err(|_| format!("OCI__WORKER_COUNT={c:?} is not a whole number"))?;
                    s((n + 1, n + 1), "OCI__WORKER_COUNT + 1 (main)")
                }
                None => s((2, 2), "OCI default (1 worker + main)"),
            }
        } else {
            s((1, 1024), "default (elastic 1..1024)")
        };

        for (name, v) in [
            ("last_call", ex.last_call),
            ("join_timeout", ex.join_timeout),
        ] {
            if let Some(v) = v {
                dtcomm::secs::limit(v).map_err(|e| format!("{name}={v:e}: {e}"))?;
            }
        }
        let last_call = match (ex.last_call, seconds(env, "DTCOMM_RDZV_LAST_CALL")?) {
            (Some(v), _) => s(v, "explicit"),
            (None, Some(v)) => s(v, "DTCOMM_RDZV_LAST_CALL"),
            (None, None) => s(3.0, "default"),
        };
        let join_timeout = if let Some(v) = ex.join_timeout {
            s(v, "explicit")
        } else if let Some(v) = seconds(env, "DTCOMM_RDZV_JOIN_TIMEOUT")? {
            s(v, "DTCOMM_RDZV_JOIN_TIMEOUT")
        } else if let Some(v) = seconds(env, "OCI__TIMEOUT")? {
            s(v, "OCI__TIMEOUT")
        } else {
            s(600.0, "default")
        };
        let ephemeral = if let Some(e) = set(env, "DTCOMM_RDZV_EPHEMERAL") {
            s(loose_bool(&e), "DTCOMM_RDZV_EPHEMERAL")
        } else if let Some(e) = set(env, "OCI__EPHEMERAL") {
            s(loose_bool(&e), "OCI__EPHEMERAL")
        } else {
            s(false, "default")
        };
        let max_restarts = match set(env, "DTCOMM_RDZV_MAX_RESTARTS") {
            Some(r) => s(
                Some(r.parse::<u32>().map_err(|_| {
                    format!("DTCOMM_RDZV_MAX_RESTARTS={r:?} is not a whole number")
                })?),
                "DTCOMM_RDZV_MAX_RESTARTS",
            ),
            None => s(None, "default (no limit)"),
        };
        let reconnect = match seconds(env, "DTCOMM_RDZV_RECONNECT")? {
            Some(v) => s(v, "DTCOMM_RDZV_RECONNECT"),
            None => s(60.0, "default"),
        };
        Ok(NativeSettings {
            endpoint,
            token,
            fingerprint,
            cacert,
            store,
            job,
            member,
            node,
            main,
            members,
            last_call,
            join_timeout,
            ephemeral,
            max_restarts,
            reconnect,
            server_name: set(env, "DTCOMM_RDZV_SERVER_NAME").unwrap_or_else(|| "localhost".into()),
        })
    }

    /// The join deadline as a duration.
    pub fn join_deadline(&self) -> Duration {
        dtcomm::secs::saturating(self.join_timeout.value)
    }

    /// One line for the start-up log: every value with its source (the token's source only).
    pub fn log_line(&self) -> String {
        let (mn, mx) = self.members.value;
        let size = if mn == mx {
            mn.to_string()
        } else {
            format!("{mn}:{mx}")
        };
        let trust = match &self.fingerprint.value {
            Some(_) => format!("fingerprint ({})", self.fingerprint.source),
            None => format!(
                "cacert={} ({})",
                self.cacert.value.as_deref().unwrap_or(""),
                self.cacert.source
            ),
        };
        format!(
            "native rdzv={} ({}) job={} ({}) member={} ({}) node={} members={size} ({}) \
             main={} ({}) join_timeout={}s ({}) ephemeral={} ({}) store={} ({}) trust={trust} \
             token=({})",
            self.endpoint.value,
            self.endpoint.source,
            self.job.value,
            self.job.source,
            self.member.value,
            self.member.source,
            self.node.value,
            self.members.source,
            if self.main.value { "True" } else { "False" },
            self.main.source,
            self.join_timeout.value,
            self.join_timeout.source,
            if self.ephemeral.value {
                "True"
            } else {
                "False"
            },
            self.ephemeral.source,
            self.store.value,
            self.store.source,
            self.token.source,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(ex: &NativeExplicit, vars: &[(&str, &str)]) -> Result<NativeSettings, String> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NativeSettings::resolve(ex, &|k| env.get(k).cloned())
    }

    #[test]
    fn precedence_provenance_and_errors_naming_the_variable() {
        let base = [
            ("DTCOMM_RDZV_ENDPOINT", "a:1,b"),
            ("DTCOMM_RDZV_FINGERPRINT", "sha256:00"),
        ];
        let n = resolve(&NativeExplicit::default(), &base).unwrap();
        assert_eq!(n.endpoint.value, "a:1,b:29401");
        assert_eq!(n.store.value, "a:29400");
        assert_eq!(n.members.value, (1, 1024));
        assert_eq!(n.job.value, "dtcomm");
        assert!(!n.log_line().contains("sha256"), "{}", n.log_line());

        let oci = [
            base[0],
            base[1],
            ("OCI__MODE", "MAIN"),
            ("OCI__WORKER_COUNT", "3"),
            ("JOB_OCID", "ocid1.job"),
            ("OCI__EPHEMERAL", "yes"),
        ];
        let n = resolve(&NativeExplicit::default(), &oci).unwrap();
        assert_eq!((n.members.value, n.main.value), ((4, 4), true));
        assert_eq!(
            (n.job.value.as_str(), n.ephemeral.value),
            ("ocid1.job", true)
        );

        let ex = NativeExplicit {
            job: Some("mine".into()),
            members: Some((2, 3)),
            ..NativeExplicit::default()
        };
        let n = resolve(&ex, &[base[0], base[1], ("DTCOMM_RUN_ID", "env")]).unwrap();
        assert_eq!(
            (n.job.source.as_str(), n.members.value),
            ("explicit", (2, 3))
        );

        for (vars, needle) in [
            (vec![base[0]], "how to trust the server"),
            (
                vec![base[0], base[1], ("DTCOMM_RDZV_CACERT", "ca.pem")],
                "not both",
            ),
            (
                vec![base[0], base[1], ("DTCOMM_RDZV_MEMBERS", "3:2")],
                "DTCOMM_RDZV_MEMBERS",
            ),
            (
                vec![base[0], base[1], ("DTCOMM_RDZV_LAST_CALL", "-1")],
                "DTCOMM_RDZV_LAST_CALL",
            ),
            (vec![base[1]], "DTCOMM_RDZV_ENDPOINT"),
            (
                vec![base[0], base[1], ("DTCOMM_RDZV_JOIN_TIMEOUT", "1e300")],
                "DTCOMM_RDZV_JOIN_TIMEOUT=\"1e300\": more than the longest wait",
            ),
            (
                vec![base[0], base[1], ("DTCOMM_RDZV_RECONNECT", "inf")],
                "DTCOMM_RDZV_RECONNECT",
            ),
        ] {
            let e = resolve(&NativeExplicit::default(), &vars).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
        let huge = NativeExplicit {
            join_timeout: Some(1e300),
            ..NativeExplicit::default()
        };
        let e = resolve(&huge, &base).unwrap_err();
        assert!(e.starts_with("join_timeout=1e300: more than"), "{e}");
    }
}
