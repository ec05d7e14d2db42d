//! TLS for the native protocol: TLS 1.3 only (QUIC), ALPN `dt-rdzv/1`, and how a client
//! trusts the server: a pinned SHA-256 certificate fingerprint (what `dt-rdzv serve` prints
//! when it generates its certificate) or a CA bundle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::error::NativeError;

/// The ALPN protocol id of the native protocol.
pub const ALPN: &[u8] = b"dt-rdzv/1";

/// How a client decides to trust the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Accept exactly the certificate with this SHA-256 fingerprint (`sha256:` prefix, hex
    /// digits with or without colons), whatever its names.
    Fingerprint(String),
    /// Verify the chain against the CA certificates in this PEM file, and the server name.
    CaFile(PathBuf),
}

/// `sha256:ab:cd:...` of a DER certificate.
pub fn fingerprint(cert_der: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, cert_der);
    let hex: Vec<String> = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{}", hex.join(":"))
}

/// The 32 bytes of a fingerprint string.
pub fn parse_fingerprint(s: &str) -> Result<[u8; 32], NativeError> {
    let hex: String = s
        .trim()
        .trim_start_matches("sha256:")
        .chars()
        .filter(|c| *c != ':')
        .collect();
    let bad = || NativeError::Config(format!("not a SHA-256 fingerprint: {s:?}"));
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// ring's provider with TLS 1.3 suites ordered for handshake cost: AES-128-GCM with SHA-256
/// first. SHA-256 runs on the CPU's SHA extensions where SHA-384 (the default first suite's
/// hash) has none; with the HKDF work of a QUIC handshake, SHA-384 was ~7 % of a member's
/// join on both sides. AES-256 stays available to peers that insist.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite as cs;
    Arc::new(CryptoProvider {
        cipher_suites: vec![
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
        ],
        ..rustls::crypto::ring::default_provider()
    })
}

#[derive(Debug)]
struct Pinned {
    sha256: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref());
        if got.as_ref() == self.sha256 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "server certificate {} is not the pinned one",
                fingerprint(end_entity.as_ref())
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A QUIC client configuration that trusts the server as `trust` says.
pub fn client_config(trust: &Trust) -> Result<quinn::ClientConfig, NativeError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| NativeError::Config(e.to_string()))?;
    let mut tls = match trust {
        Trust::Fingerprint(fp) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                sha256: parse_fingerprint(fp)?,
                provider,
            }))
            .with_no_client_auth(),
        Trust::CaFile(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| NativeError::Config(format!("{}: {e}", path.display())))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| NativeError::Config(e.to_string()))?;
    Ok(quinn::ClientConfig::new(Arc::new(quic)))
}

/// Every certificate in a PEM file.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, NativeError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| NativeError::Config(format!("{}: {e}", path.display())))?
        .collect();
    let certs = certs.map_err(|e| NativeError::Config(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(NativeError::Config(format!(
            "{}: no certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}
