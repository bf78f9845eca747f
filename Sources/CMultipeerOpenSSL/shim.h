#ifndef C_MULTIPEER_OPENSSL_SHIM_H
#define C_MULTIPEER_OPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/opensslv.h>
#include <openssl/proverr.h>
#include <openssl/bn.h>
#include <openssl/asn1.h>
#endif
