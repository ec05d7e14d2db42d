//! The server's TLS identity: a certificate and key from PEM files, or a self-signed
//! certificate generated at start-up whose fingerprint clients pin.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::native::{ALPN, fingerprint, read_certs};

/// A certificate chain and its key.
#[derive(Debug)]
pub struct Identity {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// Whether it was generated at start-up.
    pub generated: bool,
    /// A generated identity's certificate and key as PEM.
    pem: Option<(String, String)>,
}

impl Identity {
    /// Reads a PEM certificate chain and its PEM private key.
    pub fn from_files(cert: &Path, key: &Path) -> std::io::Result<Self> {
        let chain = read_certs(cert).map_err(std::io::Error::other)?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", key.display())))?;
        Ok(Self {
            chain,
            key,
            generated: false,
            pem: None,
        })
    }

    /// A fresh self-signed certificate (ECDSA P-256) for these names.
    pub fn generate(names: &[String]) -> std::io::Result<Self> {
        let ck = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| std::io::Error::other(format!("cannot generate a certificate: {e}")))?;
        Ok(Self {
            chain: vec![ck.cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der())),
            generated: true,
            pem: Some((ck.cert.pem(), ck.key_pair.serialize_pem())),
        })
    }

    /// Writes a generated certificate and its key as PEM to files that must not exist yet
    /// (the key readable by its owner only).
    pub fn write(&self, cert: &Path, key: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let Some((cert_pem, key_pem)) = &self.pem else {
            return Err(std::io::Error::other(
                "only a generated identity is written out",
            ));
        };
        let create = |path: &Path, mode: u32, text: &str| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        create(key, 0o600, key_pem)?;
        create(cert, 0o644, cert_pem)
    }

    /// `sha256:...` of the leaf certificate, for clients to pin.
    pub fn fingerprint(&self) -> String {
        fingerprint(self.chain[0].as_ref())
    }

    /// The QUIC server configuration: TLS 1.3, ALPN `dt-rdzv/1`, no client certificates.
    pub(crate) fn quic_server_config(
        &self,
        idle_timeout: std::time::Duration,
    ) -> std::io::Result<quinn::ServerConfig> {
        let mut tls = rustls::ServerConfig::builder_with_provider(crate::native::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(std::io::Error::other)?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        // No session tickets: members connect once (a reconnect pays one full handshake), and
        // two tickets per connection were a third of the server's handshake messages, a
        // lock on a 256-entry session cache, and work on every member.
        tls.send_tls13_tickets = 0;
        tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(std::io::Error::other)?;
        let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(quic));
        let mut transport = quinn::TransportConfig::default();
        transport
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(idle_timeout).map_err(std::io::Error::other)?,
            ))
            .max_concurrent_bidi_streams(4u32.into())
            .max_concurrent_uni_streams(0u32.into());
        crate::native::control_transport(&mut transport, 256 << 10);
        // Members acknowledge what the server sends at once (ACK frequency extension,
        // threshold 0) instead of after their 25 ms ACK delay: the server sends little (a
        // Joined, a Welcome, round changes), so this costs no extra packets, and a delayed
        // ACK that fires a millisecond late loses the race with the server's probe timeout
        // (RTT + 25 ms on loopback or a LAN). While 4096 members joined, those spurious probes
        // and the ACKs they drew were up to a sixth of the datagrams.
        let mut ack = quinn::AckFrequencyConfig::default();
        ack.ack_eliciting_threshold(0u32.into());
        transport.ack_frequency_config(Some(ack));
        cfg.transport_config(Arc::new(transport));
        Ok(cfg)
    }
}
