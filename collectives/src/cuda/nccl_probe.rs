//! The NCCL half of [`cuda_status`](super::cuda_status): `dtcomm-nccl-sys`'s search.

use dtcomm_nccl_sys::{Nccl, SearchConfig, Source};

use super::status::{LibStatus, StatusOptions};

/// Loads NCCL as [`Nccl::load`] does, with `options.python_prefix` standing in for an unset
/// `VIRTUAL_ENV`.
pub(super) fn probe(options: &StatusOptions) -> LibStatus {
    let mut config = SearchConfig::from_env();
    let from_prefix = config.virtual_env.is_none() && options.python_prefix.is_some();
    if from_prefix {
        config.virtual_env = options.python_prefix.clone();
    }
    match Nccl::load_with(&config) {
        Ok(nccl) => LibStatus {
            found: true,
            path: Some(nccl.path().display().to_string()),
            version: Some(nccl.version().to_string()),
            source: Some(match nccl.source() {
                Source::VirtualEnv if from_prefix => "python prefix".to_string(),
                source => source.to_string(),
            }),
            error: None,
            features: nccl
                .features()
                .iter()
                .filter(|probe| probe.available)
                .map(|probe| probe.symbol.to_string())
                .collect(),
            tried: nccl.skipped().iter().map(ToString::to_string).collect(),
        },
        Err(error) => LibStatus {
            found: false,
            error: Some(error.to_string()),
            tried: error.attempts().iter().map(ToString::to_string).collect(),
            ..LibStatus::default()
        },
    }
}
