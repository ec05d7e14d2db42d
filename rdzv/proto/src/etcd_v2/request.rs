//! The v2 keys API's request parameters, parsed and checked as etcd 3.4's `v2http` does
//! (the same error codes and causes). Unknown parameters are ignored, as etcd ignores them.

use super::error::{ErrorCode, V2Error};

/// The HTTP method of a `/v2/keys` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Read or watch.
    Get,
    /// Set, create, update, compare-and-swap, refresh.
    Put,
    /// Create an in-order key.
    Post,
    /// Delete, compare-and-delete.
    Delete,
}

/// A write's options (PUT and POST).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOpts {
    /// `value` (absent: empty).
    pub value: Option<String>,
    /// `dir=true`: a directory.
    pub dir: bool,
    /// `ttl` in seconds (absent or empty: permanent).
    pub ttl: Option<u64>,
    /// `prevExist`.
    pub prev_exist: Option<bool>,
    /// `prevValue`.
    pub prev_value: Option<String>,
    /// `prevIndex`.
    pub prev_index: Option<u64>,
    /// `refresh=true`: reset the TTL, keep the value, tell no watcher.
    pub refresh: bool,
}

/// A delete's options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOpts {
    /// `dir=true`.
    pub dir: bool,
    /// `recursive=true`.
    pub recursive: bool,
    /// `prevValue`.
    pub prev_value: Option<String>,
    /// `prevIndex`.
    pub prev_index: Option<u64>,
}

/// A read's options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GetOpts {
    /// `recursive=true`.
    pub recursive: bool,
    /// `wait=true`: a watch.
    pub wait: bool,
    /// `waitIndex`.
    pub wait_index: Option<u64>,
}

/// A parsed `/v2/keys` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V2Request {
    /// GET.
    Get(GetOpts),
    /// PUT.
    Put(PutOpts),
    /// POST.
    Post(PutOpts),
    /// DELETE.
    Delete(DeleteOpts),
}

/// The parameters of one request, body fields first (as Go's `r.Form` orders them).
pub struct Params<'a>(pub &'a [(String, String)]);

impl Params<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn bool(&self, name: &str) -> Result<Option<bool>, V2Error> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => parse_bool(v).map(Some).ok_or_else(|| {
                V2Error::request(
                    ErrorCode::InvalidField,
                    format!("invalid value for {name:?}"),
                )
            }),
        }
    }

    fn flag(&self, name: &str) -> Result<bool, V2Error> {
        Ok(self.bool(name)?.unwrap_or(false))
    }

    fn index(&self, name: &str) -> Result<Option<u64>, V2Error> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                V2Error::request(ErrorCode::IndexNaN, format!("invalid value for {name:?}"))
            }),
        }
    }

    fn ttl(&self) -> Result<Option<u64>, V2Error> {
        match self.get("ttl") {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                V2Error::request(ErrorCode::TtlNaN, "invalid value for \"ttl\"".to_owned())
            }),
        }
    }

    fn prev_value(&self) -> Result<Option<String>, V2Error> {
        match self.get("prevValue") {
            Some("") => Err(V2Error::request(
                ErrorCode::PrevValueRequired,
                "\"prevValue\" cannot be empty",
            )),
            v => Ok(v.map(str::to_owned)),
        }
    }
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Parses and checks a request's parameters.
pub fn parse(method: Method, params: &Params<'_>) -> Result<V2Request, V2Error> {
    // etcd checks these for every method before looking at what the method needs.
    let recursive = params.flag("recursive")?;
    params.flag("sorted")?;
    let wait = params.flag("wait")?;
    let dir = params.flag("dir")?;
    params.flag("quorum")?;
    params.flag("stream")?;
    let prev_index = params.index("prevIndex")?;
    let wait_index = params.index("waitIndex")?;
    let prev_value = params.prev_value()?;
    let ttl = params.ttl()?;
    // etcd names this one without quotes.
    let prev_exist = params.bool("prevExist").map_err(|mut e| {
        e.cause = "invalid value for prevExist".to_owned();
        e
    })?;
    let refresh = params.flag("refresh")?;
    let value = params.get("value").map(str::to_owned);
    if refresh {
        if value.is_some() {
            return Err(V2Error::request(
                ErrorCode::RefreshValue,
                "A value was provided on a refresh",
            ));
        }
        if ttl.is_none() {
            return Err(V2Error::request(
                ErrorCode::RefreshTtlRequired,
                "No TTL value set",
            ));
        }
    }
    Ok(match method {
        Method::Get => V2Request::Get(GetOpts {
            recursive,
            wait,
            wait_index,
        }),
        Method::Delete => V2Request::Delete(DeleteOpts {
            dir,
            recursive,
            prev_value,
            prev_index,
        }),
        Method::Put | Method::Post => {
            let opts = PutOpts {
                value,
                dir,
                ttl,
                prev_exist,
                prev_value,
                prev_index,
                refresh,
            };
            if method == Method::Put {
                V2Request::Put(opts)
            } else {
                V2Request::Post(opts)
            }
        }
    })
}
