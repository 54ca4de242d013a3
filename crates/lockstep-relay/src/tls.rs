//! TLS for the WebSocket listener (`wss://`): a certificate chain and a
//! private key from PEM files, with rustls on ring.

use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// Where the WebSocket listener's certificate and key are.
///
/// ```
/// let config: lockstep_relay::RelayConfig = toml::from_str(r#"
///     [tls]
///     cert = "/etc/lockstep/fullchain.pem"
///     key = "/etc/lockstep/privkey.pem"
/// "#)?;
/// assert!(config.tls.is_some());
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file did not read or parse as PEM.
    #[error("{path}: {source}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{0}: no certificate in the file")]
    NoCertificate(PathBuf),
    /// rustls refused the pair (a key that does not match, say).
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Refused(#[from] rustls::Error),
}

/// The acceptor for `files`, checked now so a relay that cannot serve
/// `wss://` says so before it listens.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    fn pem(path: &std::path::Path) -> impl Fn(rustls::pki_types::pem::Error) -> TlsError + '_ {
        move |source| TlsError::Pem {
            path: path.to_path_buf(),
            source,
        }
    }
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(pem(&files.cert))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem(&files.cert))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(files.cert.clone()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(pem(&files.key))?;
    // ring builds with a C compiler alone (aws-lc-rs wants CMake). rustls
    // 0.23.48 deprecates ring's provider for lacking post-quantum key
    // exchange: a build against it would warn in every game that uses us.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
