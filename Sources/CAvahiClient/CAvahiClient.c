#include "CAvahiClient.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// One pointer per function, set once by load() under pthread_once and only read afterwards.
#define CAVAHI_POINTER(library, type, name, parameters, arguments) \
    static type(*p_##name) parameters; \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), type(*) parameters), #name " differs from Avahi's header");
#define CAVAHI_POINTER_VOID(library, name, parameters, arguments) CAVAHI_POINTER(library, void, name, parameters, arguments)
CAVAHI_FUNCTIONS(CAVAHI_POINTER, CAVAHI_POINTER_VOID)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int outcome = -1;
static char error_text[512];

static void *open_library(const char *soname) {
    // RTLD_LOCAL: Avahi's symbols stay out of the global scope (no clash with a copy the
    // application may link itself). Never closed: its threads and callbacks outlive any caller.
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(error_text, sizeof error_text, "%s (Avahi's client library) cannot be loaded: %s", soname,
            why != NULL ? why : "unknown error");
    }
    return handle;
}

static void load(void) {
    void *common = open_library(CAVAHI_COMMON_SONAME);
    if (common == NULL) return;
    void *client = open_library(CAVAHI_CLIENT_SONAME);
    if (client == NULL) return;
#define CAVAHI_RESOLVE(library, type, name, parameters, arguments) \
    p_##name = (__typeof__(p_##name))dlsym(library, #name); \
    if (p_##name == NULL) { \
        snprintf(error_text, sizeof error_text, "%s has no %s", \
            library == client ? CAVAHI_CLIENT_SONAME : CAVAHI_COMMON_SONAME, #name); \
        return; \
    }
#define CAVAHI_RESOLVE_VOID(library, name, parameters, arguments) CAVAHI_RESOLVE(library, void, name, parameters, arguments)
    CAVAHI_FUNCTIONS(CAVAHI_RESOLVE, CAVAHI_RESOLVE_VOID)
#undef CAVAHI_RESOLVE
#undef CAVAHI_RESOLVE_VOID
    outcome = 0;
}

int cavahi_load(void) {
    pthread_once(&once, load);
    return outcome;
}

const char *cavahi_load_error(void) {
    pthread_once(&once, load);
    return outcome == 0 ? NULL : error_text;
}

#define CAVAHI_WRAPPER(library, type, name, parameters, arguments) \
    type c##name parameters { return p_##name arguments; }
#define CAVAHI_WRAPPER_VOID(library, name, parameters, arguments) \
    void c##name parameters { p_##name arguments; }
CAVAHI_FUNCTIONS(CAVAHI_WRAPPER, CAVAHI_WRAPPER_VOID)
