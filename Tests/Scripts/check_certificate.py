#!/usr/bin/env python3
"""Independent check of a peer certificate written by mpc-certgen, with pyca/cryptography.

usage: check_certificate.py CHAIN.pem CA.pem
Checks the leaf's extensions and that the CA's key signed the next certificate up.
Prints OK or the first failure and exits 1.
"""
import sys

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    chain = x509.load_pem_x509_certificates(open(sys.argv[1], "rb").read())
    anchors = x509.load_pem_x509_certificates(open(sys.argv[2], "rb").read())
    leaf = chain[0]
    ext = leaf.extensions
    basic = ext.get_extension_for_class(x509.BasicConstraints)
    if basic.value.ca or not basic.critical:
        fail("basicConstraints must be critical CA:false")
    usage = ext.get_extension_for_class(x509.KeyUsage).value
    if not usage.digital_signature or usage.key_cert_sign:
        fail("keyUsage must be digitalSignature only")
    eku = ext.get_extension_for_class(x509.ExtendedKeyUsage).value
    if ExtendedKeyUsageOID.CLIENT_AUTH not in eku or ExtendedKeyUsageOID.SERVER_AUTH not in eku:
        fail("extendedKeyUsage must have clientAuth and serverAuth")
    ext.get_extension_for_class(x509.SubjectKeyIdentifier)
    aki = ext.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ext.get_extension_for_class(x509.SubjectAlternativeName)
    if leaf.serial_number <= 0 or leaf.serial_number.bit_length() < 100:
        fail(f"serial {leaf.serial_number:x} is not a random 128-bit number")
    if leaf.version != x509.Version.v3:
        fail("not an X.509 v3 certificate")
    issuer = chain[1] if len(chain) > 1 else anchors[0]
    issuer_ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    if aki.key_identifier != issuer_ski:
        fail("authorityKeyIdentifier does not name the issuer's key")
    leaf.verify_directly_issued_by(issuer)
    print(f"OK {leaf.subject.rfc4514_string()}")


if __name__ == "__main__":
    main()
