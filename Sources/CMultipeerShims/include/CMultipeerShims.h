#ifndef C_MULTIPEER_SHIMS_H
#define C_MULTIPEER_SHIMS_H

// Function-like macros and type-generic stack helpers that Swift cannot import,
// wrapped as real functions. Prefixed mp_ to keep clear of OpenSSL's names.

#include <stddef.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/bio.h>

int mp_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);
int mp_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version);
int mp_SSL_CTX_get_min_proto_version(SSL_CTX *ctx);
int mp_SSL_CTX_get_max_proto_version(SSL_CTX *ctx);
int mp_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *cert);
/// Key exchange groups, colon-separated names such as "X25519:P-256"; 1 on success.
int mp_SSL_CTX_set1_groups_list(SSL_CTX *ctx, const char *list);
/// The NID of the group the handshake used, 0 before one is chosen.
int mp_SSL_get_negotiated_group(SSL *ssl);
void mp_OPENSSL_free(void *pointer);

STACK_OF(X509) *mp_sk_X509_new_null(void);
int mp_sk_X509_num(const STACK_OF(X509) *stack);
X509 *mp_sk_X509_value(const STACK_OF(X509) *stack, int index);
int mp_sk_X509_push(STACK_OF(X509) *stack, X509 *cert);
void mp_sk_X509_pop_free(STACK_OF(X509) *stack);
void mp_sk_X509_free(STACK_OF(X509) *stack);

long mp_BIO_get_mem_data(BIO *bio, char **data);

/// RFC 2253 name printing flags, UTF-8 kept as is (XN_FLAG_RFC2253 is a compound macro).
unsigned long mp_XN_FLAG_RFC2253_UTF8(void);

/// Receives bytes OpenSSL writes; must take all of them.
typedef void (*mp_bio_write_callback)(void *context, const char *data, size_t length);
/// Fills up to `length` bytes for OpenSSL to read; returns how many, 0 when none are waiting.
typedef size_t (*mp_bio_read_callback)(void *context, char *data, size_t length);

/// A BIO that calls `write` and `read` with `context` instead of buffering; freed with the SSL it is set on.
BIO *mp_callback_bio_new(void *context, mp_bio_write_callback write, mp_bio_read_callback read);

/// Bytes malloc has handed out and not taken back (glibc's mallinfo2); 0 where unknown.
size_t mp_heap_bytes_in_use(void);

/// Starts writing a file range back to storage without waiting (sync_file_range); 0 on success.
int mp_start_write_back(int descriptor, long long offset, long long length);
/// Waits until a file range is written back (not a durability barrier: fsync is); 0 on success.
int mp_finish_write_back(int descriptor, long long offset, long long length);

/// libsodium initialisation that is safe to call from many threads; 0 on success.
int mp_sodium_init_once(void);

#endif
