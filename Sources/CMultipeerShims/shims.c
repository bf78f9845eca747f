#include "CMultipeerShims.h"
#include <openssl/crypto.h>
#include <sodium.h>

int mp_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

int mp_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}

int mp_SSL_CTX_get_min_proto_version(SSL_CTX *ctx) {
    return (int)SSL_CTX_get_min_proto_version(ctx);
}

int mp_SSL_CTX_get_max_proto_version(SSL_CTX *ctx) {
    return (int)SSL_CTX_get_max_proto_version(ctx);
}

int mp_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *cert) {
    return (int)SSL_CTX_add1_chain_cert(ctx, cert);
}

int mp_SSL_CTX_set1_groups_list(SSL_CTX *ctx, const char *list) {
    return (int)SSL_CTX_set1_groups_list(ctx, list);
}

int mp_SSL_get_negotiated_group(SSL *ssl) {
    return (int)SSL_get_negotiated_group(ssl);
}

void mp_OPENSSL_free(void *pointer) {
    OPENSSL_free(pointer);
}

STACK_OF(X509) *mp_sk_X509_new_null(void) {
    return sk_X509_new_null();
}

int mp_sk_X509_num(const STACK_OF(X509) *stack) {
    return sk_X509_num(stack);
}

X509 *mp_sk_X509_value(const STACK_OF(X509) *stack, int index) {
    return sk_X509_value(stack, index);
}

int mp_sk_X509_push(STACK_OF(X509) *stack, X509 *cert) {
    return sk_X509_push(stack, cert);
}

void mp_sk_X509_pop_free(STACK_OF(X509) *stack) {
    sk_X509_pop_free(stack, X509_free);
}

void mp_sk_X509_free(STACK_OF(X509) *stack) {
    sk_X509_free(stack);
}

long mp_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

unsigned long mp_XN_FLAG_RFC2253_UTF8(void) {
    return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB;
}

int mp_sodium_init_once(void) {
    // sodium_init returns 1 when already initialised; both are success.
    return sodium_init() < 0 ? -1 : 0;
}
