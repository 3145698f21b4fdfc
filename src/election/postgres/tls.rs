//! TLS for PostgreSQL: rustls as libpq's sslmode asks for it, and the warning about a password
//! used without a verified certificate.

use super::*;

/// Whether the warning about a password used without a verified certificate has been given
/// (once per process).
pub(super) static CLEARTEXT_WARNED: AtomicBool = AtomicBool::new(false);

/// What a TLS connection checks of the server's certificate, as libpq's `sslmode` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// `allow`, `prefer`, and `require` without a CA file: encrypted, not authenticated.
    Nothing,
    /// `verify-ca`, and `require` with a CA file: the chain, not the host name.
    Chain,
    /// `verify-full`: the chain and the host name.
    Full,
}

/// Makes the rustls connector: the CA file given (`sslrootcert`, or `--cacert`), else the
/// platform's trust store, checked as far as `verify` says.
pub fn rustls_connector(
    ca: Option<&[u8]>,
    verify: Verify,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = if verify == Verify::Nothing {
        None
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(pem) => {
                for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("CA certificate: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("CA certificate: {e}"))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        if roots.is_empty() {
            return Err("no CA certificate to verify the server with".into());
        }
        Some(
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| e.to_string())?,
        )
    };
    let verifier = Arc::new(Verifier {
        inner,
        check_name: verify == Verify::Full,
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The server certificate check of one `sslmode`. Handshake signatures are always verified
/// (they prove the server holds the key of the certificate it sent).
#[derive(Debug)]
struct Verifier {
    /// `None`: the certificate itself is not checked (libpq's `prefer` and `require`).
    inner: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    /// Whether the certificate must name the host (`verify-full`).
    check_name: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &rustls_pki_types::CertificateDer<'_>,
        intermediates: &[rustls_pki_types::CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        let Some(inner) = &self.inner else {
            return Ok(rustls::client::danger::ServerCertVerified::assertion());
        };
        match inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
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
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
