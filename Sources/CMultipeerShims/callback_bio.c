// A BIO that hands bytes straight to the owner's callbacks, so TLS records move between
// OpenSSL and the owner's buffers without the extra copy (and growth) of a memory BIO.

#include "CMultipeerShims.h"
#include <pthread.h>

typedef struct {
    void *context;
    mp_bio_write_callback write;
    mp_bio_read_callback read;
} callback_bio_state;

static BIO_METHOD *callback_method;
static pthread_once_t callback_method_once = PTHREAD_ONCE_INIT;

static int callback_bio_write(BIO *bio, const char *data, int length) {
    callback_bio_state *state = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (state == NULL || length < 0) return -1;
    if (length == 0) return 0;
    // The owner always takes everything: its outbound buffer grows until it is sent.
    state->write(state->context, data, (size_t)length);
    return length;
}

static int callback_bio_read(BIO *bio, char *data, int length) {
    callback_bio_state *state = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (state == NULL || length < 0) return -1;
    if (length == 0) return 0;
    size_t copied = state->read(state->context, data, (size_t)length);
    if (copied == 0) {
        BIO_set_retry_read(bio);  // nothing yet: OpenSSL reports SSL_ERROR_WANT_READ
        return -1;
    }
    return (int)copied;
}

static long callback_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)bio; (void)number; (void)pointer;
    switch (command) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_PENDING:
    case BIO_CTRL_WPENDING: return 0;
    default: return 0;
    }
}

static int callback_bio_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

static int callback_bio_destroy(BIO *bio) {
    if (bio == NULL) return 0;
    OPENSSL_free(BIO_get_data(bio));
    BIO_set_data(bio, NULL);
    return 1;
}

static void make_callback_method(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "swift-multipeer callback");
    if (method == NULL) return;
    if (!BIO_meth_set_write(method, callback_bio_write) || !BIO_meth_set_read(method, callback_bio_read)
        || !BIO_meth_set_ctrl(method, callback_bio_ctrl) || !BIO_meth_set_create(method, callback_bio_create)
        || !BIO_meth_set_destroy(method, callback_bio_destroy)) {
        BIO_meth_free(method);
        return;
    }
    callback_method = method;
}

BIO *mp_callback_bio_new(void *context, mp_bio_write_callback write, mp_bio_read_callback read) {
    pthread_once(&callback_method_once, make_callback_method);
    if (callback_method == NULL) return NULL;
    callback_bio_state *state = OPENSSL_zalloc(sizeof(callback_bio_state));
    if (state == NULL) return NULL;
    BIO *bio = BIO_new(callback_method);
    if (bio == NULL) {
        OPENSSL_free(state);
        return NULL;
    }
    state->context = context;
    state->write = write;
    state->read = read;
    BIO_set_data(bio, state);
    return bio;
}
