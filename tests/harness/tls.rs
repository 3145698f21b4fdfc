//! Certificates for the TLS tests, made with openssl: a CA, a server certificate for 127.0.0.1
//! and a client certificate.

use std::process::Command;

use super::Scratch;

fn openssl(dir: &Scratch, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir.path(""))
        .args(args)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `scratch`.
pub fn make_certificates(scratch: &Scratch) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=leader-exec-test-ca",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(scratch, &ca);
    std::fs::write(
        scratch.path("ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    for name in ["server", "client"] {
        let mut req = vec!["req", "-subj"];
        let subject = format!("/CN={name}");
        req.push(&subject);
        req.extend(ec);
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        req.extend(["-keyout", &key, "-out", &csr]);
        openssl(scratch, &req);
        openssl(
            scratch,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "ext",
                "-out",
                &crt,
            ],
        );
    }
}

/// A rustls server configuration with `make_certificates`' server certificate (for 127.0.0.1,
/// signed by `ca.crt`), for the fake servers that speak TLS.
pub fn tls_server_config(scratch: &Scratch) -> std::sync::Arc<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(scratch.path("server.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(scratch.path("server.key")).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    std::sync::Arc::new(config)
}
